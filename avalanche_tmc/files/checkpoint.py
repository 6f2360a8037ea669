"""Checkpoint and resume a whole strategy with Avalanche's own ``save_checkpoint`` /
``maybe_load_checkpoint``, made to work on this install, written atomically and checked on
loading; and what a checkpoint or a learned-state file (:mod:`.learned`) must share with
the strategy it is loaded into (:func:`checkpoint_identity`).

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
import io
import os
import pkgutil
import sys
from typing import Any, Dict, Optional, Sequence, Tuple

import torch.optim
from torch import nn

from ..composition.additive import tensors_sha256
from ..training.protocols import ComposableLearner
from .architectures import architecture_name
from .component import _shown
from .filesystem import write_atomically

__all__ = [
    "CheckpointError", "enable_dill_checkpoints", "save_checkpoint", "maybe_load_checkpoint", "checkpoint_identity",
    "EARLIER_STRATEGY_NAMES",
]


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded into this strategy: unreadable, or made by another
    strategy type or mode, architecture or pre-trained weights. The strategy is unchanged."""


def enable_dill_checkpoints() -> None:
    """Make ``torch.optim``'s loaded submodules attributes again so that ``dill`` pickles
    the optimizer classes by reference (idempotent; see the module docstring)."""
    for info in pkgutil.iter_modules(torch.optim.__path__):
        full = f"torch.optim.{info.name}"
        if full in sys.modules and not hasattr(torch.optim, info.name):
            setattr(torch.optim, info.name, sys.modules[full])


EARLIER_STRATEGY_NAMES: Dict[str, str] = {
    # written by pre-release builds (before the class was renamed): read, never written
    "TrainingFreeStrategy": "AnalyticHeadStrategy",
}
"""Strategy type -> the type files written before its rename record: read, never written."""


def checkpoint_identity(strategy: Any, *, earlier: bool = False) -> Dict[str, Any]:
    """What a checkpoint must share with the strategy it is loaded into: the strategy type,
    its mode (TMC/TME/TMC-Seq), the architecture (modules, parameter names and shapes)
    and, for a :class:`~avalanche_tmc.training.protocols.ComposableLearner`, the hash of the fixed
    base weights and buffers (the pre-trained point its components belong to) and, for a
    tangent model, the hash of its linearized parameters (names and shapes: TMC-FC
    linearizes the head only, TMC every parameter). With ``earlier``, the identity that files
    written before a class's rename record (:data:`EARLIER_STRATEGY_NAMES`,
    :data:`~avalanche_tmc.files.architectures.EARLIER_NAMES`)."""
    composable = isinstance(strategy, ComposableLearner)
    net: nn.Module = strategy.base_network() if composable else strategy.model
    # classes by their registered names (architectures.py), never by module paths: moving a class changes no file
    layout = "\n".join(f"{name}:{architecture_name(type(m), earlier=earlier)}" for name, m in net.named_modules())
    layout += "\n" + "\n".join(f"{n}:{tuple(t.shape)}" for n, t in net.state_dict().items())
    kind = type(strategy).__qualname__
    identity = dict(strategy=EARLIER_STRATEGY_NAMES.get(kind, kind) if earlier else kind,
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


def _check_identity(found: Dict[str, Any], expected: Dict[str, Any], path: str,
                    earlier: Optional[Dict[str, Any]] = None) -> None:
    """Refuse ``found`` unless it is ``expected`` or, given, ``earlier`` (the same identity as
    files written before a class's rename record it), naming the first difference."""
    if earlier is not None and all(found.get(name) == earlier.get(name) for name in _LABELS):
        return
    path = _shown(path)
    for name, label in _LABELS.items():
        if found.get(name) != expected.get(name):
            shown = [str(v)[:16] for v in (found.get(name), expected.get(name))]
            raise CheckpointError(
                f"{path}: this checkpoint does not fit the strategy: its {label} differs (checkpoint {shown[0]}, "
                f"strategy {shown[1]}). Build the strategy exactly as in the run that wrote it. The strategy was "
                "left as it was.")


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
    data = io.BytesIO()
    avalanche_save(strategy, data, exclude=exclude)
    write_atomically(path, data.getvalue())


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
