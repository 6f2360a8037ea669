"""The hyper-parameters every method of a run trains with (:class:`TrainConfig`): a leaf
module (standard library and the protocol's settings only), read by the method registry,
its builders and the runner alike."""

from dataclasses import replace
from typing import Any, Optional, Sequence

from baselines.builtin import REPLAY_BUFFER
from benchmarks.protocol.settings import with_settings

__all__ = ["TrainConfig"]


@with_settings("train")
class TrainConfig:
    """Hyper-parameters shared by every method of a run (built once per run and seed by
    :func:`benchmarks.runner.config.train_config`).

    Its fields are the run's settings the methods train with (``trains=True`` in
    :data:`benchmarks.protocol.settings.SETTINGS`: epochs, batch size, learning rates, β,
    the schedule, the recipe's decay, the device, autocast, ...) and the ones below, which
    only the methods know.
    """

    num_classes: int
    eval_batch_size: int = 256
    mem_size: int = REPLAY_BUFFER  # replay buffer of ER / DER (the run sizes it to its data)
    slda_shrinkage: float = 1e-4  # Avalanche's StreamingLDA default
    seed: int = 0
    bn_batches: Optional[Sequence[Any]] = None  # tangent base point: BatchNorm re-estimated on these
    head_seed: Optional[int] = None  # the new head's initialisation (None: ``seed``); experiments/variance.py

    def for_family(self, family: str) -> "TrainConfig":
        """This config as a group of ``family`` sees it: the tangent family trains for
        ``tangent_epochs`` when set (learning rates are already per family)."""
        if family == "tangent" and self.tangent_epochs is not None:
            return replace(self, epochs=self.tangent_epochs)
        return self
