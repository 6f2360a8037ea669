"""The paper's comparison baselines on the same Avalanche benchmarks as TMC.

* :mod:`baselines.composition`: independent non-linear fine-tuning per experience,
  combined by weight averaging ("soup") or output ensembles ("ens-l", "ens-sm").
* :mod:`baselines.builtin`: Avalanche's own strategies (Naive, ER, LwF, EWC, DER++,
  joint training and its tangent counterpart) configured as in the paper.
"""

import avalanche_tmc_torchvision_fallback  # noqa: F401  (first: lets torchvision import on a CPU-only torch)

from .builtin import BUILTIN_METHODS, make_builtin_strategy
from .composition import (
    COMBINE_MODES,
    IndependentFineTunePlugin,
    IndependentFineTuneStrategy,
    average_state_dicts,
)

__all__ = [
    "IndependentFineTunePlugin",
    "IndependentFineTuneStrategy",
    "average_state_dicts",
    "COMBINE_MODES",
    "make_builtin_strategy",
    "BUILTIN_METHODS",
]
