"""The argparse types of the runner's settings (standard library only): each refuses a bad
value while the command line is read, in one line (exit code 2), and states the bound."""

import argparse
from typing import Callable, Tuple

from avalanche_tmc.cli.argtypes import MAX_EPOCHS, MAX_SEED  # standard library only

__all__ = ["MAX_SEEDS", "SEED_COUNT_ASKS", "int_at_least", "bounded_float", "milestones", "decay", "seeds"]

MAX_SEEDS = 1000
"""The most seeds of ``--seeds`` (a count, or the length of a list)."""


def int_at_least(minimum: int, maximum: int) -> Callable[[str], int]:
    """An argparse type for an integer from ``minimum`` (0 or 1) to ``maximum``."""
    kind = "a positive" if minimum == 1 else "a non-negative"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {kind} integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        if value > maximum:
            raise argparse.ArgumentTypeError(f"must be in {minimum}..{maximum}, got {value}")
        return value

    return parse


def bounded_float(high: float, hint: str) -> Callable[[str], float]:
    """An argparse type for a float in (0, high]."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not 0 < value <= high:  # also refuses nan and inf
            raise argparse.ArgumentTypeError(f"must be in (0, {high:g}] ({hint}), got {text}")
        return value

    return parse


def milestones(text: str) -> Tuple[int, ...]:
    """``--milestones 10,15``: increasing positive epochs, at most :data:`MAX_EPOCHS`."""
    try:
        epochs = [int(m) for m in text.split(",") if m.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated epochs, e.g. 10,15; got {text!r}") from None
    if any(e < 1 for e in epochs) or epochs != sorted(set(epochs)):
        raise argparse.ArgumentTypeError(f"milestones must be increasing positive epochs, got {text!r}")
    if epochs and epochs[-1] > MAX_EPOCHS:
        raise argparse.ArgumentTypeError(f"milestones must be at most {MAX_EPOCHS} (the most epochs), got {text!r}")
    return tuple(epochs)


def decay(text: str) -> float:
    """``--decay``: a finite number >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0 (the authors: 1e-5), got {text}")
    return value


SEED_COUNT_ASKS = 50
"""The smallest ``--seeds N`` read as a question: a count this large is more often a seed (100,
the confirmatory run's first) than a plan, so it must be written as a range (``0-99``)."""


def seeds(text: str) -> Tuple[int, ...]:
    """``--seeds 3`` (seeds 0, 1, 2), ``--seeds 0,4,7`` (those seeds) or ``--seeds 100-119``
    (those, both ends included). A count of :data:`SEED_COUNT_ASKS` or more is refused,
    asking for the range or ``--seed N``: ``--seeds 100`` meant as seed 100 would start a
    hundred-seed run."""
    text = text.strip()
    if "-" in text.lstrip("-") and "," not in text:
        first, _, last = text.partition("-")
        try:
            low, high = int(first), int(last)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a range of seeds (100-119), got {text!r}") from None
        if not 0 <= low <= high <= MAX_SEED or high - low + 1 > MAX_SEEDS:
            raise argparse.ArgumentTypeError(f"a range of seeds must be A-B with 0 <= A <= B <= {MAX_SEED}, at most "
                                             f"{MAX_SEEDS} seeds, got {text!r}")
        return tuple(range(low, high + 1))
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a count (3), comma-separated seeds (0,4,7) or a range "
                                         f"(100-119), got {text!r}") from None
    if "," not in text:
        if len(values) != 1 or not 1 <= values[0] <= MAX_SEEDS:
            raise argparse.ArgumentTypeError(f"a seed count must be in 1..{MAX_SEEDS}, got {text!r}")
        if values[0] >= SEED_COUNT_ASKS:
            raise argparse.ArgumentTypeError(
                f"{text} as a count runs {values[0]} seeds (0-{values[0] - 1}): write --seeds 0-{values[0] - 1} if "
                f"that is the plan, or --seed {values[0]} for seed {values[0]} alone")
        return tuple(range(values[0]))
    if len(values) > MAX_SEEDS:
        raise argparse.ArgumentTypeError(f"at most {MAX_SEEDS} seeds, got {len(values)}")
    if not values or len(set(values)) != len(values) or min(values) < 0 or max(values) > MAX_SEED:
        raise argparse.ArgumentTypeError(f"seeds must be distinct integers in 0..{MAX_SEED}, got {text!r}")
    return tuple(values)
