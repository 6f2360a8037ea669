"""The names under which files record the classes of a network: registered, not module paths.

Component files (their base's ``architecture`` and structure hash ``modules_sha256``) and
learned-state files and checkpoints (their ``architecture`` hash) name the class of every
module of the network they belong to. A class of this library is recorded under its
registered name (``"avalanche-tmc:LayerFeatures"``), never under the module that holds it,
so moving a class from one module to another changes no file. Any other class (torch's, or
your own) is recorded as ``module.QualName``; :func:`register_architecture` gives one of
yours a name of its own, to keep its files valid wherever the class moves.
"""

from typing import Dict

from torch import nn

from ..composition.statistics import RandomReLUFeatures
from ..models.analytic import AnalyticClassifier, LayerFeatures
from ..tangent import TangentModel
from ..training.adaptation import TangentFeatures
from ..training.losses import RescaledSquareLoss

__all__ = ["ARCHITECTURES", "register_architecture", "architecture_name"]

ARCHITECTURES: Dict[str, type] = {}
"""Registered name -> class: every ``nn.Module`` class of this library, and those registered
with :func:`register_architecture`."""


def register_architecture(name: str, cls: type) -> type:
    """Record ``cls`` (an ``nn.Module`` class) in files as ``name`` instead of its module
    path; returns ``cls``. A name is given once and a class gets one name: a file's identity
    must not depend on which registration ran last."""
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise TypeError(f"Only nn.Module classes are registered, got {cls!r}.")
    if not isinstance(name, str) or not name.strip() or "\n" in name:
        raise ValueError(f"An architecture name is a non-empty line of text, got {name!r}.")
    if ARCHITECTURES.get(name, cls) is not cls:
        raise ValueError(f"The architecture name {name!r} is already registered for {ARCHITECTURES[name]!r}.")
    named = [n for n, c in ARCHITECTURES.items() if c is cls and n != name]
    if named:
        raise ValueError(f"{cls.__qualname__} is already registered as {named[0]!r}.")
    ARCHITECTURES[name] = cls
    return cls


def architecture_name(cls: type) -> str:
    """The name files record for ``cls``: its registered name, else ``module.QualName``."""
    for name, registered in ARCHITECTURES.items():
        if registered is cls:
            return name
    return f"{cls.__module__}.{cls.__qualname__}"


for _cls in (TangentModel, LayerFeatures, AnalyticClassifier, TangentFeatures, RandomReLUFeatures, RescaledSquareLoss):
    register_architecture(f"avalanche-tmc:{_cls.__name__}", _cls)
