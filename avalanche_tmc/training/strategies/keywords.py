"""Positional arguments past Avalanche's three, refused (:class:`ThreePositionalArguments`).

What it is for: every Avalanche strategy takes ``model, optimizer, criterion`` by position,
and Avalanche 0.6 still maps any further positional argument onto the constructor's next
parameters, in each class's own order. ``TMCStrategy(model, None, None, 0.01)`` then set
``lr`` where ``TMEStrategy(model, None, None, 0.01)`` set ``beta``, and ``TMCStrategy(model,
opt, crit, 64, 3)`` (Naive's ``train_mb_size, train_epochs``) silently became a learning
rate of 64 and β = 3. A fourth positional argument is refused, naming the keywords to use.
"""

import functools
import inspect
from typing import Any, List

__all__ = ["ThreePositionalArguments", "POSITIONAL"]

POSITIONAL = ("model", "optimizer", "criterion")
"""What every Avalanche strategy takes by position."""


def _keywords(init: Any) -> List[str]:
    """The parameters ``init`` takes after Avalanche's three, in order (``**kwargs`` aside)."""
    try:
        parameters = inspect.signature(init).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in parameters if p.name not in ("self", *POSITIONAL)
            and p.kind not in (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)]


class ThreePositionalArguments:
    """A mixin for strategy classes (before Avalanche's template in the bases): their
    constructor takes at most ``model, optimizer, criterion`` by position; more raise a
    ``TypeError`` naming the keywords to use, before anything is built."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)  # Avalanche's template wraps __init__ for its legacy positional calls
        init = cls.__init__
        keywords = _keywords(init)  # (inspect follows __wrapped__ to the constructor's own signature)

        @functools.wraps(init)
        def checked(self: Any, *args: Any, **kw: Any) -> None:
            if len(args) > len(POSITIONAL):
                extra = len(args) - len(POSITIONAL)
                these = ", ".join(keywords[:extra]) or "its other arguments"
                raise TypeError(
                    f"{type(self).__name__} takes {', '.join(POSITIONAL)} by position, as every Avalanche strategy, "
                    f"and the rest by keyword only: {extra} more positional argument(s) given ({args[3:]!r}). Name "
                    f"them, e.g. {type(self).__name__}(model, optimizer, criterion, lr=..., beta=..., "
                    f"train_mb_size=..., train_epochs=...): here the next parameters are {these}, in Avalanche's "
                    "Naive train_mb_size and train_epochs, so a positional value would mean another thing in each.")
            init(self, *args, **kw)

        cls.__init__ = checked  # type: ignore[misc]
