"""Keep the working directory off ``sys.path`` for the command line (standard library only,
so that it runs before anything a planted file could replace)."""

import os
import sys

_done = False


def drop_working_directory() -> None:
    """Remove the working directory that ``python -m`` puts first on ``sys.path`` (once per
    process), so that nothing the command imports later (scikit-learn, safetensors, a
    factory's dependencies) can be replaced by a file of the same name there.
    ``PYTHONPATH`` entries stay; ``python -P`` already leaves it out."""
    global _done
    if not _done and sys.path and not getattr(sys.flags, "safe_path", False) and sys.path[0] in ("", os.getcwd()):
        del sys.path[0]
    _done = True
