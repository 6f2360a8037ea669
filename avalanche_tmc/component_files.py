"""Components as files: one tangent component (or one experience's head statistics) per
safetensors file, composed, forgotten and inspected file by file.

A **component file** holds what its experience contributes to a composition:

* the tensors: ``δ_t`` (linearized parameter name -> tensor), or the experience's
  statistics (``gram``, ``cross``, ``target_gram``, ``count``, ``class_sum``,
  ``class_count``, see :mod:`avalanche_tmc.compose.statistics`);
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
:class:`~avalanche_tmc.compose.deltas.DeltaComposition` does. Composing component files in
a given order gives bit for bit the sum that ``DeltaComposition`` builds in that order.

Safety: files are read with ``safetensors`` (a JSON header and raw tensor bytes); no
pickle, nothing in a file is ever executed. Only regular files are read, and the header
is checked (well-formed, declaring exactly the file's size, tensors of the names, shapes
and dtypes its base lists) before any tensor is read. One hash (``file_sha256``) covers
the metadata (weights, members, experience ids, base, settings) and, through
``content_sha256``, the tensors. Experience ids are integers, a weight is the sum of its
members'. A file that breaks any of this, or holds NaN/inf, is refused with
:class:`ComponentFileError`. With a shared key (``key=``, ``$AVALANCHE_TMC_KEY_FILE``,
the command line's ``--key-file``) files are signed with HMAC-SHA256 and a reader holding
the key refuses unsigned or wrongly signed files: that defends against tampering in
transit or at rest and files from outside the federation, not against a key holder that
trains a poisoned δ on purpose. Files are written atomically (a temporary file put in
place in one step), exclusively when not overwriting (:class:`ComponentExistsError`).
"""

import contextlib
import hashlib
import hmac
import json
import math
import numbers
import os
import re
import secrets
import socket
import stat
import struct
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Union

import torch
from torch import Tensor

from ._compat import recorded_class_path
from .compose.additive import AdditiveComposition, tensors_sha256
from .compose.statistics import STAT_KEYS
from .tangent import Delta, TangentModel, find_head

__all__ = [
    "FORMAT", "FORMAT_VERSION", "ComponentFileError", "IncompatibleComponentsError", "Component", "state_dict_sha256",
    "content_sha256", "tangent_base", "statistics_base", "model_reference", "check_same_base", "tangent_component",
    "statistics_component", "strategy_settings", "strategy_components", "save_component", "load_component",
    "component_paths", "load_components", "components_for", "compose_components", "forget_component",
    "composed_delta", "install_composition", "describe", "ComponentExistsError", "KEY_ENVIRONMENT", "read_key_file",
    "resolve_key",
]

FORMAT = "avalanche-tmc"
"""The ``format`` entry of every file this module writes."""

FORMAT_VERSION = 2
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
    signed: bool = False

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


def state_dict_sha256(state: Mapping[str, Tensor]) -> str:
    """SHA-256 of a state dict (names, shapes, dtypes and values, in name order):
    parameters and buffers (BatchNorm statistics) alike."""
    return tensors_sha256(state)


def content_sha256(tensors: Mapping[str, Tensor]) -> str:
    """SHA-256 of a file's tensors (what its header records)."""
    return state_dict_sha256(tensors)


def _structure(net: torch.nn.Module) -> Dict[str, str]:
    modules = "\n".join(f"{name}:{recorded_class_path(type(m))}" for name, m in net.named_modules())
    return dict(architecture=recorded_class_path(type(net)),
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


def _experience_id(experience) -> int:
    if isinstance(experience, bool) or not isinstance(experience, numbers.Integral):
        raise ValueError(f"An experience id is an integer (an index into the training stream), got {experience!r}.")
    return int(experience)


def _component(payload: str, tensors, weight: float, base, experience, classes, settings) -> Component:
    experience = _experience_id(experience)
    tensors = _clean_tensors(tensors)
    member = dict(experience=experience, weight=float(weight), classes=_classes_json(classes),
                  sha256=content_sha256(tensors))
    return Component("component", payload, tensors, float(weight), [member], base, dict(settings or {}))


def tangent_component(model: TangentModel, delta: Mapping[str, Tensor], experience, *, weight: float = 1.0,
                      classes: Optional[Mapping] = None, settings: Optional[Mapping] = None) -> Component:
    """A tangent component of ``model``: ``delta`` (checked to fit the model, in its dtype), its weight,
    experience id, classes (task label -> classes) and training settings."""
    model.check_delta(delta)
    dtypes = {name: p.dtype for name, p in zip(model.linearized_names, model.delta_params)}
    ordered = OrderedDict((name, delta[name].to(dtypes[name])) for name in model.linearized_names)  # the model's δ
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
    return dict(strategy=type(strategy).__name__, **_optimizer_settings(strategy), **strategy.component_settings())


def strategy_components(strategy) -> List[Component]:
    """Every component a strategy holds, in the order learned: a TMC/TME strategy's
    ``δ_t`` (kept components) or an :class:`~avalanche_tmc.analytic.AnalyticHeadStrategy`'s
    statistics (any :class:`~avalanche_tmc.compose.learner.ComposableLearner`)."""
    strategy.check_independent("save its components as files (they cannot be composed or forgotten on their own)")
    settings = strategy_settings(strategy)
    learned, classes = strategy.learned(), strategy.learned_classes()
    if strategy.payload == "delta":
        weights = learned.weights
        return [tangent_component(strategy.model, delta, key, weight=weights[key], classes=classes.get(key),
                                  settings=settings) for key, delta in learned.components.items()]
    return [statistics_component(strategy.model, stats, key, classes=classes.get(key), settings=settings)
            for key, stats in learned.components.items()]


# ---------------------------------------------------------------------------- keys (authenticity)

KEY_ENVIRONMENT = "AVALANCHE_TMC_KEY_FILE"
"""The environment variable naming a key file: used when no ``key`` argument is given."""

_MIN_KEY = 16


def read_key_file(path: str) -> bytes:
    """The shared key held in file ``path`` (its bytes, a trailing newline removed; at least
    16 bytes). Raises :class:`ComponentFileError` when it cannot be used."""
    try:
        with open(path, "rb") as f:
            key = f.read(1 << 16).rstrip(b"\r\n")
    except OSError as error:
        raise ComponentFileError(f"key file {path}: cannot be read ({error.strerror or error}).") from None
    if len(key) < _MIN_KEY:
        raise ComponentFileError(f"key file {path}: the key has {len(key)} bytes; use at least {_MIN_KEY} random bytes "
                                 "(e.g. python -c \"import secrets; print(secrets.token_hex(32))\" > key).")
    return key


def resolve_key(key: Union[None, bytes, str] = None) -> Optional[bytes]:
    """The key to sign and check files with: ``key`` (bytes, or text encoded as UTF-8), else
    the file named by ``$AVALANCHE_TMC_KEY_FILE``, else None (files are not signed, and
    signatures are not required)."""
    if key is None:
        path = os.environ.get(KEY_ENVIRONMENT)
        return read_key_file(path) if path else None
    key = key.encode() if isinstance(key, str) else bytes(key)
    if len(key) < _MIN_KEY:
        raise ValueError(f"A signing key needs at least {_MIN_KEY} bytes, got {len(key)}.")
    return key


# ---------------------------------------------------------------------------- writing

_SIGNED_FIELDS = ("file_sha256", "hmac_sha256")


def _metadata_sha256(metadata: Mapping[str, str]) -> str:
    """The integrity hash: every metadata entry (the tensors' content hash among them), in
    key order, except the hash and the signature themselves."""
    covered = {k: v for k, v in metadata.items() if k not in _SIGNED_FIELDS}
    return hashlib.sha256(json.dumps(covered, sort_keys=True, ensure_ascii=True).encode()).hexdigest()


def _signature(key: bytes, file_sha256: str) -> str:
    return hmac.new(key, file_sha256.encode(), hashlib.sha256).hexdigest()


class ComponentExistsError(FileExistsError):
    """The output file exists (or another process created it meanwhile) and overwriting
    was not asked for: nothing was written."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


def _remove_stale_temporaries(directory: str, base: str) -> None:
    """Remove ``.<base>.<host>.<pid>.*.tmp`` left by a writer of this host that died (killed)."""
    host = socket.gethostname()
    prefix = f".{base}."
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        if not (name.startswith(prefix) and name.endswith(".tmp")):
            continue
        parts = name[len(prefix):-len(".tmp")].rsplit(".", 2)
        if len(parts) == 3 and parts[0] == host and parts[1].isdigit() and not _alive(int(parts[1])):
            try:
                os.remove(os.path.join(directory, name))
            except OSError:
                pass


def _link_exclusively(tmp: str, path: str, data: bytes) -> None:
    """Put the complete file ``tmp`` at ``path`` unless ``path`` exists, in one step (a hard
    link); where the file system has no hard links, create ``path`` exclusively and write it."""
    exists = ComponentExistsError(f"{path} exists (another process may have written it meanwhile); nothing was "
                                  "written. Pass overwrite=True (--overwrite) to replace it.")
    try:
        os.link(tmp, path)
        return
    except FileExistsError:
        raise exists from None
    except OSError:  # no hard links here (some network or FUSE file systems)
        pass
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        raise exists from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    except BaseException:
        os.remove(path)
        raise


def save_component(component: Component, path: str, *, overwrite: bool = True,
                   key: Union[None, bytes, str] = None) -> str:
    """Write ``component`` (or a composition) to ``path``; returns ``path``.

    The file is written to a temporary file next to ``path`` and then put in place in one
    step, so a reader never sees half a file. ``overwrite=False`` creates ``path``
    exclusively (a hard link): of several writers exactly one succeeds, the others get
    :class:`ComponentExistsError`. Temporary files are removed on error, and those left by
    a killed writer are removed by the next write of the same file. With a key (``key``,
    or ``$AVALANCHE_TMC_KEY_FILE``) the file is signed (HMAC-SHA256 of its integrity hash).
    """
    from safetensors.torch import save

    key = resolve_key(key)
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
    metadata["file_sha256"] = _metadata_sha256(metadata)
    if key is not None:
        metadata["hmac_sha256"] = _signature(key, metadata["file_sha256"])
    data = save(dict(tensors), metadata=metadata)
    directory, base = os.path.split(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    _remove_stale_temporaries(directory, base)
    tmp = os.path.join(directory, f".{base}.{socket.gethostname()}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if overwrite:
            os.replace(tmp, path)
        else:
            _link_exclusively(tmp, path, data)
    finally:
        if os.path.lexists(tmp):
            os.remove(tmp)
    return path


# ---------------------------------------------------------------------------- reading


def _refuse(path: str, why: str) -> ComponentFileError:
    return ComponentFileError(f"{path}: not a usable avalanche-tmc component file: {why}. Nothing was loaded.")


def _json(text: Union[str, bytes], path: str, what: str):
    try:
        return json.loads(text)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise _refuse(path, f"{what} is not JSON (or nested too deeply)") from None


_DTYPES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}
_TORCH_DTYPES = {"float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16"}


def _layout(header: Mapping[str, Any], path: str) -> Dict[str, Any]:
    """``name -> (dtype, shape, begin, end)`` of a safetensors header, checked to be
    well-formed and to tile the data section exactly (returned under ``"__size__"``)."""
    layout, ends = {}, []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(entry, dict) or not isinstance(entry.get("dtype"), str) or entry["dtype"] not in _DTYPES:
            raise _refuse(path, f"tensor {_clean(name)!r} has no known dtype")
        shape, offsets = entry.get("shape"), entry.get("data_offsets")
        if not (isinstance(shape, list) and all(type(s) is int and s >= 0 for s in shape)
                and isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)):
            raise _refuse(path, f"tensor {_clean(name)!r} has a malformed shape or offsets")
        numel = math.prod(shape)
        if offsets[0] < 0 or offsets[1] - offsets[0] != numel * _DTYPES[entry["dtype"]]:
            raise _refuse(path, f"tensor {_clean(name)!r}'s offsets do not fit its shape and dtype")
        layout[name] = (entry["dtype"], shape)
        ends.append(tuple(offsets))
    ends.sort()
    position = 0
    for begin, end in ends:
        if begin != position:
            raise _refuse(path, "its tensors overlap or leave gaps")
        position = end
    layout["__size__"] = position
    return layout


def _read_regular_file(path: str):
    """(file object, size) of a regular file; anything else (a FIFO, a device, a directory)
    is refused without blocking."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as error:
        raise ComponentFileError(f"{path}: cannot be read ({error.strerror or error}).") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise _refuse(path, "it is not a regular file (a FIFO, a device or a directory)")
    return os.fdopen(fd, "rb"), info.st_size


def _read_exactly(f, size: int, path: str) -> bytes:
    data = f.read(size)
    if len(data) != size:
        raise _refuse(path, "the file changed size while being read")
    return data


def _json_field(metadata: Mapping[str, str], key: str, path: str, kind):
    if key not in metadata:
        raise _refuse(path, f"its metadata lacks {key!r}")
    value = _json(metadata[key], path, f"its metadata entry {key!r}")
    if not isinstance(value, kind) or isinstance(value, bool):
        raise _refuse(path, f"its metadata entry {key!r} is a {type(value).__name__}")
    return value


def _is_int(value) -> bool:
    return type(value) is int


def _finite_positive(value) -> bool:
    return type(value) in (int, float) and math.isfinite(value) and value > 0


def _check_members(members: List[Any], path: str) -> None:
    seen = set()
    for member in members:
        if not isinstance(member, dict) or not {"experience", "weight", "classes", "sha256"} <= set(member):
            raise _refuse(path, "a member entry lacks experience, weight, classes or sha256")
        if not _is_int(member["experience"]):
            raise _refuse(path, f"experience id {_clean(repr(member['experience']))} is not an integer")
        if member["experience"] in seen:
            raise _refuse(path, f"experience {member['experience']} is listed twice")
        seen.add(member["experience"])
        if not _finite_positive(member["weight"]):
            raise _refuse(path, f"experience {member['experience']} has weight {_clean(repr(member['weight']))}")
        if not isinstance(member["sha256"], str) or len(member["sha256"]) != 64:
            raise _refuse(path, "a member's sha256 is not a SHA-256")
        classes = member["classes"]
        if not isinstance(classes, dict) or not all(
                isinstance(t, str) and re.fullmatch(r"-?[0-9]{1,9}", t) and isinstance(c, list)
                and all(_is_int(x) for x in c)
                for t, c in classes.items()):
            raise _refuse(path, "a member's classes are not task label -> list of integers")


def _check_base(base: Dict[str, Any], payload: str, path: str) -> None:
    if base.get("head_size") is not None and not _is_int(base["head_size"]):
        raise _refuse(path, "its base's head size is not an integer")
    if payload == "delta":
        linearized = base.get("linearized")
        if not (isinstance(linearized, list) and all(
                isinstance(e, list) and len(e) == 2 and isinstance(e[0], str) and isinstance(e[1], list)
                and all(_is_int(s) and s >= 0 for s in e[1]) for e in linearized)) or not isinstance(base.get("dtype"),
                                                                                                    str):
            raise _refuse(path, "its base does not list the linearized parameters (name, shape) and dtype")
    elif not _is_int(base.get("head_size")):
        raise _refuse(path, "its base does not give the number of classes")


def _expected_layout(base: Mapping[str, Any], payload: str, layout: Mapping[str, Any], path: str):
    """Check the tensors' names, shapes and dtypes against what the base declares."""
    found = {n: v for n, v in layout.items() if n != "__size__"}
    if payload == "delta":
        expected = {name: list(shape) for name, shape in base["linearized"]}
        dtypes = {_TORCH_DTYPES.get(d) for d in base["dtype"].split(",")}
    else:
        width = found.get("gram", (None, []))[1]
        d, c = (width[0] if len(width) == 2 else -1), base["head_size"]
        expected = dict(gram=[d, d], cross=[d, c], target_gram=[c, c], count=[], class_sum=[c, d], class_count=[c])
        dtypes = {found.get("gram", ("F64",))[0]} & {"F64", "F32"}
    if set(found) != set(expected):
        raise _refuse(path, "its tensors are not the ones its base lists")
    wrong = [f"{_clean(n)}: {found[n][1]} {found[n][0]} (base: {expected[n]})" for n in expected
             if found[n][1] != expected[n] or found[n][0] not in dtypes]
    if wrong:
        raise _refuse(path, f"tensors do not have the shape or dtype of its base ({'; '.join(wrong[:3])})")


def _read_verified(path: str, key: Optional[bytes]):
    """(header metadata, tensor bytes) of a file, bounded and checked before its tensors are read."""
    f, size = _read_regular_file(path)
    with f:
        if size < 8:
            raise _refuse(path, f"the file has {size} bytes, too short for a safetensors header (truncated?)")
        (length,) = struct.unpack("<Q", _read_exactly(f, 8, path))
        if length > min(_MAX_HEADER, size - 8):
            raise _refuse(path, f"its header claims {length} bytes but the file has {size - 8} after the length "
                                "(truncated, or not a safetensors file)")
        raw = _read_exactly(f, length, path)
        header = _json(raw, path, "its header")
        if not isinstance(header, dict) or not isinstance(header.get("__metadata__"), dict):
            raise _refuse(path, "it has no metadata (a safetensors file not written by avalanche-tmc)")
        metadata = header["__metadata__"]
        if not all(isinstance(v, str) for v in metadata.values()):
            raise _refuse(path, "its metadata entries are not strings")
        layout = _layout(header, path)
        if 8 + length + layout["__size__"] != size:
            raise _refuse(path, f"its header declares {8 + length + layout['__size__']} bytes but the file has {size} "
                                "(truncated or padded)")
        _check_metadata(metadata, path, key)
        payload = metadata["payload"]
        base = _json_field(metadata, "base", path, dict)
        _check_base(base, payload, path)
        _expected_layout(base, payload, layout, path)
        data = struct.pack("<Q", length) + raw + _read_exactly(f, layout["__size__"], path)
    return metadata, data


def _check_metadata(metadata: Mapping[str, str], path: str, key: Optional[bytes]) -> None:
    if metadata.get("format") != FORMAT:
        raise _refuse(path, f"its format is {_clean(repr(metadata.get('format')))}, not {FORMAT!r}")
    version = metadata.get("format_version", "")
    if not re.fullmatch(r"[0-9]{1,6}", version):
        raise _refuse(path, "its format_version is not a number")
    if int(version) > FORMAT_VERSION:
        raise _refuse(path, f"it is format version {int(version)}; this avalanche-tmc reads up to {FORMAT_VERSION} "
                            "(upgrade avalanche-tmc)")
    if int(version) < FORMAT_VERSION:
        raise _refuse(path, f"it is format version {int(version)}, written before files carried an integrity hash "
                            "over their metadata; write it again with this avalanche-tmc")
    if metadata.get("kind") not in KINDS or metadata.get("payload") not in PAYLOADS:
        raise _refuse(path, f"unknown kind {_clean(repr(metadata.get('kind')))} or payload "
                            f"{_clean(repr(metadata.get('payload')))}")
    if metadata.get("file_sha256") != _metadata_sha256(metadata):
        raise _refuse(path, "its metadata do not match the integrity hash in its header (corrupted or edited)")
    signature = metadata.get("hmac_sha256")
    if key is not None:
        if signature is None:
            raise _refuse(path, "it is not signed, and a key was given: only files signed with that key are accepted")
        if not hmac.compare_digest(str(signature), _signature(key, metadata["file_sha256"])):
            raise _refuse(path, "its signature does not match the key (signed with another key, or edited)")


def load_component(path: str, *, key: Union[None, bytes, str] = None) -> Component:
    """Read a component or composition file (never executing anything in it).

    Only a regular file is read; its header is checked (well-formed, the size it declares
    is the file's, the tensors' names, shapes and dtypes are those its base lists) before
    its tensors are read, so memory is bounded by what the header declares. One hash
    covers the metadata (weights, members, base, settings) and the tensors. With a key
    (``key``, or ``$AVALANCHE_TMC_KEY_FILE``) the file must carry a valid signature.

    :raises ComponentFileError: see :class:`ComponentFileError`.
    """
    from safetensors import SafetensorError
    from safetensors.torch import load

    key = resolve_key(key)
    metadata, data = _read_verified(path, key)
    kind, payload = metadata["kind"], metadata["payload"]
    try:
        tensors = load(data)
    except (SafetensorError, ValueError, RuntimeError) as error:
        raise _refuse(path, f"its tensors cannot be read ({_clean(str(error))})") from None
    weight = _json_field(metadata, "weight", path, (int, float))
    members = _json_field(metadata, "members", path, list)
    base = _json_field(metadata, "base", path, dict)
    settings = _json_field(metadata, "settings", path, dict)
    _check_members(members, path)
    total = math.fsum(m["weight"] for m in members)
    if not math.isfinite(weight) or weight < 0 or (kind == "component" and len(members) != 1) or not math.isclose(
            weight, total, rel_tol=1e-9, abs_tol=1e-12):
        raise _refuse(path, f"its weight {weight} is not the sum of its {len(members)} member(s)' weights or they do "
                            f"not make a {kind}")
    names = [n for n, _ in base["linearized"]] if payload == "delta" else list(STAT_KEYS)
    ordered = OrderedDict((name, tensors[name]) for name in names)
    if content_sha256(ordered) != metadata.get("content_sha256"):
        raise _refuse(path, "its tensors do not match the content hash in its header (corrupted or edited)")
    bad = [n for n, t in ordered.items() if t.is_floating_point() and not bool(torch.isfinite(t).all())]
    if bad:
        raise _refuse(path, f"it holds NaN or inf (in {bad[:5]})")
    if kind == "component" and members[0]["sha256"] != metadata["content_sha256"]:
        raise _refuse(path, "its member entry does not describe its own tensors")
    if payload == "statistics" and kind == "component" and float(ordered["count"]) != weight:
        raise _refuse(path, "its weight is not its sample count")
    return Component(kind, payload, ordered, float(weight), members, base, settings, path=path,
                     signed="hmac_sha256" in metadata)


def component_paths(paths: Union[str, Sequence[str]]) -> List[str]:
    """The ``.safetensors`` files of a directory (sorted by name), or the given paths."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out = []
    for path in paths:
        if os.path.isdir(path):
            out += sorted(os.path.join(path, f) for f in os.listdir(path)
                          if f.endswith(".safetensors") and not f.startswith("."))
        else:
            out.append(str(path))
    return out


def load_components(paths: Union[str, Sequence[str]], *, key: Union[None, bytes, str] = None) -> List[Component]:
    """:func:`load_component` on every file (a directory: its ``.safetensors`` files),
    ordered by experience id (compositions after the components, in name order)."""
    loaded = [load_component(p, key=key) for p in component_paths(paths)]
    return sorted(loaded, key=lambda c: (c.kind != "component", c.experience if c.kind == "component" else 0))


def _check_distinct(components: Sequence[Component]) -> None:
    """Each experience once, and no content under two experience ids."""
    experiences: Dict[int, str] = {}
    contents: Dict[str, tuple] = {}
    for component in components:
        for member in component.members:
            if member["experience"] in experiences:
                raise IncompatibleComponentsError(
                    f"Experience {member['experience']} is in both {experiences[member['experience']]} and "
                    f"{component.name()}: a composition holds each experience once (forget it from one of them first).")
            experiences[member["experience"]] = component.name()
            if member["sha256"] in contents:
                other, exp = contents[member["sha256"]]
                raise IncompatibleComponentsError(
                    f"{component.name()} (experience {member['experience']}) and {other} (experience {exp}) hold the "
                    "same content: one component relabelled as another experience is refused (it would count twice).")
            contents[member["sha256"]] = (component.name(), member["experience"])


def components_for(paths: Union[str, Sequence[str]], model, learned=(), name: str = "this strategy's model", *,
                   key: Union[None, bytes, str] = None) -> List[Component]:
    """The component files of ``paths`` (a directory: its ``.safetensors``), ordered by
    experience, each checked before any is used: a component (not a composition), of
    ``model``'s base, an experience not in ``learned``, not twice, no content twice.

    :raises IncompatibleComponentsError: naming the file and what does not fit.
    """
    components = load_components(paths, key=key)
    reference = model_reference(model, name)
    for component in components:
        if component.kind != "component":
            raise IncompatibleComponentsError(
                f"{component.name()} is a composition: a strategy is built from component files (one per "
                "experience); load a composition into a model with its δ (component_files.composed_delta).")
        check_same_base(reference, component)
        if component.experience in learned:
            raise IncompatibleComponentsError(f"Experience {component.experience} ({component.name()}) is already "
                                              "learned by this strategy; forget it first.")
    _check_distinct(components)
    return components


# ---------------------------------------------------------------------------- composing and forgetting


def _additive(payload: str) -> AdditiveComposition:
    return AdditiveComposition(keep_components=False, scaled=payload == "delta")


def _as_additive(composition: Component) -> AdditiveComposition:
    """A composition file as the :class:`~avalanche_tmc.compose.additive.AdditiveComposition` it holds."""
    additive = _additive(composition.payload)
    additive.merge({m["experience"]: m["weight"] for m in composition.members}, composition.tensors,
                   checksums={m["experience"]: m["sha256"] for m in composition.members})
    return additive


def _from_additive(additive: AdditiveComposition, members, first: Component) -> Component:
    return Component("composition", first.payload, additive.summed(), additive.total_weight, members,
                     dict(first.base))


def compose_components(components: Iterable[Component]) -> Component:
    """A composition of components and/or compositions, summed in the order given, with
    the :class:`~avalanche_tmc.compose.additive.AdditiveComposition` the strategies use: for
    tangent components ``S ← S + w_t δ_t`` from zeros, in ``δ``'s dtype, so the result is
    bit for bit the sum a :class:`~avalanche_tmc.compose.deltas.DeltaComposition` builds in
    that order; statistics are added as they are.

    :raises IncompatibleComponentsError: different bases (naming the difference), an
        experience present twice, the same content under two experience ids.
    """
    components = list(components)
    if not components:
        raise ValueError("Nothing to compose: give at least one component file.")
    first = components[0]
    for component in components:
        check_same_base(first, component)
    _check_distinct(components)
    additive = _additive(first.payload)
    for component in components:
        with _numbers_of(component):
            if component.kind == "component":
                additive.add(component.experience, component.tensors, component.weight)
            elif component.members:
                part = _as_additive(component)
                additive.merge(part.weights, component.tensors, checksums=part.checksums)
    if not len(additive):  # only empty compositions
        return replace(first, members=[], path=None)
    return _from_additive(additive, [m for c in components for m in c.members], first)


@contextlib.contextmanager
def _numbers_of(component: Component):
    """Arithmetic that overflows (a sum or a total weight that is no longer finite) is a
    combination that does not work: :class:`IncompatibleComponentsError`, naming the file."""
    try:
        yield
    except IncompatibleComponentsError:
        raise
    except ValueError as error:
        raise IncompatibleComponentsError(f"{component.name()} cannot be combined: {error}") from None


def forget_component(composition: Component, component: Component) -> Component:
    """The composition without ``component`` (exactly: ``S − w δ``, ``W − w``; statistics:
    their difference). ``component`` must be the very file that was composed (its
    content hash and weight are checked).

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
    member = composition.members[index]
    if member["sha256"] != component.sha256 or member["weight"] != component.weight:
        what = "content hash" if member["sha256"] != component.sha256 else f"weight ({component.weight:g} vs " \
                                                                          f"{member['weight']:g})"
        raise IncompatibleComponentsError(
            f"{component.name()} is not the component composed for experience {component.experience} in "
            f"{composition.name()} (its {what} differs): subtracting it would leave a wrong composition.")
    with _numbers_of(component):
        additive = _as_additive(composition)
        additive.forget(component.experience, component.tensors)
    members = composition.members[:index] + composition.members[index + 1:]
    return replace(_from_additive(additive, members, composition), settings=dict(composition.settings))


def install_composition(strategy, composition: Component, name: str = "the strategy's model") -> None:
    """Put a composition (or component) file into ``strategy`` (a fresh
    :class:`~avalanche_tmc.compose.learner.ComposableLearner` on the same base, checked first: ``name``
    is how messages call its model): its members, by their sum, as if learned there (kept
    only as the sum), their classes recorded; the model then evaluates the composition."""
    check_same_base(model_reference(strategy.model, name), composition)
    if strategy.payload != composition.payload:
        raise IncompatibleComponentsError(f"{composition.name()} holds {composition.payload}, the strategy learns "
                                          f"{strategy.payload}.")
    if composition.kind == "component":
        composition = compose_components([composition])
    learned = strategy.learned().empty_like(keep_components=False)
    if composition.members:
        with _numbers_of(composition):
            learned.merge({m["experience"]: m["weight"] for m in composition.members}, composition.tensors,
                          checksums={m["experience"]: m["sha256"] for m in composition.members})
    strategy.replace_learned(learned)
    strategy.installed({m["experience"]: {int(t): c for t, c in m["classes"].items()} for m in composition.members})


def composed_delta(composition: Component) -> Delta:
    """``δ = S / W`` of a tangent composition (a component: its ``δ``); zeros when empty."""
    if composition.payload != "delta":
        raise ValueError(f"{composition.name()} holds head statistics, not a tangent δ.")
    if composition.kind == "component":
        return OrderedDict((n, t.clone()) for n, t in composition.tensors.items())
    if composition.weight <= 0:
        return OrderedDict((n, torch.zeros_like(t)) for n, t in composition.tensors.items())
    delta = OrderedDict((n, t * (1.0 / composition.weight)) for n, t in composition.tensors.items())
    bad = [n for n, t in delta.items() if not bool(torch.isfinite(t).all())]
    if bad:
        raise IncompatibleComponentsError(f"{composition.name()}: δ = S / W is not finite (W = "
                                          f"{composition.weight:g}, in {bad[:5]}): it makes no model.")
    return delta


def _clean(value):
    """``value`` with every control character of its strings (terminal escape sequences)
    shown as a ``\\xNN`` escape: what a file says is printed, never interpreted."""
    if isinstance(value, str):
        return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in value)
    if isinstance(value, dict):
        return {_clean(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def describe(component: Component) -> Dict[str, Any]:
    """What ``avalanche-tmc inspect`` prints: kind, payload, weight, members, settings,
    base, tensor count and size, whether it is signed; every string sanitized."""
    return _clean(dict(
        file=component.path, kind=component.kind, payload=component.payload, weight=component.weight,
        experiences=component.experiences, classes={str(t): c for t, c in component.classes.items()},
        members=component.members, settings=component.settings, base=component.base,
        tensors=len(component.tensors), values=int(sum(t.numel() for t in component.tensors.values())),
        bytes=int(sum(t.numel() * t.element_size() for t in component.tensors.values())),
        sha256=component.sha256, signed=component.signed,
    ))
