"""The names under which files record the classes of a network: registered, not module paths.

Component files (their base's ``architecture`` and structure hash ``modules_sha256``) and
learned-state files and checkpoints (their ``architecture`` hash) name the class of every
module of the network they belong to. A class of this library is recorded under its
registered name (``"avalanche-tmc:LayerFeatures"``), written out in :data:`ARCHITECTURES`:
never the module that holds it nor the class's own name, so moving or renaming a class changes
no file. Any other class (torch's, or your own) is recorded as ``module.QualName``;
:func:`register_architecture` gives one of yours a name of its own, to keep its files valid
wherever the class moves. :data:`EARLIER_NAMES` are read, never written: the names files
written before a class was renamed record for it.
"""

from typing import Dict

from torch import nn

from ..composition.statistics import RandomReLUFeatures
from ..models.frozen_trunk import ChainSegment
from ..models.training_free import LayerFeatures, TrainingFreeClassifier
from ..tangent import TangentModel
from ..training.adaptation import TangentFeatures
from ..training.losses import RescaledSquareLoss

__all__ = ["ARCHITECTURES", "EARLIER_NAMES", "register_architecture", "architecture_name"]

ARCHITECTURES: Dict[str, type] = {
    "avalanche-tmc:TangentModel": TangentModel,
    "avalanche-tmc:LayerFeatures": LayerFeatures,
    "avalanche-tmc:TrainingFreeClassifier": TrainingFreeClassifier,
    "avalanche-tmc:TangentFeatures": TangentFeatures,
    "avalanche-tmc:RandomReLUFeatures": RandomReLUFeatures,
    "avalanche-tmc:RescaledSquareLoss": RescaledSquareLoss,
    "avalanche-tmc:ChainSegment": ChainSegment,
}
"""Registered name -> class: every ``nn.Module`` class of this library, and those registered
with :func:`register_architecture`. The names are part of the file format: a renamed class
keeps its name here (or, given a new one, its old one moves to :data:`EARLIER_NAMES`)."""

EARLIER_NAMES: Dict[str, type] = {
    # written by pre-release builds (before the class was renamed): read, never written
    "avalanche-tmc:AnalyticClassifier": TrainingFreeClassifier,
    # the benchmark runner's own class before the library took it (issue 60): its files record this path
    "benchmarks.networks.trunk.ChainSegment": ChainSegment,
}
"""Earlier name -> class: names that files written before a class was renamed record for it.
A file is checked against them as well (:func:`architecture_name` with ``earlier=True``);
none is ever written, and none can be registered again."""


def register_architecture(name: str, cls: type) -> type:
    """Record ``cls`` (an ``nn.Module`` class) in files as ``name`` instead of its module
    path; returns ``cls``. A name is given once and a class gets one name: a file's identity
    must not depend on which registration ran last."""
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise TypeError(f"Only nn.Module classes are registered, got {cls!r}.")
    if not isinstance(name, str) or not name.strip() or "\n" in name:
        raise ValueError(f"An architecture name is a non-empty line of text, got {name!r}.")
    if name in EARLIER_NAMES:
        raise ValueError(f"The architecture name {name!r} is an earlier name of {EARLIER_NAMES[name]!r} (files "
                         "written before it was renamed record it): choose another.")
    if ARCHITECTURES.get(name, cls) is not cls:
        raise ValueError(f"The architecture name {name!r} is already registered for {ARCHITECTURES[name]!r}.")
    named = [n for n, c in ARCHITECTURES.items() if c is cls and n != name]
    if named:
        raise ValueError(f"{cls.__qualname__} is already registered as {named[0]!r}.")
    ARCHITECTURES[name] = cls
    return cls


def architecture_name(cls: type, *, earlier: bool = False) -> str:
    """The name files record for ``cls``: its registered name, else ``module.QualName``.
    With ``earlier``, the name files written before its rename record, where it has one
    (:data:`EARLIER_NAMES`): what checking such a file compares with."""
    names = (EARLIER_NAMES, ARCHITECTURES) if earlier else (ARCHITECTURES,)
    for name, registered in ((n, c) for table in names for n, c in table.items()):
        if registered is cls:
            return name
    return f"{cls.__module__}.{cls.__qualname__}"

