"""Checkpoint and resume a strategy: its learned state in a file that loads without
unpickling (:func:`save_learned` / :func:`load_learned`), or the whole strategy with
Avalanche's own ``save_checkpoint`` / ``maybe_load_checkpoint``, made to work on this
install, written atomically and checked on loading.

**Learned state, no pickle** (components, composition, statistics: what a
:class:`~avalanche_tmc.composition.learner.ComposableLearner` learned). :func:`save_learned` writes a
safetensors file (tensors and JSON metadata, one integrity hash over both, optionally
signed like component files); :func:`load_learned` checks it against the strategy it is
loaded into (strategy type, mode, base model) and refuses a mismatch naming it. Nothing
in the file is ever executed::

    strategy = build_strategy()
    done = load_learned(strategy, "learned.safetensors") if os.path.exists("learned.safetensors") else []
    for exp in benchmark.train_stream:
        if exp.current_experience not in done:
            strategy.train(exp)
            save_learned(strategy, "learned.safetensors")

Each tangent component and each experience's statistics start from scratch, so this is
all a TMC, TME or analytic-head run needs to resume (optimizer state is reset per
experience anyway).

**The whole strategy (pickle: trusted files only).** Avalanche's functions pickle the
strategy with ``dill``: loading such a file runs whatever code it was crafted to run, so
load only checkpoints you wrote yourself. They fail on this install as they are:
``dill`` (0.4) pickles a class by reference only when it can find it again by importing
``module.qualname``, and it imports ``torch.optim.adam`` as ``getattr(torch.optim, "adam")``.
torch 2.13 deletes those submodule attributes from ``torch.optim`` (``torch.optim.adam``
is in ``sys.modules`` but not an attribute), so ``dill`` pickles ``Adam``/``SGD`` *by
value*, walks into their module globals and stops at ``typing_extensions``' private
sentinel (``PicklingError: Can't pickle sentinel``), after having written part of the
file. :func:`enable_dill_checkpoints` puts the submodules back as attributes (what older
torch did), so the optimizer classes pickle by reference again. Supported path::

    from avalanche_tmc import maybe_load_checkpoint, save_checkpoint

    strategy, first_exp = maybe_load_checkpoint(build_strategy(), "ckpt.pkl")  # trusted files only
    for exp in benchmark.train_stream[first_exp:]:
        strategy.train(exp)
        save_checkpoint(strategy, "ckpt.pkl")  # atomic: a crash never leaves a half-written file

The strategy must be built the same way in the resuming process (same network, head seed,
plugins); :func:`maybe_load_checkpoint` refuses (:class:`CheckpointError`, the strategy
left as it was) a checkpoint of another strategy type or mode, another architecture or
other pre-trained weights, and an unreadable (e.g. truncated) file.
"""

import hashlib
import json
import os
import pkgutil
import sys
import tempfile
from collections import OrderedDict
from typing import Any, Callable, Dict, Hashable, List, Optional, Sequence, Tuple, Union

import torch.optim
from torch import nn

from .._compat import recorded_class_path

__all__ = [
    "CheckpointError", "enable_dill_checkpoints", "save_checkpoint", "maybe_load_checkpoint", "checkpoint_identity",
    "save_learned", "load_learned",
]

LEARNED_FORMAT = "avalanche-tmc-learned"


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded into this strategy: unreadable, or made by another
    strategy type or mode, architecture or pre-trained weights. The strategy is unchanged."""


def _shown(path: Any) -> str:
    """A file name (or a message quoting one) as errors print it, control characters escaped
    (:func:`avalanche_tmc.files.component._shown`, the one helper)."""
    from ..files.component import _shown as shown

    return shown(path)


def enable_dill_checkpoints() -> None:
    """Make ``torch.optim``'s loaded submodules attributes again so that ``dill`` pickles
    the optimizer classes by reference (idempotent; see the module docstring)."""
    for info in pkgutil.iter_modules(torch.optim.__path__):
        full = f"torch.optim.{info.name}"
        if full in sys.modules and not hasattr(torch.optim, info.name):
            setattr(torch.optim, info.name, sys.modules[full])


def checkpoint_identity(strategy: Any) -> Dict[str, Any]:
    """What a checkpoint must share with the strategy it is loaded into: the strategy type,
    its mode (TMC/TME/TMC-Seq), the architecture (modules, parameter names and shapes)
    and, for a :class:`~avalanche_tmc.composition.learner.ComposableLearner`, the hash of the fixed
    base weights and buffers (the pre-trained point its components belong to) and, for a
    tangent model, the hash of its linearized parameters (names and shapes: TMC-FC
    linearizes the head only, TMC every parameter)."""
    from ..composition.additive import tensors_sha256
    from ..composition.learner import ComposableLearner

    composable = isinstance(strategy, ComposableLearner)
    net: nn.Module = strategy.base_network() if composable else strategy.model
    # classes under the path recorded before the layout moved them: the identity of a checkpoint never changes
    layout = "\n".join(f"{name}:{recorded_class_path(type(m))}" for name, m in net.named_modules())
    layout += "\n" + "\n".join(f"{n}:{tuple(t.shape)}" for n, t in net.state_dict().items())
    identity = dict(strategy=type(strategy).__qualname__,
                    architecture=hashlib.sha256(layout.encode()).hexdigest())
    if composable:
        identity.update(mode=strategy.component_settings().get("mode"), payload=strategy.payload,
                        base=tensors_sha256(net.state_dict()))
    shapes = getattr(getattr(strategy, "model", None), "delta_shapes", None)
    if composable and callable(shapes):
        linearized = "\n".join(f"{n}:{tuple(s)}" for n, s in shapes().items())
        identity["linearized"] = hashlib.sha256(linearized.encode()).hexdigest()
    return identity


_LABELS = dict(strategy="strategy type", mode="mode", payload="kind of components", architecture="architecture",
               base="pre-trained weights or BatchNorm statistics",
               linearized="linearized parameters (TMC-FC linearizes the head only, TMC every parameter)")
_RECORDED_SINCE = ("linearized",)  # not in files written before: those are checked by their tensors' names and shapes


def _check_identity(found: Dict[str, Any], expected: Dict[str, Any], path: str) -> None:
    path = _shown(path)
    for name, label in _LABELS.items():
        if name in _RECORDED_SINCE and name not in found:
            continue
        if found.get(name) != expected.get(name):
            shown = [str(v)[:16] for v in (found.get(name), expected.get(name))]
            raise CheckpointError(
                f"{path}: this checkpoint does not fit the strategy: its {label} differs (checkpoint {shown[0]}, "
                f"strategy {shown[1]}). Build the strategy exactly as in the run that wrote it. The strategy was "
                "left as it was.")


def _atomic(path: str, write: Callable[[str], None]) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def save_checkpoint(strategy: Any, path: str, exclude: Optional[Sequence[str]] = None) -> None:
    """Avalanche's ``save_checkpoint`` (the whole strategy, pickled: see the module
    docstring), working on this install and atomic: written to a temporary file next to
    ``path``, then renamed over it (a failure or a kill leaves the previous checkpoint
    intact). The file records :func:`checkpoint_identity`, checked on loading.

    Its size, for a tangent strategy: the network, the model's ``δ``, the composition's running
    sum and zero template, and one ``δ`` per kept component; no optimizer state or gradients
    (the composition plugins drop them when an experience ends: the next component starts
    from a fresh optimizer state). :func:`save_learned` writes the sum and the kept components."""
    from avalanche.checkpointing import save_checkpoint as avalanche_save

    enable_dill_checkpoints()
    strategy.checkpoint_identity = checkpoint_identity(strategy)
    _atomic(path, lambda tmp: avalanche_save(strategy, tmp, exclude=exclude))


def maybe_load_checkpoint(strategy: Any, path: str, map_location: Any = None) -> Tuple[Any, int]:
    """Avalanche's ``maybe_load_checkpoint``: ``(strategy, first experience to train)``,
    the strategy unchanged and 0 when ``path`` does not exist.

    **Trusted files only**: the file is unpickled, and a crafted pickle runs code on
    loading. Use :func:`save_learned` / :func:`load_learned` for files from elsewhere.

    :raises CheckpointError: the file cannot be read (truncated, not a checkpoint), or it
        was written by another strategy type or mode, architecture or base weights
        (naming which); the strategy is then as before the call.
    """
    from avalanche.checkpointing import maybe_load_checkpoint as avalanche_load

    if not os.path.exists(path):
        return strategy, 0
    if not os.path.isfile(path):
        raise CheckpointError(f"{_shown(path)}: not a regular file (a FIFO, a device or a directory). The strategy "
                              "was left as it was.")
    enable_dill_checkpoints()
    expected = checkpoint_identity(strategy)
    before = dict(strategy.__dict__)

    def put_back():
        strategy.__dict__.clear()
        strategy.__dict__.update(before)

    try:
        strategy, first = avalanche_load(strategy, path, map_location=map_location)
    except Exception as error:  # noqa: BLE001  (whatever a broken pickle raises)
        put_back()
        raise CheckpointError(f"{_shown(path)}: cannot be read as a checkpoint ({type(error).__name__}: "
                              f"{_shown(error)}); truncated, or not written by save_checkpoint. The strategy was left "
                              "as it was.") from None
    try:
        # the loaded state says what it is; the strategy type is the one save_checkpoint recorded
        found = dict(checkpoint_identity(strategy), strategy=(strategy.__dict__.get("checkpoint_identity") or {}).get(
            "strategy", expected["strategy"]))
    except Exception:  # noqa: BLE001  (a checkpoint of something else altogether)
        found = {}
    try:
        _check_identity(found, expected, path)
    except CheckpointError:
        put_back()
        raise
    return strategy, first


# ---------------------------------------------------------------------------- learned state without pickle


def save_learned(strategy: Any, path: str, *, key: Union[None, bytes, str] = None) -> str:
    """Write what ``strategy`` (a :class:`~avalanche_tmc.composition.learner.ComposableLearner`)
    learned: the summed tensors, each kept member, the members' weights, checksums and
    classes, and :func:`checkpoint_identity`, as a safetensors file with one integrity hash
    over metadata and tensors (signed with ``key`` / ``$AVALANCHE_TMC_KEY_FILE`` if any).
    Written atomically; returns ``path``."""
    from safetensors.torch import save

    from ..files.component import content_sha256
    from ..files.signing import _metadata_sha256, _signature, resolve_key

    key = resolve_key(key)
    learned = strategy.learned()
    tensors: "OrderedDict[str, torch.Tensor]" = OrderedDict()
    keys = learned.keys
    if len(learned):
        tensors.update((f"sum/{n}", t) for n, t in learned.summed().items())
    if learned.keep_components:
        for index, (member, member_tensors) in enumerate(learned.components.items()):
            tensors.update((f"member/{index}/{n}", t) for n, t in member_tensors.items())
    tensors = OrderedDict((n, t.detach().to("cpu").contiguous()) for n, t in tensors.items())
    classes = strategy.learned_classes()
    members = [dict(key=k, weight=learned.weights[k], checksum=learned.checksums[k],
                    classes={str(t): list(c) for t, c in classes.get(k, {}).items()}) for k in keys]
    metadata = dict(format=LEARNED_FORMAT, identity=json.dumps(checkpoint_identity(strategy)),
                    keep_components=json.dumps(learned.keep_components), members=json.dumps(members),
                    content_sha256=content_sha256(tensors))
    metadata["file_sha256"] = _metadata_sha256(metadata)
    if key is not None:
        metadata["hmac_sha256"] = _signature(key, metadata["file_sha256"])
    data = save(dict(tensors), metadata=metadata)

    def write(tmp):
        with open(tmp, "wb") as f:
            f.write(data)

    _atomic(path, write)
    return path


def load_learned(strategy: Any, path: str, *, key: Union[None, bytes, str] = None) -> List[Hashable]:
    """Put the learned state of :func:`save_learned`'s file into ``strategy`` (built the
    same way, nothing learned yet) without unpickling anything; returns the keys
    (experience ids) it holds.

    Everything is checked before the strategy changes: the file (readable, its integrity
    hash, its signature with a key), its identity (strategy type, mode, architecture, base
    weights, linearized parameters), its members (keys, weights, checksums, classes) and
    its tensors (the names and shapes the strategy's model has, one set per kept member);
    the state is then put in place in one step, undone if the strategy refuses it.

    :raises CheckpointError: an unreadable, edited, malformed or unsigned (with a key) file,
        or one of another strategy type, mode, architecture, base weights or linearized
        parameters, or a strategy that has already learned something. The strategy is then
        unchanged.
    """
    import hmac

    from safetensors import SafetensorError
    from safetensors.torch import load

    from ..composition.learner import learner_device
    from ..files.component import ComponentFileError, content_sha256
    from ..files.filesystem import _read_regular_file
    from ..files.signing import _metadata_sha256, _signature, resolve_key

    key = resolve_key(key)
    shown = _shown(path)
    try:
        f, _ = _read_regular_file(path)
        with f:
            data = f.read()
        length = int.from_bytes(data[:8], "little")
        metadata = json.loads(data[8:8 + length])["__metadata__"]
        tensors = load(data)
    except (OSError, ValueError, KeyError, TypeError, RecursionError, SafetensorError, ComponentFileError) as error:
        raise CheckpointError(f"{shown}: cannot be read as a learned-state file ({type(error).__name__}: "
                              f"{_shown(error)}).") from None
    if not isinstance(metadata, dict) or metadata.get("format") != LEARNED_FORMAT:
        raise CheckpointError(f"{shown}: not a learned-state file of avalanche-tmc (save_learned writes them).")
    if metadata.get("file_sha256") != _metadata_sha256(metadata) or content_sha256(tensors) != metadata.get(
            "content_sha256"):
        raise CheckpointError(f"{shown}: its content does not match its integrity hash (corrupted or edited).")
    if key is not None and not hmac.compare_digest(str(metadata.get("hmac_sha256")),
                                                   _signature(key, metadata["file_sha256"])):
        raise CheckpointError(f"{shown}: not signed with the given key.")
    try:
        identity, members = json.loads(metadata["identity"]), json.loads(metadata["members"])
        keep = json.loads(metadata["keep_components"])
    except (KeyError, TypeError, ValueError, RecursionError):
        raise CheckpointError(f"{shown}: its metadata are malformed.") from None
    if not isinstance(identity, dict) or not isinstance(keep, bool):
        raise CheckpointError(f"{shown}: its metadata are malformed (identity or keep_components).")
    _check_identity(identity, checkpoint_identity(strategy), path)
    learned = strategy.learned()
    if len(learned):
        raise CheckpointError(f"{shown}: the strategy has already learned {learned.keys}; load into a fresh one.")
    if keep != learned.keep_components:
        raise CheckpointError(f"{shown}: written with keep_components={keep}, the strategy has "
                              f"keep_components={learned.keep_components}.")
    _check_learned_members(members, shown)
    total, parts = _learned_tensors(tensors, members, keep, strategy, shown)
    if members:
        device = learner_device(strategy)  # read on the CPU, put where the strategy learns
        total = OrderedDict((n, t.to(device)) for n, t in total.items())
        parts = {k: OrderedDict((n, t.to(device)) for n, t in p.items()) for k, p in parts.items()}
        fresh = learned.empty_like()
        try:
            fresh.merge(OrderedDict((m["key"], m["weight"]) for m in members), total, parts if keep else None,
                        {m["key"]: m["checksum"] for m in members})
        except (KeyError, TypeError, ValueError, RuntimeError) as error:
            raise CheckpointError(f"{shown}: its tensors do not make a composition ({_shown(error)}). The strategy "
                                  "was left as it was.") from None
        state = strategy.snapshot_state() if hasattr(strategy, "snapshot_state") else None
        try:
            strategy.replace_learned(fresh)
            strategy.installed({m["key"]: {int(t): c for t, c in m["classes"].items()} for m in members})
        except Exception as error:  # noqa: BLE001  (whatever the strategy refuses: undone, then one error)
            if state is not None:
                strategy.restore_state(state)
            else:
                strategy.replace_learned(learned)
            raise CheckpointError(f"{shown}: the strategy refuses its learned state ({type(error).__name__}: "
                                  f"{_shown(error)}). The strategy was left as it was.") from None
    return [m["key"] for m in members]


def _check_learned_members(members: Any, shown: str) -> None:
    """A learned-state file's members: a list of {key (an int or a string, once each), weight
    (positive, finite), checksum (a SHA-256), classes (task label -> list of integers)}."""
    import math
    import re

    if not isinstance(members, list):
        raise CheckpointError(f"{shown}: its members are not a list.")
    seen = set()
    for member in members:
        if not isinstance(member, dict) or not {"key", "weight", "checksum", "classes"} <= set(member):
            raise CheckpointError(f"{shown}: a member entry lacks key, weight, checksum or classes.")
        key, weight, checksum, classes = member["key"], member["weight"], member["checksum"], member["classes"]
        if type(key) not in (int, str) or key in seen:
            raise CheckpointError(f"{shown}: member key {_shown(repr(key))} is not an integer or a string, or is "
                                  "listed twice.")
        seen.add(key)
        if type(weight) not in (int, float) or not 0 < weight < math.inf:
            raise CheckpointError(f"{shown}: member {_shown(repr(key))} has weight {_shown(repr(weight))}, not a "
                                  "positive finite number.")
        if not isinstance(checksum, str) or not re.fullmatch(r"[0-9a-f]{64}", checksum):
            raise CheckpointError(f"{shown}: member {_shown(repr(key))}'s checksum is not a SHA-256.")
        if not isinstance(classes, dict) or not all(
                isinstance(t, str) and re.fullmatch(r"-?[0-9]{1,9}", t) and isinstance(c, list)
                and all(type(x) is int for x in c) for t, c in classes.items()):
            raise CheckpointError(f"{shown}: member {_shown(repr(key))}'s classes are not task label -> list of "
                                  "integers.")


_Tensors = "OrderedDict[str, torch.Tensor]"


def _learned_tensors(tensors: Dict[str, "torch.Tensor"], members: List[Dict[str, Any]], keep: bool, strategy: Any,
                     shown: str) -> Tuple[_Tensors, Dict[Any, _Tensors]]:
    """(sum, key -> kept member's tensors) of a learned-state file, checked: ``sum/NAME`` and
    ``member/INDEX/NAME`` only, an index per member, each set of the names, shapes and
    dtypes the strategy's model has (its base, as component files are checked)."""
    from ..files.bases import model_reference
    from ..files.component import ComponentFileError
    from ..files.header import _TORCH_DTYPES, _expected_layout

    total: "OrderedDict[str, torch.Tensor]" = OrderedDict()
    indexed: Dict[int, "OrderedDict[str, torch.Tensor]"] = {}
    for name, tensor in tensors.items():
        kind, _, rest = name.partition("/")
        index, _, inner = rest.partition("/")
        if kind == "sum" and rest:
            total[rest] = tensor
        elif kind == "member" and inner and index.isdigit() and int(index) < len(members) and keep:
            indexed.setdefault(int(index), OrderedDict())[inner] = tensor
        else:
            raise CheckpointError(f"{shown}: tensor {_shown(repr(name))} is not a sum or a member of its "
                                  f"{len(members)} (with keep_components={keep}).")
    if not members:
        if tensors:
            raise CheckpointError(f"{shown}: it holds tensors but no member.")
        return total, {}
    if keep and sorted(indexed) != list(range(len(members))):
        raise CheckpointError(f"{shown}: it keeps its components, but not one set of tensors per member.")
    reference = model_reference(strategy.model).base
    for what, part in [("the sum", total)] + [(f"member {_shown(repr(members[i]['key']))}", indexed[i])
                                              for i in sorted(indexed)]:
        layout = {n: (_TORCH_DTYPES.get(str(t.dtype).replace("torch.", ""), str(t.dtype)), list(t.shape))
                  for n, t in part.items()}
        try:
            _expected_layout(reference, strategy.payload, layout, "")
        except ComponentFileError as error:
            why = str(error).split(": ", 2)[-1].rsplit(". Nothing was loaded.", 1)[0]
            raise CheckpointError(f"{shown}: {what} does not fit the strategy's model: {why}. The strategy was left "
                                  "as it was.") from None
    return total, {members[i]["key"]: part for i, part in indexed.items()}
