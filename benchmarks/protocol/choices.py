"""The runner's fixed choices (standard library only, so that ``python -m benchmarks.run
--help`` answers without importing torch or Avalanche)."""

from typing import Dict, Tuple

from avalanche_tmc.cli.argtypes import MAX_PROJECTION_DIM  # standard library only

__all__ = ["SCENARIOS", "RECIPE_CHOICES", "DEFAULT_PROJECTION_DIM", "MAX_PROJECTION_DIM"]

SCENARIOS: Tuple[str, ...] = ("class", "task", "data")
"""The scenarios a run can be: class-, task- or data-incremental."""

RECIPE_CHOICES: Dict[str, Tuple[str, ...]] = {
    "decay_kind": ("norm", "squared", "decoupled"),
    "schedule": ("step", "authors"),
    "transforms": ("square", "authors"),
    "class_order": ("seeded", "label"),
    "shards": ("permutation", "authors"),
    "imagenet_weights": ("DEFAULT", "IMAGENET1K_V1"),
}
"""The values of the training-recipe settings (see :class:`benchmarks.runner.config.RunConfig`)."""

DEFAULT_PROJECTION_DIM = 2000
"""The random ReLU features of the RanPAC-style heads (``--projection-dim``'s default); at most
:data:`MAX_PROJECTION_DIM`, the command line's bound (their statistics are M×M: 8·M² bytes in float64)."""
