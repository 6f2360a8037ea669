"""The bounds of the datasets' loader options (``--data-option KEY=VALUE``), checked while the
command line is read, before any data is touched (standard library only): a count per class
is an integer in 1..:data:`MAX_PER_CLASS` (``train_per_class=-3`` once meant "all but 3 per
class"), a fraction lies in (0, 1), a seed in 0..2**31-1, a worker count in 0..256. Options
not listed here (names, flags) are the loader's to check.
"""

import math
from typing import Any, Dict, Optional, Tuple

from avalanche_tmc.cli.argtypes import MAX_SEED

__all__ = ["MAX_PER_CLASS", "DATA_OPTION_BOUNDS", "data_option_problem"]

MAX_PER_CLASS = 1_000_000
"""The largest count of a dataset option (images per class or category, categories)."""
_MAX_WORKERS = 256  # benchmarks.runner.arguments.MAX_PROCESSES (that module imports this one)

DATA_OPTION_BOUNDS: Dict[str, Tuple[str, float, float]] = {
    **{name: ("int", 1, MAX_PER_CLASS) for name in ("train_per_class", "test_per_class", "limit_per_category",
                                                    "categories")},
    **{name: ("fraction", 0.0, 1.0) for name in ("test_fraction", "train_fraction")},
    **{name: ("int", 0, MAX_SEED) for name in ("seed", "split_seed")},
    "workers": ("int", 0, _MAX_WORKERS),
}
"""``option -> (kind, low, high)``: ``"int"`` in [low, high], ``"fraction"`` in (low, high)."""


def data_option_problem(name: str, value: Any) -> Optional[str]:
    """What is wrong with ``value`` for the loader option ``name`` (its bound in words), or
    None when it is within :data:`DATA_OPTION_BOUNDS` (or ``name`` is not bounded there:
    ``categories`` may also name categories)."""
    if name not in DATA_OPTION_BOUNDS or name == "categories" and isinstance(value, (str, list, tuple)):
        return None
    kind, low, high = DATA_OPTION_BOUNDS[name]
    if kind == "int":
        if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high:
            return None
        return f"must be an integer in {low}..{high}"
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if number and math.isfinite(value) and low < value < high:
        return None
    return f"must be a fraction in ({low:g}, {high:g})"
