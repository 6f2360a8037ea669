"""What base a component belongs to, and whether two components share one.

The **base** of a tangent component is the network's class, a hash of its module
structure, a hash of the pre-trained weights *and buffers* (BatchNorm statistics), the
linearized names and shapes, the head size and ``δ``'s dtype; that of an experience's
head statistics is the feature network's class, structure and weights hash, the head
type, the random projection and the class count. Components combine only on the same
base; anything else is refused with an error naming the first difference.

The structure hash names every module's class by its registered name
(:func:`~avalanche_tmc.files.architectures.architecture_name`), never by the module that
holds it, so moving a class never changes the hashes of files already written. A file
written before one of its classes was renamed (its earlier name,
:data:`~avalanche_tmc.files.architectures.EARLIER_NAMES`) is of the same base as the model
today: :func:`model_reference` records the structure as it named it, and
:func:`check_same_base` accepts either.
"""

import hashlib
from collections import OrderedDict
from typing import Any, Dict, Mapping, Optional

import torch
from torch import Tensor

from ..composition.additive import tensors_sha256
from ..tangent import TangentModel, find_head
from .architectures import architecture_name
from .component import Component, IncompatibleComponentsError

__all__ = [
    "state_dict_sha256", "weights_sha256", "structure", "tangent_base", "statistics_base", "model_reference",
    "check_same_base", "check_network",
]


def state_dict_sha256(state: Mapping[str, Tensor]) -> str:
    """SHA-256 of a state dict (names, shapes, dtypes and values, in name order):
    parameters and buffers (BatchNorm statistics) alike."""
    return tensors_sha256(state)


def weights_sha256(net: torch.nn.Module) -> str:
    """SHA-256 of a network's weights and buffers (:func:`state_dict_sha256` of its state dict)."""
    return state_dict_sha256(net.state_dict())


def structure(net: torch.nn.Module, *, earlier: bool = False) -> Dict[str, str]:
    """A network's class (``architecture``) and the SHA-256 of its module structure
    (``modules_sha256``: every module's name and registered class name, in order); with
    ``earlier``, as files written before a class's rename named them."""
    modules = "\n".join(f"{name}:{architecture_name(type(m), earlier=earlier)}" for name, m in net.named_modules())
    return dict(architecture=architecture_name(type(net), earlier=earlier),
                modules_sha256=hashlib.sha256(modules.encode()).hexdigest())


def _head_size(model: TangentModel) -> Optional[int]:
    name = model.head_name
    if name is None:
        try:
            name = find_head(model.model)
        except ValueError:
            return None
    return int(getattr(model.model.get_submodule(name), "out_features", 0)) or None


def tangent_base(model: TangentModel) -> Dict[str, Any]:
    """The base a tangent component belongs to: the network's class and module structure,
    the hash of its pre-trained weights and buffers (BatchNorm statistics), the linearized
    names and shapes, the head size and δ's dtype."""
    dtypes = {str(p.dtype).replace("torch.", "") for p in model.delta_params}
    return dict(structure(model.model), weights_sha256=weights_sha256(model.model),
                head_size=_head_size(model), dtype=",".join(sorted(dtypes)),
                linearized=[[name, list(shape)] for name, shape in model.delta_shapes().items()])


def statistics_base(model: torch.nn.Module) -> Dict[str, Any]:
    """The base an :class:`~avalanche_tmc.TrainingFreeClassifier`'s statistics belong
    to: the feature network (class, structure, weights and buffers), the head type, the
    random projection (width and seed) and the number of classes."""
    return dict(structure(model.features), weights_sha256=weights_sha256(model.features),
                head_size=int(model.num_classes), head=model.head, projection_dim=model.projection_dim,
                projection_seed=model.seed)


_BASE_ORDER = (
    ("architecture", "network class"), ("modules_sha256", "module structure"), ("head_size", "head size"),
    ("linearized", "linearized parameters"), ("head", "head type"), ("projection_dim", "random projection width"),
    ("projection_seed", "random projection seed"), ("weights_sha256", "pre-trained weights or BatchNorm statistics"),
    ("dtype", "dtype"),
)


def _base_difference(a: Mapping[str, Any], b: Mapping[str, Any]) -> Optional[str]:
    """The first difference between two bases, in words (None when they are the same)."""
    for key, label in _BASE_ORDER:
        if a.get(key) == b.get(key):
            continue
        if key == "linearized":
            left, right = dict((n, tuple(s)) for n, s in a.get(key) or []), dict(
                (n, tuple(s)) for n, s in b.get(key) or [])
            only_a, only_b = sorted(set(left) - set(right)), sorted(set(right) - set(left))
            shapes = [f"{n}: {left[n]} vs {right[n]}" for n in left if n in right and left[n] != right[n]]
            parts = ([f"only in the first: {only_a[:5]}"] if only_a else []) + (
                [f"only in the second: {only_b[:5]}"] if only_b else []) + (
                [f"shapes differ: {'; '.join(shapes[:5])}"] if shapes else [])
            return f"the linearized parameters differ ({', '.join(parts) or 'order differs'})"
        shown = [str(v)[:16] + ("…" if len(str(v)) > 16 else "") for v in (a.get(key), b.get(key))]
        return f"the {label} differs ({shown[0]} vs {shown[1]})"
    return None


def model_reference(model: torch.nn.Module, name: str = "the model") -> Component:
    """An empty stand-in for ``model`` (a :class:`~avalanche_tmc.tangent.TangentModel` or an
    :class:`~avalanche_tmc.TrainingFreeClassifier`) to check files against with
    :func:`check_same_base`; ``name`` is how messages call it. Where the network has a class
    that files written before its rename name otherwise, its base also records the structure
    they record (``earlier_structure``), which :func:`check_same_base` accepts too."""
    tangent = isinstance(model, TangentModel)
    net = model.model if tangent else model.features
    base = tangent_base(model) if tangent else statistics_base(model)
    earlier = structure(net, earlier=True)
    if any(base[key] != value for key, value in earlier.items()):
        base["earlier_structure"] = earlier
    return Component("component", "delta" if tangent else "statistics", OrderedDict(), 1.0, [], base, path=name)


def _as_today(base: Mapping[str, Any], other: Mapping[str, Any]) -> Mapping[str, Any]:
    """``base``, with ``other``'s structure where ``base`` has the structure that files written
    before a class's rename record for ``other``'s network (its ``earlier_structure``)."""
    earlier = other.get("earlier_structure")
    if earlier and all(base.get(key) == value for key, value in earlier.items()):
        return dict(base, **{key: other.get(key) for key in earlier})
    return base


def check_network(composition: Component, net: torch.nn.Module, name: str = "the network") -> None:
    """Raise :class:`IncompatibleComponentsError` when ``net`` (a plain network, before it is
    wrapped) is not of the class and module structure tangent ``composition`` was trained on: the
    check :func:`check_same_base` makes later, made before anything is linearized, so that a
    wrong network is named as such rather than failing to linearize the file's parameters."""
    base = composition.base
    if composition.payload != "delta" or "architecture" not in base or "modules_sha256" not in base:
        return  # (statistics record their feature network, which the strategy cuts from net: checked there)
    for earlier in (False, True):
        mine = structure(net, earlier=earlier)
        if all(base.get(key) == value for key, value in mine.items()):
            return
    theirs = structure(net)["architecture"]
    other = "" if theirs != base["architecture"] else " of another module structure"
    raise IncompatibleComponentsError(
        f"{composition.name()} was trained on a {base['architecture']} network; {name} is a {theirs}{other}: give "
        "the model the files were trained with (the command line's --model; avalanche-tmc inspect FILE shows their "
        "base).")


def check_same_base(a: Component, b: Component) -> None:
    """Raise :class:`IncompatibleComponentsError` unless ``a`` and ``b`` can be combined:
    same payload and the same base, the message naming the first difference."""
    if a.payload != b.payload:
        raise IncompatibleComponentsError(
            f"{a.name()} holds {a.payload} and {b.name()} holds {b.payload}: tangent components and head "
            "statistics do not combine.")
    difference = _base_difference(_as_today(a.base, b.base), _as_today(b.base, a.base))
    if difference is not None:
        raise IncompatibleComponentsError(
            f"{a.name()} and {b.name()} come from different base models: {difference}. Components combine only "
            "if they were trained around the same pre-trained network (same weights and BatchNorm statistics), "
            "with the same head size and linearized parameters.")
