"""Old import paths of modules that moved, kept working for one release with a warning.

A module that moved leaves a two-line file at its old path::

    from avalanche_tmc._compat import moved_module_getattr
    __getattr__ = moved_module_getattr(__name__)

and an entry in :data:`MOVED_MODULES`. ``from avalanche_tmc.old import name`` then returns
the object from its new module and raises a :class:`DeprecationWarning` naming the new path.

Checkpoints and component files record the module path of every layer class
(``"avalanche_tmc.tangent.TangentModel"``); :func:`current_class_path` maps a recorded path
of this library to where that class lives now, so files written before a move still load.
"""

import importlib
import warnings
from typing import Any, Callable, Dict, Tuple

__all__ = ["MOVED_MODULES", "REMOVAL_VERSION", "moved_module_getattr", "current_class_path"]

# The release that removes the old paths.
REMOVAL_VERSION = "0.3.0"

# old module path -> the new modules that hold its public names, searched in this order
MOVED_MODULES: Dict[str, Tuple[str, ...]] = {}


def moved_module_getattr(old: str) -> Callable[[str], Any]:
    """The module-level ``__getattr__`` (PEP 562) of a moved module ``old``: every name is
    looked up in the new modules of :data:`MOVED_MODULES` and returned with a
    :class:`DeprecationWarning` that names its new path."""
    if old not in MOVED_MODULES:
        raise KeyError(f"{old!r} is not listed in avalanche_tmc._compat.MOVED_MODULES; add it with its new modules")

    def __getattr__(name: str) -> Any:
        if name.startswith("__"):  # import machinery probing dunders (__path__, __file__ ...)
            raise AttributeError(name)
        for new in MOVED_MODULES[old]:
            module = importlib.import_module(new)
            if hasattr(module, name):
                warnings.warn(f"{old}.{name} moved to {new}.{name}; import it from there (or from avalanche_tmc): "
                              f"the old path goes away in avalanche-tmc {REMOVAL_VERSION}",
                              DeprecationWarning, stacklevel=2)
                return getattr(module, name)
        raise AttributeError(f"module {old!r} has no attribute {name!r} (the module moved to "
                             f"{' / '.join(MOVED_MODULES[old])})")

    return __getattr__


def current_class_path(recorded: str) -> str:
    """``module.QualName`` of the class a recorded path of this library names today.

    Paths outside ``avalanche_tmc`` and paths that no longer resolve are returned unchanged
    (only modules of this library are imported, never one named by a file alone)."""
    if not recorded.startswith("avalanche_tmc."):
        return recorded
    parts = recorded.split(".")
    for split in range(len(parts) - 1, 0, -1):
        module_name, attributes = ".".join(parts[:split]), parts[split:]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                value: Any = importlib.import_module(module_name)
                for attribute in attributes:
                    value = getattr(value, attribute)
        except (ImportError, AttributeError):
            continue
        if isinstance(value, type):
            return f"{value.__module__}.{value.__qualname__}"
        return recorded
    return recorded
