"""The command line's argument types: a bad value is a usage error (exit 2) naming what is allowed."""

import argparse
import math
import re
from typing import Callable, Union

from .exits import UsageError

__all__ = ["positive", "POSITIVE_FLOAT", "POSITIVE_INT", "MAX_EPOCHS", "MAX_BATCH_SIZE", "MAX_PROJECTION_DIM",
           "MAX_SEED", "MAX_TIMEOUT", "MAX_EXPERIENCE_ID", "EPOCHS", "BATCH_SIZE", "PROJECTION_DIM", "SEED", "TIMEOUT",
           "experience_id", "device", "check_device"]

MAX_EPOCHS = 10_000
"""The most ``--epochs`` (per experience)."""
MAX_BATCH_SIZE = 65_536
"""The largest ``--batch-size`` and ``--eval-batch-size``."""
MAX_PROJECTION_DIM = 100_000
"""The most random features of ``--projection-dim`` (ranpac: a D x D matrix of statistics)."""
MAX_SEED = 2**31 - 1
"""The largest ``--seed`` (experience e trains with torch seed ``1000 * seed + e``)."""
MAX_TIMEOUT = 7 * 24 * 3600.0
"""The longest ``--timeout``: a week, in seconds."""
MAX_EXPERIENCE_ID = 999
"""The largest experience id (``avalanche_tmc.training.seeding.EXPERIENCES_PER_SEED`` - 1, not imported
here: the command line's ``--help`` does not load torch)."""


def positive(kind: Callable[[str], float], allowed: str, maximum: float = math.inf) -> Callable[[str], float]:
    """An argparse type: a ``kind`` (int or float) in (0, inf) and at most ``maximum``, else a
    usage error saying ``allowed``."""
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            value = math.nan
        if not 0 < value < math.inf or value > maximum:
            raise argparse.ArgumentTypeError(f"{allowed}, got {text!r}")
        return value

    parse.__name__ = allowed
    return parse


POSITIVE_FLOAT = positive(float, "must be a positive finite number")
"""A float in (0, inf)."""
POSITIVE_INT = positive(int, "must be an integer >= 1")
"""An integer >= 1."""
EPOCHS = positive(int, f"must be an integer >= 1 and <= {MAX_EPOCHS}", MAX_EPOCHS)
"""``--epochs``: 1 to :data:`MAX_EPOCHS`."""
BATCH_SIZE = positive(int, f"must be an integer >= 1 and <= {MAX_BATCH_SIZE}", MAX_BATCH_SIZE)
"""``--batch-size``, ``--eval-batch-size``: 1 to :data:`MAX_BATCH_SIZE`."""
PROJECTION_DIM = positive(int, f"must be an integer >= 1 and <= {MAX_PROJECTION_DIM}", MAX_PROJECTION_DIM)
"""``--projection-dim``: 1 to :data:`MAX_PROJECTION_DIM`."""
TIMEOUT = positive(float, f"must be a positive finite number of seconds <= {MAX_TIMEOUT:.0f} (a week)", MAX_TIMEOUT)
"""``--timeout``: seconds, at most :data:`MAX_TIMEOUT`."""


def SEED(text: str) -> int:  # noqa: N802  (an argparse type, named like the others)
    """``--seed``: an integer from 0 to :data:`MAX_SEED`."""
    if not re.fullmatch(r"\d+", text.strip()) or int(text) > MAX_SEED:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0 and <= {MAX_SEED}, got {text!r}")
    return int(text)


def experience_id(text: str) -> Union[int, str]:
    """``--experience``: an integer from 0 to :data:`MAX_EXPERIENCE_ID` (an index into the
    training stream) or ``all``."""
    if text == "all":
        return text
    if not re.fullmatch(r"\d+", text) or int(text) > MAX_EXPERIENCE_ID:
        raise argparse.ArgumentTypeError(f"an experience id is an integer >= 0 or 'all' (ids at most "
                                         f"{MAX_EXPERIENCE_ID}), got {text!r}")
    return int(text)


def device(text: str) -> str:
    """``--device``: cpu, cuda, cuda:N, mps, xpu or xpu:N (checked to exist by :func:`check_device`)."""
    if not re.fullmatch(r"cpu|cuda(:\d+)?|mps|xpu(:\d+)?", text):
        raise argparse.ArgumentTypeError(f"must be cpu, cuda, cuda:N, mps, xpu or xpu:N, got {text!r}")
    return text


def check_device(name: str) -> None:
    """Refuse a device this machine does not have (torch only: before Avalanche's slow import)."""
    import torch

    kind, _, index = name.partition(":")
    backend = getattr(torch, kind, None) if kind != "cpu" else None
    if backend is not None and (not backend.is_available() or (index and int(index) >= backend.device_count())):
        raise UsageError(f"--device {name}: no such device on this machine (use --device cpu).")
