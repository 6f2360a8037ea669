"""Checkpoint and resume a strategy with Avalanche's own ``save_checkpoint`` /
``maybe_load_checkpoint``, made to work on this install and written atomically.

Why Avalanche's functions fail as they are: they pickle the whole strategy with
``dill``. ``dill`` (0.4) pickles a class by reference only when it can find it again by
importing ``module.qualname``, and it imports ``torch.optim.adam`` as
``getattr(torch.optim, "adam")``. torch 2.13 deletes those submodule attributes from
``torch.optim`` (``torch.optim.adam`` is in ``sys.modules`` but not an attribute), so
``dill`` pickles ``Adam``/``SGD`` *by value*, walks into their module globals and stops at
``typing_extensions``' private sentinel (``PicklingError: Can't pickle sentinel``), after
having written part of the file. :func:`enable_dill_checkpoints` puts the submodules back
as attributes (what older torch did), so the optimizer classes pickle by reference again.

Supported path::

    from avalanche_tmc.checkpoint import maybe_load_checkpoint, save_checkpoint

    strategy, first_exp = maybe_load_checkpoint(build_strategy(), "ckpt.pkl")
    for exp in benchmark.train_stream[first_exp:]:
        strategy.train(exp)
        save_checkpoint(strategy, "ckpt.pkl")  # atomic: a crash never leaves a half-written file

The strategy must be built the same way in the resuming process (same network, head seed,
plugins); the checkpoint restores its learned state (components, model ``δ``, optimizer,
task classes, clock, RNG state) on top.
"""

import os
import pkgutil
import sys
import tempfile

import torch.optim

__all__ = ["enable_dill_checkpoints", "save_checkpoint", "maybe_load_checkpoint"]


def enable_dill_checkpoints() -> None:
    """Make ``torch.optim``'s loaded submodules attributes again so that ``dill`` pickles
    the optimizer classes by reference (idempotent; see the module docstring)."""
    for info in pkgutil.iter_modules(torch.optim.__path__):
        full = f"torch.optim.{info.name}"
        if full in sys.modules and not hasattr(torch.optim, info.name):
            setattr(torch.optim, info.name, sys.modules[full])


def save_checkpoint(strategy, path: str, exclude=None) -> None:
    """Avalanche's ``save_checkpoint``, working on this install and atomic: written to a
    temporary file next to ``path``, then renamed over it (a failure or a kill leaves the
    previous checkpoint intact)."""
    from avalanche.checkpointing import save_checkpoint as avalanche_save

    enable_dill_checkpoints()
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    os.close(fd)
    try:
        avalanche_save(strategy, tmp, exclude=exclude)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def maybe_load_checkpoint(strategy, path: str, map_location=None):
    """Avalanche's ``maybe_load_checkpoint``: ``(strategy, first experience to train)``,
    the strategy unchanged and 0 when ``path`` does not exist."""
    from avalanche.checkpointing import maybe_load_checkpoint as avalanche_load

    enable_dill_checkpoints()
    return avalanche_load(strategy, path, map_location=map_location)
