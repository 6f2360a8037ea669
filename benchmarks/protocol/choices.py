"""The runner's fixed choices (standard library only, so that ``python -m benchmarks.run
--help`` answers without importing torch or Avalanche)."""

import argparse
from typing import Dict, Tuple

from avalanche_tmc.cli.argtypes import MAX_PROJECTION_DIM  # standard library only

__all__ = ["SCENARIOS", "RECIPE_CHOICES", "DEFAULT_PROJECTION_DIM", "MAX_PROJECTION_DIM", "PLOT_FORMATS",
           "plot_formats", "plot_formats_argument"]

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

PLOT_FORMATS: Tuple[str, ...] = ("png", "pdf", "svg")
"""The formats the plots can be written in (``--plot-format`` of the runner and the report):
PNG at 300 dpi, PDF with TrueType fonts, SVG with its text kept as text."""


def plot_formats(text: str) -> Tuple[str, ...]:
    """The formats of a ``--plot-format`` value (comma-separated, case and spaces ignored,
    repeats dropped), in the order given; raises ``ValueError`` naming an unknown one."""
    chosen = tuple(dict.fromkeys(part.strip().lower() for part in text.split(",") if part.strip()))
    unknown = [f for f in chosen if f not in PLOT_FORMATS]
    if unknown or not chosen:
        what = f"unknown plot format {unknown[0]!r}" if unknown else "no plot format"
        raise ValueError(f"{what}: choose from {', '.join(PLOT_FORMATS)} (comma-separated, e.g. png,pdf)")
    return chosen


def plot_formats_argument(text: str) -> Tuple[str, ...]:
    """:func:`plot_formats` as an argparse type: ``--plot-format``'s one-line refusal (exit 2)."""
    try:
        return plot_formats(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
