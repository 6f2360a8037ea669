"""Components as files: one tangent component (or one experience's head statistics) per
safetensors file, composed, forgotten and inspected file by file.

A **component file** holds what its experience contributes to a composition:

* the tensors: ``δ_t`` (linearized parameter name -> tensor), or the experience's
  statistics (``gram``, ``cross``, ``target_gram``, ``count``, ``class_sum``,
  ``class_count``, see :mod:`avalanche_tmc.statistics`);
* its weight ``w_t`` (1, or the sample count with ``weighting="samples"``; statistics:
  the sample count), the experience id and its classes (task label -> classes), the
  training settings;
* the **base** it belongs to: the network's class, a hash of its module structure, a
  hash of the pre-trained weights *and buffers* (BatchNorm statistics), the linearized
  names and shapes, the head size and ``δ``'s dtype (statistics: the feature network's
  hash, the head type, projection and class count). Components combine only on the same
  base; anything else is refused with an error naming the first difference.

A **composition file** holds the weighted sum ``S = Σ w_t δ_t`` (statistics: their sum),
the total weight ``W`` and its members (experience, weight, classes, content hash of
each member's file): ``δ = S / W``. Forgetting a member subtracts its file exactly as
:class:`~avalanche_tmc.composition.DeltaComposition` does. Composing component files in
a given order gives bit for bit the sum that ``DeltaComposition`` builds in that order.

Safety: files are read with ``safetensors`` (a JSON header and raw tensor bytes); no
pickle, nothing in a file is ever executed. A file that is truncated, not safetensors,
not written by this module, whose tensors do not match the content hash in its header,
or that holds NaN/inf is refused with :class:`ComponentFileError`. Files are written
atomically (a temporary file renamed over the target).
"""

import hashlib
import json
import math
import os
import struct
import tempfile
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Union

import torch
from torch import Tensor

from .statistics import STAT_KEYS, add_statistics
from .tangent import Delta, TangentModel, find_head

__all__ = [
    "FORMAT", "FORMAT_VERSION", "ComponentFileError", "IncompatibleComponentsError", "Component", "state_dict_sha256",
    "content_sha256", "tangent_base", "statistics_base", "model_reference", "check_same_base", "tangent_component",
    "statistics_component", "strategy_settings", "strategy_components", "save_component", "load_component",
    "component_paths", "load_components", "components_for", "compose_components", "forget_component",
    "composed_delta", "describe",
]

FORMAT = "avalanche-tmc"
"""The ``format`` entry of every file this module writes."""

FORMAT_VERSION = 1
"""Files of a newer version are refused (an older reader cannot know what changed)."""

PAYLOADS = ("delta", "statistics")
KINDS = ("component", "composition")
_MAX_HEADER = 64 * 1024 * 1024  # safetensors' own limit is 100 MB


class ComponentFileError(ValueError):
    """A file that is not a readable component or composition file: missing, truncated,
    not safetensors, not written by avalanche-tmc, a newer format, content not matching
    its hash, or NaN/inf inside."""


class IncompatibleComponentsError(ValueError):
    """Components that cannot be combined: another base model, head size, linearized set
    or kind; an experience twice; forgetting a file that is not a member."""


@dataclass
class Component:
    """A component or a composition, as held in one file.

    :ivar kind: ``"component"`` (one experience) or ``"composition"`` (a weighted sum).
    :ivar payload: ``"delta"`` (tangent) or ``"statistics"`` (analytic heads).
    :ivar tensors: ``δ_t`` or the statistics (component); ``S`` or the summed statistics
        (composition).
    :ivar weight: ``w_t`` (component) or ``W = Σ w_t`` (composition).
    :ivar members: one entry per experience: ``experience``, ``weight``, ``classes``
        (task label -> classes), ``sha256`` (content hash of its component).
    :ivar settings: how it was trained (component) or ``{}`` (composition).
    :ivar base: the base it belongs to (see the module docstring).
    :ivar path: the file it was read from, if any.
    """

    kind: str
    payload: str
    tensors: "OrderedDict[str, Tensor]"
    weight: float
    members: List[Dict[str, Any]]
    base: Dict[str, Any]
    settings: Dict[str, Any] = field(default_factory=dict)
    path: Optional[str] = None

    @property
    def experience(self):
        """The experience id of a component (``None`` for a composition)."""
        return self.members[0]["experience"] if self.kind == "component" else None

    @property
    def experiences(self) -> List[Any]:
        """The experience ids of every member."""
        return [m["experience"] for m in self.members]

    @property
    def classes(self) -> Dict[int, List[int]]:
        """Task label -> classes, over every member."""
        out: Dict[int, set] = {}
        for member in self.members:
            for task, classes in member["classes"].items():
                out.setdefault(int(task), set()).update(classes)
        return {task: sorted(classes) for task, classes in sorted(out.items())}

    @property
    def sha256(self) -> str:
        """Hash of the tensors (names, dtypes, shapes, bytes): the file's identity."""
        return content_sha256(self.tensors)

    def name(self) -> str:
        """How messages refer to it: its file, or its experience."""
        if self.path is not None:
            return os.path.basename(self.path)
        return f"component of experience {self.experience}" if self.kind == "component" else "composition"


# ---------------------------------------------------------------------------- hashing, bases


def _update_with_tensor(digest, name: str, tensor: Tensor) -> None:
    tensor = tensor.detach().to("cpu").contiguous()
    digest.update(f"{name}:{tuple(tensor.shape)}:{tensor.dtype}".encode())
    digest.update(tensor.view(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")


def state_dict_sha256(state: Mapping[str, Tensor]) -> str:
    """SHA-256 of a state dict (names, shapes, dtypes and values, in name order):
    parameters and buffers (BatchNorm statistics) alike."""
    digest = hashlib.sha256()
    for name in sorted(state):
        _update_with_tensor(digest, name, state[name])
    return digest.hexdigest()


def content_sha256(tensors: Mapping[str, Tensor]) -> str:
    """SHA-256 of a file's tensors (what its header records)."""
    return state_dict_sha256(tensors)


def _structure(net: torch.nn.Module) -> Dict[str, str]:
    modules = "\n".join(f"{name}:{type(m).__module__}.{type(m).__qualname__}" for name, m in net.named_modules())
    return dict(architecture=f"{type(net).__module__}.{type(net).__qualname__}",
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
    return dict(_structure(model.model), weights_sha256=state_dict_sha256(model.model.state_dict()),
                head_size=_head_size(model), dtype=",".join(sorted(dtypes)),
                linearized=[[name, list(shape)] for name, shape in model.delta_shapes().items()])


def statistics_base(model) -> Dict[str, Any]:
    """The base an :class:`~avalanche_tmc.analytic.AnalyticClassifier`'s statistics belong
    to: the feature network (class, structure, weights and buffers), the head type, the
    random projection (width and seed) and the number of classes."""
    return dict(_structure(model.features), weights_sha256=state_dict_sha256(model.features.state_dict()),
                head_size=int(model.num_classes), head=model.head, projection_dim=model.projection_dim,
                projection_seed=model.seed)


_BASE_ORDER = (
    ("architecture", "network class"), ("modules_sha256", "module structure"), ("head_size", "head size"),
    ("linearized", "linearized parameters"), ("head", "head type"), ("projection_dim", "random projection width"),
    ("projection_seed", "random projection seed"), ("weights_sha256", "pre-trained weights or BatchNorm statistics"),
    ("dtype", "dtype"),
)


def _base_difference(a: Mapping[str, Any], b: Mapping[str, Any]) -> Optional[str]:
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


def model_reference(model, name: str = "the model") -> Component:
    """An empty stand-in for ``model`` (a :class:`~avalanche_tmc.tangent.TangentModel` or an
    :class:`~avalanche_tmc.analytic.AnalyticClassifier`) to check files against with
    :func:`check_same_base`; ``name`` is how messages call it."""
    if isinstance(model, TangentModel):
        return Component("component", "delta", OrderedDict(), 1.0, [], tangent_base(model), path=name)
    return Component("component", "statistics", OrderedDict(), 1.0, [], statistics_base(model), path=name)


def check_same_base(a: Component, b: Component) -> None:
    """Raise :class:`IncompatibleComponentsError` unless ``a`` and ``b`` can be combined:
    same payload and the same base, the message naming the first difference."""
    if a.payload != b.payload:
        raise IncompatibleComponentsError(
            f"{a.name()} holds {a.payload} and {b.name()} holds {b.payload}: tangent components and head "
            "statistics do not combine.")
    difference = _base_difference(a.base, b.base)
    if difference is not None:
        raise IncompatibleComponentsError(
            f"{a.name()} and {b.name()} come from different base models: {difference}. Components combine only "
            "if they were trained around the same pre-trained network (same weights and BatchNorm statistics), "
            "with the same head size and linearized parameters.")


# ---------------------------------------------------------------------------- building components


def _classes_json(classes: Optional[Mapping]) -> Dict[str, List[int]]:
    if classes is None:
        return {}
    return {str(int(task)): sorted(int(c) for c in values) for task, values in classes.items()}


def _clean_tensors(tensors: Mapping[str, Tensor]) -> "OrderedDict[str, Tensor]":
    return OrderedDict((name, t.detach().to("cpu").contiguous().clone()) for name, t in tensors.items())


def _component(payload: str, tensors, weight: float, base, experience, classes, settings) -> Component:
    tensors = _clean_tensors(tensors)
    member = dict(experience=experience, weight=float(weight), classes=_classes_json(classes),
                  sha256=content_sha256(tensors))
    return Component("component", payload, tensors, float(weight), [member], base, dict(settings or {}))


def tangent_component(model: TangentModel, delta: Mapping[str, Tensor], experience, *, weight: float = 1.0,
                      classes: Optional[Mapping] = None, settings: Optional[Mapping] = None) -> Component:
    """A tangent component of ``model``: ``delta`` (checked to fit the model), its weight,
    experience id, classes (task label -> classes) and training settings."""
    model.check_delta(delta)
    ordered = OrderedDict((name, delta[name]) for name in model.linearized_names)
    return _component("delta", ordered, weight, tangent_base(model), experience, classes, settings)


def statistics_component(model, stats: Mapping[str, Tensor], experience, *, classes: Optional[Mapping] = None,
                         settings: Optional[Mapping] = None) -> Component:
    """One experience's head statistics for an :class:`~avalanche_tmc.analytic.AnalyticClassifier`
    (weight: its sample count)."""
    missing = [k for k in STAT_KEYS if k not in stats]
    if missing:
        raise ValueError(f"Statistics lack {missing}; use head_statistics() to make them.")
    ordered = OrderedDict((k, stats[k]) for k in STAT_KEYS)
    return _component("statistics", ordered, float(stats["count"]), statistics_base(model), experience, classes,
                      settings)


def _optimizer_settings(strategy) -> Dict[str, Any]:
    optimizer = getattr(strategy, "optimizer", None)
    out = dict(train_epochs=getattr(strategy, "train_epochs", None), train_mb_size=getattr(strategy, "train_mb_size",
                                                                                           None))
    if optimizer is not None and optimizer.param_groups:
        out.update(optimizer=type(optimizer).__name__, lr=optimizer.param_groups[0].get("lr"))
    criterion = getattr(strategy, "_criterion", None)
    for name in ("alpha", "beta"):
        if hasattr(criterion, name):
            out[name] = float(getattr(criterion, name))
    return out


def strategy_settings(strategy) -> Dict[str, Any]:
    """The training settings recorded with a strategy's components."""
    settings = dict(strategy=type(strategy).__name__, **_optimizer_settings(strategy))
    plugin = getattr(strategy, "tangent_plugin", None)
    if plugin is not None:
        settings.update(mode=plugin.mode, weighting=plugin.weighting)
    else:
        settings.update(head=strategy.model.head, ridge_lambda=strategy.ridge_lambda)
    return settings


def _task_classes(strategy, key) -> Dict[int, List[int]]:
    """Task label -> classes of experience ``key`` as the strategy recorded them."""
    holder = getattr(strategy, "tangent_plugin", strategy)
    return getattr(holder, "component_classes", {}).get(key, {})


def strategy_components(strategy) -> List[Component]:
    """Every component a strategy holds, in the order learned: a TMC/TME strategy's
    ``δ_t`` (kept components) or an :class:`~avalanche_tmc.analytic.AnalyticHeadStrategy`'s
    statistics."""
    settings = strategy_settings(strategy)
    plugin = getattr(strategy, "tangent_plugin", None)
    if plugin is not None:
        if plugin.mode == "tmc-seq":
            raise ValueError("TMC-Seq components are not independent (each started from the composition before "
                             "it): they cannot be composed or forgotten on their own, so they are not saved as files.")
        weights = plugin.composition.weights
        return [tangent_component(strategy.model, delta, key, weight=weights[key],
                                  classes=_task_classes(strategy, key), settings=settings)
                for key, delta in plugin.components.items()]
    return [statistics_component(strategy.model, stats, key, classes=_task_classes(strategy, key), settings=settings)
            for key, stats in strategy.components.items()]


# ---------------------------------------------------------------------------- writing and reading


def save_component(component: Component, path: str) -> str:
    """Write ``component`` (or a composition) to ``path`` atomically; returns ``path``."""
    from safetensors.torch import save

    bad = [n for n, t in component.tensors.items() if t.is_floating_point() and not bool(torch.isfinite(t).all())]
    if bad:
        raise ValueError(f"{component.name()} holds NaN or inf (in {bad[:5]}): it is never written.")
    tensors = _clean_tensors(component.tensors)
    metadata = dict(
        format=FORMAT, format_version=str(FORMAT_VERSION), kind=component.kind, payload=component.payload,
        weight=json.dumps(float(component.weight)), members=json.dumps(component.members),
        base=json.dumps(component.base), settings=json.dumps(component.settings, default=str),
        content_sha256=content_sha256(tensors),
    )
    data = save(dict(tensors), metadata=metadata)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return path


def _refuse(path: str, why: str) -> ComponentFileError:
    return ComponentFileError(f"{path}: not a usable avalanche-tmc component file: {why}. Nothing was loaded.")


def _header(data: bytes, path: str) -> Dict[str, Any]:
    if len(data) < 8:
        raise _refuse(path, f"the file has {len(data)} bytes, too short for a safetensors header (truncated?)")
    (size,) = struct.unpack("<Q", data[:8])
    if size > min(_MAX_HEADER, len(data) - 8):
        raise _refuse(path, f"its header claims {size} bytes but the file has {len(data) - 8} after the length "
                            "(truncated, or not a safetensors file)")
    try:
        header = json.loads(data[8:8 + size].decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise _refuse(path, "its header is not JSON (not a safetensors file)") from None
    if not isinstance(header, dict) or not isinstance(header.get("__metadata__"), dict):
        raise _refuse(path, "it has no metadata (a safetensors file not written by avalanche-tmc)")
    return header


def _json_field(metadata: Mapping[str, str], key: str, path: str, kind):
    try:
        value = json.loads(metadata[key])
    except KeyError:
        raise _refuse(path, f"its metadata lacks {key!r}") from None
    except ValueError:
        raise _refuse(path, f"its metadata entry {key!r} is not JSON") from None
    if not isinstance(value, kind):
        raise _refuse(path, f"its metadata entry {key!r} is a {type(value).__name__}")
    return value


def _check_members(members: List[Any], path: str) -> None:
    for member in members:
        if not isinstance(member, dict) or not {"experience", "weight", "classes", "sha256"} <= set(member):
            raise _refuse(path, "a member entry lacks experience, weight, classes or sha256")
        if not isinstance(member["classes"], dict) or not all(
                isinstance(c, list) and all(isinstance(x, int) for x in c) for c in member["classes"].values()):
            raise _refuse(path, "a member's classes are not lists of integers")


def load_component(path: str) -> Component:
    """Read a component or composition file (never executing anything in it).

    :raises ComponentFileError: see :class:`ComponentFileError`.
    """
    from safetensors import SafetensorError
    from safetensors.torch import load

    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as error:
        raise ComponentFileError(f"{path}: cannot be read ({error.strerror or error}).") from None
    metadata = _header(data, path)["__metadata__"]
    if metadata.get("format") != FORMAT:
        raise _refuse(path, f"its format is {metadata.get('format')!r}, not {FORMAT!r}")
    try:
        version = int(metadata.get("format_version", ""))
    except ValueError:
        raise _refuse(path, "its format_version is not a number") from None
    if version > FORMAT_VERSION:
        raise _refuse(path, f"it is format version {version}; this avalanche-tmc reads up to {FORMAT_VERSION} "
                            "(upgrade avalanche-tmc)")
    kind, payload = metadata.get("kind"), metadata.get("payload")
    if kind not in KINDS or payload not in PAYLOADS:
        raise _refuse(path, f"unknown kind {kind!r} or payload {payload!r}")
    try:
        tensors = load(data)
    except (SafetensorError, ValueError, RuntimeError) as error:
        raise _refuse(path, f"its tensors cannot be read ({error})") from None
    weight = _json_field(metadata, "weight", path, (int, float))
    members = _json_field(metadata, "members", path, list)
    base = _json_field(metadata, "base", path, dict)
    settings = _json_field(metadata, "settings", path, dict)
    _check_members(members, path)
    if not math.isfinite(weight) or weight < 0 or (kind == "component" and (weight <= 0 or len(members) != 1)):
        raise _refuse(path, f"its weight {weight} or its {len(members)} member(s) do not make a {kind}")
    ordered = OrderedDict((name, tensors[name]) for name in (
        [n for n, _ in base.get("linearized", [])] if payload == "delta" and kind == "component" else tensors))
    if set(ordered) != set(tensors):
        raise _refuse(path, "its tensors are not the linearized parameters its base lists")
    if content_sha256(ordered) != metadata.get("content_sha256"):
        raise _refuse(path, "its tensors do not match the content hash in its header (corrupted or edited)")
    bad = [n for n, t in ordered.items() if t.is_floating_point() and not bool(torch.isfinite(t).all())]
    if bad:
        raise _refuse(path, f"it holds NaN or inf (in {bad[:5]})")
    if kind == "component" and members[0]["sha256"] != metadata["content_sha256"]:
        raise _refuse(path, "its member entry does not describe its own tensors")
    return Component(kind, payload, ordered, float(weight), members, base, settings, path=path)


def component_paths(paths: Union[str, Sequence[str]]) -> List[str]:
    """The ``.safetensors`` files of a directory (sorted by name), or the given paths."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out = []
    for path in paths:
        if os.path.isdir(path):
            out += sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(".safetensors"))
        else:
            out.append(str(path))
    return out


def load_components(paths: Union[str, Sequence[str]]) -> List[Component]:
    """:func:`load_component` on every file (a directory: its ``.safetensors`` files),
    ordered by experience id (compositions after the components, in name order)."""
    loaded = [load_component(p) for p in component_paths(paths)]

    def order(c: Component):
        numeric = isinstance(c.experience, int)
        return c.kind != "component", not numeric, c.experience if numeric else str(c.experience)

    return sorted(loaded, key=order)


def components_for(paths: Union[str, Sequence[str]], model, learned=(), name: str = "this strategy's model"
                   ) -> List[Component]:
    """The component files of ``paths`` (a directory: its ``.safetensors``), ordered by
    experience, each checked before any is used: a component (not a composition), of
    ``model``'s base, an experience not in ``learned`` and not twice.

    :raises IncompatibleComponentsError: naming the file and what does not fit.
    """
    components = load_components(paths)
    reference = model_reference(model, name)
    seen: Dict[str, str] = {}
    for component in components:
        if component.kind != "component":
            raise IncompatibleComponentsError(
                f"{component.name()} is a composition: a strategy is built from component files (one per "
                "experience); load a composition into a model with its δ (component_files.composed_delta).")
        check_same_base(reference, component)
        if component.experience in learned:
            raise IncompatibleComponentsError(f"Experience {component.experience} ({component.name()}) is already "
                                              "learned by this strategy; forget it first.")
        key = json.dumps(component.experience)
        if key in seen:
            raise IncompatibleComponentsError(f"{seen[key]} and {component.name()} hold the same experience "
                                              f"{component.experience}.")
        seen[key] = component.name()
    return components


# ---------------------------------------------------------------------------- composing and forgetting


def compose_components(components: Iterable[Component]) -> Component:
    """A composition of components and/or compositions, summed in the order given.

    For tangent components ``S`` is accumulated as ``S ← S + w_t δ_t`` from zeros, in
    ``δ``'s dtype: exactly what :class:`~avalanche_tmc.composition.DeltaComposition`
    does, so the result is bit for bit its sum. Statistics are added with
    :func:`~avalanche_tmc.statistics.add_statistics`.

    :raises IncompatibleComponentsError: different bases (naming the difference), or an
        experience present twice.
    """
    components = list(components)
    if not components:
        raise ValueError("Nothing to compose: give at least one component file.")
    first = components[0]
    seen: Dict[Any, str] = {}
    for component in components:
        check_same_base(first, component)
        for member in component.members:
            key = json.dumps(member["experience"])
            if key in seen:
                raise IncompatibleComponentsError(
                    f"Experience {member['experience']} is in both {seen[key]} and {component.name()}: a composition "
                    "holds each experience once (forget it from one of them first).")
            seen[key] = component.name()
    total: Optional["OrderedDict[str, Tensor]"] = None
    weight = 0.0
    for component in components:
        if component.payload == "statistics":
            total = OrderedDict((k, t.clone()) for k, t in component.tensors.items()) if total is None else \
                add_statistics(total, component.tensors)
        else:
            if total is None:
                total = OrderedDict((n, torch.zeros_like(t)) for n, t in component.tensors.items())
            if component.kind == "component":
                total = OrderedDict((n, total[n] + float(component.weight) * component.tensors[n].to(total[n]))
                                    for n in total)
            else:
                total = OrderedDict((n, total[n] + component.tensors[n].to(total[n])) for n in total)
        weight += float(component.weight)
    members = [m for c in components for m in c.members]
    return Component("composition", first.payload, total, weight, members, dict(first.base))


def forget_component(composition: Component, component: Component) -> Component:
    """The composition without ``component`` (exactly: ``S − w δ``, ``W − w``; statistics:
    their difference). ``component`` must be the very file that was composed (its
    content hash is checked).

    :raises IncompatibleComponentsError: another base, or not a member of the composition.
    """
    if composition.kind != "composition":
        raise IncompatibleComponentsError(f"{composition.name()} is a component, not a composition: forget from the "
                                          "composition file (avalanche-tmc compose writes one).")
    if component.kind != "component":
        raise IncompatibleComponentsError(f"{component.name()} is a composition: forget component files one by one.")
    check_same_base(composition, component)
    index = next((i for i, m in enumerate(composition.members) if m["experience"] == component.experience), None)
    if index is None:
        raise IncompatibleComponentsError(
            f"Experience {component.experience} ({component.name()}) is not in {composition.name()} (members: "
            f"experiences {composition.experiences}).")
    if composition.members[index]["sha256"] != component.sha256:
        raise IncompatibleComponentsError(
            f"{component.name()} is not the component composed for experience {component.experience} in "
            f"{composition.name()} (its content hash differs): subtracting it would leave a wrong composition.")
    members = composition.members[:index] + composition.members[index + 1:]
    if component.payload == "statistics":
        total = add_statistics(composition.tensors, component.tensors, sign=-1.0)
    else:
        total = OrderedDict((n, t - float(component.weight) * component.tensors[n].to(t))
                            for n, t in composition.tensors.items())
    weight = composition.weight - float(component.weight)
    if not members:  # clear the rounding residue: nothing is left
        total, weight = OrderedDict((n, torch.zeros_like(t)) for n, t in total.items()), 0.0
    return replace(composition, tensors=total, weight=weight, members=members, path=None)


def composed_delta(composition: Component) -> Delta:
    """``δ = S / W`` of a tangent composition (a component: its ``δ``); zeros when empty."""
    if composition.payload != "delta":
        raise ValueError(f"{composition.name()} holds head statistics, not a tangent δ.")
    if composition.kind == "component":
        return OrderedDict((n, t.clone()) for n, t in composition.tensors.items())
    if composition.weight <= 0:
        return OrderedDict((n, torch.zeros_like(t)) for n, t in composition.tensors.items())
    return OrderedDict((n, t * (1.0 / composition.weight)) for n, t in composition.tensors.items())


def describe(component: Component) -> Dict[str, Any]:
    """What ``avalanche-tmc inspect`` prints: kind, payload, weight, members, settings,
    base, tensor count and size."""
    return dict(
        file=component.path, kind=component.kind, payload=component.payload, weight=component.weight,
        experiences=component.experiences, classes={str(t): c for t, c in component.classes.items()},
        members=component.members, settings=component.settings, base=component.base,
        tensors=len(component.tensors), values=int(sum(t.numel() for t in component.tensors.values())),
        bytes=int(sum(t.numel() * t.element_size() for t in component.tensors.values())),
        sha256=component.sha256,
    )
