"""Learned-state files: what a strategy learned, in a file that loads without unpickling.

The learned state (components, composition, statistics: what a
:class:`~avalanche_tmc.training.protocols.ComposableLearner` learned). :func:`save_learned` writes a
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
all a TMC, TME or training-free run needs to resume (optimizer state is reset per
experience anyway).

Beside component files (:mod:`.storage`), with the same integrity hash and signing
(:mod:`.signing`), the same bounded reads of regular files and atomic writes
(:mod:`.filesystem`) and the same checks of tensors against a base (:mod:`.header`). The
file records ``format_version`` (:data:`~avalanche_tmc.files.component.FORMAT_VERSION`); a
file of another version is refused, saying what to do.
"""

import hmac
import json
import math
import re
from collections import OrderedDict
from typing import Any, Dict, Hashable, List, Tuple, Union

import torch

from ..training.protocols import learner_device
from .bases import model_reference
from .checkpoint import CheckpointError, _check_identity, checkpoint_identity
from .component import FORMAT_VERSION, ComponentFileError, _shown, content_sha256
from .filesystem import read_regular_file, write_atomically
from .header import _TORCH_DTYPES, _class_id, _expected_layout, _finite_positive
from .signing import hmac_signature, metadata_sha256, resolve_key

__all__ = ["LEARNED_FORMAT", "save_learned", "load_learned"]

LEARNED_FORMAT = "avalanche-tmc-learned"
"""The ``format`` entry of every learned-state file."""


def save_learned(strategy: Any, path: str, *, key: Union[None, bytes, str] = None) -> str:
    """Write what ``strategy`` (a :class:`~avalanche_tmc.training.protocols.ComposableLearner`)
    learned: the summed tensors, each kept member, the members' weights, checksums and
    classes, and :func:`checkpoint_identity`, as a safetensors file with one integrity hash
    over metadata and tensors (signed with ``key`` / ``$AVALANCHE_TMC_KEY_FILE`` if any).
    Written atomically; returns ``path``."""
    from safetensors.torch import save

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
    metadata = dict(format=LEARNED_FORMAT, format_version=str(FORMAT_VERSION),
                    identity=json.dumps(checkpoint_identity(strategy)),
                    keep_components=json.dumps(learned.keep_components), members=json.dumps(members),
                    content_sha256=content_sha256(tensors))
    metadata["file_sha256"] = metadata_sha256(metadata)
    if key is not None:
        metadata["hmac_sha256"] = hmac_signature(key, metadata["file_sha256"])
    write_atomically(path, save(dict(tensors), metadata=metadata))
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
    from safetensors import SafetensorError
    from safetensors.torch import load

    key = resolve_key(key)
    shown = _shown(path)
    try:
        f, _ = read_regular_file(path)
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
    _check_version(metadata.get("format_version"), shown)
    if metadata.get("file_sha256") != metadata_sha256(metadata) or content_sha256(tensors) != metadata.get(
            "content_sha256"):
        raise CheckpointError(f"{shown}: its content does not match its integrity hash (corrupted or edited).")
    if key is not None and not hmac.compare_digest(str(metadata.get("hmac_sha256")),
                                                   hmac_signature(key, metadata["file_sha256"])):
        raise CheckpointError(f"{shown}: not signed with the given key.")
    try:
        identity, members = json.loads(metadata["identity"]), json.loads(metadata["members"])
        keep = json.loads(metadata["keep_components"])
    except (KeyError, TypeError, ValueError, RecursionError):
        raise CheckpointError(f"{shown}: its metadata are malformed.") from None
    if not isinstance(identity, dict) or not isinstance(keep, bool):
        raise CheckpointError(f"{shown}: its metadata are malformed (identity or keep_components).")
    _check_identity(identity, checkpoint_identity(strategy), path, checkpoint_identity(strategy, earlier=True))
    learned = strategy.learned()
    if len(learned):
        raise CheckpointError(f"{shown}: the strategy has already learned {learned.keys}; load into a fresh one.")
    if keep != learned.keep_components:
        raise CheckpointError(f"{shown}: written with keep_components={keep}, the strategy has "
                              f"keep_components={learned.keep_components}.")
    _check_learned_members(members, shown)
    total, parts = _learned_tensors(tensors, members, keep, strategy, shown)
    if keep and members:
        _check_kept_members(total, parts, members, getattr(learned, "scaled", True), shown)
    if members:
        device = learner_device(strategy)  # read on the CPU, put where the strategy learns
        total = OrderedDict((n, t.to(device)) for n, t in total.items())
        parts = {k: OrderedDict((n, t.to(device)) for n, t in p.items()) for k, p in parts.items()}
        fresh = learned.empty_like()
        try:
            fresh.merge(OrderedDict((m["key"], m["weight"]) for m in members), total, parts if keep else None,
                        {m["key"]: m["checksum"] for m in members})
        except (KeyError, TypeError, ValueError, RuntimeError, ArithmeticError) as error:
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
        if not _finite_positive(weight):
            raise CheckpointError(f"{shown}: member {_shown(repr(key))} has weight {_shown(repr(weight))}, not a "
                                  "positive finite number.")
        if not isinstance(checksum, str) or not re.fullmatch(r"[0-9a-f]{64}", checksum):
            raise CheckpointError(f"{shown}: member {_shown(repr(key))}'s checksum is not a SHA-256.")
        if not isinstance(classes, dict) or not all(
                isinstance(t, str) and re.fullmatch(r"-?[0-9]{1,9}", t) and isinstance(c, list)
                and all(_class_id(x) for x in c) for t, c in classes.items()):
            raise CheckpointError(f"{shown}: member {_shown(repr(key))}'s classes are not task label -> list of "
                                  "integers.")


_Tensors = "OrderedDict[str, torch.Tensor]"


def _learned_tensors(tensors: Dict[str, "torch.Tensor"], members: List[Dict[str, Any]], keep: bool, strategy: Any,
                     shown: str) -> Tuple[_Tensors, Dict[Any, _Tensors]]:
    """(sum, key -> kept member's tensors) of a learned-state file, checked: ``sum/NAME`` and
    ``member/INDEX/NAME`` only, an index per member, each set of the names, shapes and
    dtypes the strategy's model has (its base, as component files are checked)."""
    total: "OrderedDict[str, torch.Tensor]" = OrderedDict()
    indexed: Dict[int, "OrderedDict[str, torch.Tensor]"] = {}
    for name, tensor in tensors.items():
        kind, _, rest = name.partition("/")
        index, _, inner = rest.partition("/")
        if kind == "sum" and rest:
            total[rest] = tensor
        elif (kind == "member" and inner and re.fullmatch(r"[0-9]{1,9}", index) and int(index) < len(members)
              and keep):
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


def _check_kept_members(total: _Tensors, parts: Dict[Any, _Tensors], members: List[Dict[str, Any]], scaled: bool,
                        shown: str) -> None:
    """Every kept member against what the file records of it (finite tensors, its
    checksum) and all of them against the recorded sum (``Σ w·member``, or ``Σ member``
    when the composition is not ``scaled``), up to float rounding: a member edited with its
    hashes recomputed (all-NaN, tripled) is refused, named."""
    from ..composition.additive import tensors_sha256

    for member in members:
        part, name = parts[member["key"]], _shown(repr(member["key"]))
        bad = [n for n, t in part.items() if not bool(torch.isfinite(t).all())]
        if bad:
            raise CheckpointError(f"{shown}: kept member {name} is not finite (NaN or inf in {_shown(bad[:3])}): "
                                  "the file is corrupted or edited. The strategy was left as it was.")
        if tensors_sha256(part) != member["checksum"]:
            raise CheckpointError(f"{shown}: kept member {name}'s tensors do not match its recorded checksum: the "
                                  "file is corrupted or edited. The strategy was left as it was.")
    factors = {m["key"]: float(m["weight"]) if scaled else 1.0 for m in members}
    eps = max(torch.finfo(t.dtype).eps if t.is_floating_point() else 0.0 for t in total.values()) if total else 0.0
    rtol = max(1e-4, 64 * len(members) * eps)
    dots = {key: 0.0 for key in factors}
    norms = {key: 0.0 for key in factors}
    differs: List[str] = []
    residual = 0.0
    for tensor_name, value in total.items():
        contributions = {key: factors[key] * parts[key][tensor_name].double() for key in factors}
        expected = sum(contributions.values())
        scale = sum(c.abs() for c in contributions.values()) + value.double().abs()
        diff = expected - value.double()
        if bool((diff.abs() > rtol * scale + 1e-12).any()):
            differs.append(tensor_name)
        residual += float((diff * diff).sum())
        for key, c in contributions.items():
            dots[key] += float((diff * c).sum())
            norms[key] += float((c * c).sum())
    if not differs:
        return
    # the member most aligned with the difference (a scaled member is exactly aligned with it)
    cosine = {key: abs(dots[key]) / math.sqrt(norms[key] * residual) if norms[key] and residual else 0.0
              for key in factors}
    suspect = max(cosine, key=cosine.get) if cosine else None
    which = (f"kept member {_shown(repr(suspect))} does not add up with the others" if suspect is not None
             and cosine[suspect] > 0.9 else f"its kept members {_shown(repr(list(factors)))} do not add up")
    raise CheckpointError(f"{shown}: {which} to the recorded sum (in {_shown(differs[:3])}): a member or the sum "
                          "was edited, with its checksums recomputed. The strategy was left as it was.")


def _check_version(version: Any, shown: str) -> None:
    """Refuse a learned-state file of another format version, saying what to do."""
    if version == str(FORMAT_VERSION):
        return
    if version is None or (isinstance(version, str) and re.fullmatch(r"[0-9]{1,6}", version)
                           and int(version) < FORMAT_VERSION):
        raise CheckpointError(
            f"{shown}: written by an earlier avalanche-tmc (format version {version or '2 or older'}), whose files "
            "named the network's classes by module paths that have since moved, so its architecture cannot be "
            f"checked. This version reads format version {FORMAT_VERSION} only: train the strategy again and write "
            "the file with save_learned. The strategy was left as it was.")
    raise CheckpointError(f"{shown}: format version {_shown(str(version))}; this avalanche-tmc reads format version "
                          f"{FORMAT_VERSION} (upgrade avalanche-tmc). The strategy was left as it was.")
