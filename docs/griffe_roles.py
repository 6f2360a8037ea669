"""Griffe extension for the API reference: Sphinx roles in docstrings become code.

The docstrings are written for Sphinx (``:class:`TangentModel```, ``:func:`compose```);
mkdocstrings renders them as Markdown, where such roles would show literally. This
rewrites ``:role:`target``` (and ``:role:`~target```) to ```target``` before rendering.
"""

import re

import griffe

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|mod|data|obj|exc):`~?([^`]+)`")


class SphinxRolesToCode(griffe.Extension):
    """Rewrite Sphinx cross-reference roles in every docstring to inline code."""

    def on_object(self, *, obj, **kwargs) -> None:
        """Called by Griffe for every loaded object."""
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(r"`\1`", obj.docstring.value)
