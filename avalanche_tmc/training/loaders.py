"""Data loaders of the strategies of this package under ``torch.distributed``.

TMC's parallelism trains whole experiences per process and exchanges once at the end
(:func:`~avalanche_tmc.distributed.train_parallel`), never one experience's data sharded
over the processes as Avalanche's data-parallel training does.
"""

from typing import Any, Dict

from avalanche.distributed import DistributedHelper

__all__ = ["UnshardedLoaders"]


class UnshardedLoaders:
    """Mixin for a ``SupervisedTemplate``: its data loaders never shard an experience over
    the processes of a ``torch.distributed`` job.

    Avalanche's loaders apply a ``DistributedSampler`` whenever a process group exists
    (data-parallel training). Tangent components and statistics are trained one whole
    experience per process (:func:`~avalanche_tmc.distributed.train_parallel`), and an evaluation on one process
    must see the whole test set. Without a process group nothing changes."""

    def _obtain_common_dataloader_parameters(self, **kwargs: Any) -> Dict[str, Any]:
        args = super()._obtain_common_dataloader_parameters(**kwargs)
        # Avalanche's plain-DataLoader branch (an experience without task labels) takes no
        # such argument and never shards anyway.
        avalanche_loader = not self.is_training or hasattr(self.experience, "task_labels")
        if DistributedHelper.is_distributed and avalanche_loader:
            args["distributed_sampling"] = False
        return args
