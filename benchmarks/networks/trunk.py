"""The runner's frozen trunk: the library's split and features
(:mod:`avalanche_tmc.models.frozen_trunk`), with what is the runner's own: a refusal that
names its flag, and the features of a whole dataset cached before the runner builds its
scenarios (the library's :func:`~avalanche_tmc.frozen_trunk_benchmark` caches an Avalanche
benchmark's experiences instead).

What it is for: making CPU benchmark runs affordable without changing what is compared.
Every method (TMC's tangent models and the non-linear baselines alike) then trains the
same top part of the network on the same cached trunk features; the trunk is never
trained by anyone (the official TMC code also leaves the stem out of the linearization).
No augmentation is used, so caching is exact.
"""

from typing import Tuple

from torch import Tensor, nn

from avalanche_tmc.models.frozen_trunk import ChainSegment, NotAChainError, split_network, trunk_features

__all__ = ["ChainSegment", "split_backbone", "cache_features"]


def split_backbone(model: nn.Module, start_at: str, example: Tensor) -> Tuple[ChainSegment, ChainSegment]:
    """:func:`~avalanche_tmc.models.frozen_trunk.split_network`, refusing a network that is
    not a chain with the runner's way out (``--freeze-until none``)."""
    try:
        return split_network(model, start_at, example)
    except NotAChainError as error:
        raise ValueError(f"{error} In the runner: run it without a frozen trunk (--freeze-until none).") from None


cache_features = trunk_features
"""``trunk``'s features of a whole dataset (targets and domains kept) on one thread, before the
runner builds its scenarios: the library's :func:`~avalanche_tmc.models.frozen_trunk.trunk_features`
(``on_batch(n)`` after each batch: the runner's progress)."""
