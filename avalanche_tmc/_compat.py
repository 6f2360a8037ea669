"""Old import paths of modules that moved, kept working for one release with a warning.

A module that moved leaves a two-line file at its old path::

    from avalanche_tmc._compat import moved_module_getattr
    __getattr__ = moved_module_getattr(__name__)

and an entry in :data:`MOVED_MODULES`. ``from avalanche_tmc.old import name`` then returns
the object from its new module and raises a :class:`DeprecationWarning` naming the new path.

Checkpoints and component files hash the module path of every layer class of a network
(``"avalanche_tmc.analytic.LayerFeatures"``); :func:`recorded_class_path` gives the path a
class had before the move, so files and checkpoints written before a move still load.
"""

import importlib
import warnings
from typing import Any, Callable, Dict, Tuple

__all__ = ["MOVED_MODULES", "REMOVAL_VERSION", "RECORDED_AS", "moved_module_getattr", "recorded_class_path"]

# The release that removes the old paths.
REMOVAL_VERSION = "0.3.0"

# module -> the path its classes are recorded under, for modules that replaced an old module
# of the same import path by a package (``avalanche_tmc.tangent`` and ``avalanche_tmc.composition``
# became packages)
RECORDED_AS: Dict[str, str] = {
    "avalanche_tmc.tangent.model": "avalanche_tmc.tangent",
    "avalanche_tmc.composition.deltas": "avalanche_tmc.composition",
}

# old module path -> the new modules that hold its public names, searched in this order
MOVED_MODULES: Dict[str, Tuple[str, ...]] = {
    "avalanche_tmc.fast_tangent": ("avalanche_tmc.tangent", "avalanche_tmc.tangent.plan", "avalanche_tmc.tangent.trace",
                                  "avalanche_tmc.tangent.tree", "avalanche_tmc.tangent.rules.linear",
                                  "avalanche_tmc.tangent.rules.normalization", "avalanche_tmc.tangent.rules.attention"),
    "avalanche_tmc.additive": ("avalanche_tmc.composition.additive", "avalanche_tmc.composition.learner"),
    "avalanche_tmc.statistics": ("avalanche_tmc.composition.statistics",),
    "avalanche_tmc.ensemble": ("avalanche_tmc.composition.ensemble",),
    "avalanche_tmc.losses": ("avalanche_tmc.composition.losses",),
    "avalanche_tmc.batchnorm": ("avalanche_tmc.composition.batchnorm",),
    "avalanche_tmc.component_files": ("avalanche_tmc.files", "avalanche_tmc.files.component",
                                      "avalanche_tmc.files.bases", "avalanche_tmc.files.signing",
                                      "avalanche_tmc.files.filesystem", "avalanche_tmc.files.header",
                                      "avalanche_tmc.files.storage", "avalanche_tmc.files.arithmetic",
                                      "avalanche_tmc.files.learners"),
    "avalanche_tmc.plugin": ("avalanche_tmc.training.plugins.task_mask", "avalanche_tmc.training.plugins.composition",
                             "avalanche_tmc.training.plugins.tangent", "avalanche_tmc.training.divergence"),
    "avalanche_tmc.safety": ("avalanche_tmc.training.mixins", "avalanche_tmc.training.forgetting"),
    "avalanche_tmc.strategies": ("avalanche_tmc.training.strategies.tangent",),
    "avalanche_tmc.analytic": ("avalanche_tmc.models.analytic", "avalanche_tmc.training.strategies.analytic"),
    "avalanche_tmc.adaptation": ("avalanche_tmc.training.adaptation",
                                 "avalanche_tmc.training.strategies.adapt_then_compose"),
    "avalanche_tmc.checkpoint": ("avalanche_tmc.training.checkpoint",),
    "avalanche_tmc.metrics": ("avalanche_tmc.training.metrics",),
}


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


def recorded_class_path(cls: type) -> str:
    """The path under which checkpoints and component files record ``cls``: where the class
    lived before the layout moved it (``"avalanche_tmc.analytic.LayerFeatures"``), so a move
    never changes the structure hashes of the files and checkpoints that name it. Classes
    outside the moved modules keep their own ``module.QualName``."""
    for old, new_modules in MOVED_MODULES.items():
        if cls.__module__ in new_modules:
            return f"{old}.{cls.__qualname__}"
    return f"{RECORDED_AS.get(cls.__module__, cls.__module__)}.{cls.__qualname__}"
