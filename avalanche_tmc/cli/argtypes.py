"""The command line's argument types: a bad value is a usage error (exit 2) naming what is allowed."""

import argparse
import math
import re
from typing import Callable, Union

from .exits import UsageError

__all__ = ["in_range", "MAX_FLOAT32", "MAX_EPOCHS", "MAX_BATCH_SIZE", "MAX_PROJECTION_DIM", "MAX_SEED", "MAX_TIMEOUT",
           "MAX_EXPERIENCE_ID", "EPOCHS", "BATCH_SIZE", "LEARNING_RATE", "BETA", "PROJECTION_DIM", "SEED", "TIMEOUT",
           "experience_id", "module_name", "device", "check_device"]

MAX_FLOAT32 = 3.4028234663852886e38
"""The largest finite float32: a learning rate or β beyond it is infinite in the network's dtype."""
MAX_EPOCHS = 10_000
"""The most ``--epochs`` (per experience)."""
MAX_BATCH_SIZE = 65_536
"""The largest ``--batch-size`` and ``--eval-batch-size`` (a batch size beyond ``sys.maxsize`` failed late, in
the DataLoader)."""
MAX_PROJECTION_DIM = 16_384
"""The most random features of ``--projection-dim`` (ranpac: its statistics are a D x D matrix, 8·D² bytes in
float64: 2 GiB at 16384; the runner's bound, ``benchmarks.runner.config.MAX_PROJECTION_DIM``, is the same)."""
MAX_SEED = 2**31 - 1
"""The largest ``--seed``: experience e trains with torch seed ``1000 * seed + e``; a C int, and within numpy's
2**32 - 1 too."""
MAX_TIMEOUT = 7 * 24 * 3600.0
"""The longest ``--timeout``: a week, in seconds (Python's timedelta overflows far beyond)."""
MAX_EXPERIENCE_ID = 999
"""The largest experience id (``avalanche_tmc.training.seeding.EXPERIENCES_PER_SEED`` - 1, not imported
here: the command line's ``--help`` does not load torch)."""


def in_range(kind: Callable[[str], float], low: float, high: float, allowed: str) -> Callable[[str], float]:
    """An argparse type: a ``kind`` (int or float) in [``low``, ``high``] (finite), else a
    usage error saying ``allowed``: a value that would fail late (an overflow, memory) is
    refused while the command line is read."""
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except (ValueError, OverflowError):
            value = math.nan
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{allowed}, got {text!r}")
        return value

    parse.__name__ = allowed
    return parse


def _integer(low: int, high: int, why: str = "") -> Callable[[str], float]:
    """An integer in [``low``, ``high``], the message stating both ends (and ``why``)."""
    return in_range(int, low, high, f"must be an integer >= {low} and <= {high}{why}")


EPOCHS = _integer(1, MAX_EPOCHS)
"""``--epochs``: 1 to :data:`MAX_EPOCHS`."""
BATCH_SIZE = _integer(1, MAX_BATCH_SIZE)
"""``--batch-size``, ``--eval-batch-size``: 1 to :data:`MAX_BATCH_SIZE`."""
PROJECTION_DIM = _integer(1, MAX_PROJECTION_DIM, " (its statistics are a D x D matrix)")
"""``--projection-dim``: 1 to :data:`MAX_PROJECTION_DIM`."""
SEED = _integer(0, MAX_SEED)
"""``--seed``: 0 to :data:`MAX_SEED`."""
_FLOAT32 = "must be a positive finite number at most 3.4e38 (float32's largest)"
LEARNING_RATE = in_range(float, math.ulp(0.0), MAX_FLOAT32, _FLOAT32)
"""``--lr``: a float in (0, float32's largest]."""
BETA = in_range(float, math.ulp(0.0), MAX_FLOAT32, _FLOAT32)
"""``--beta``: a float in (0, float32's largest]."""
TIMEOUT = in_range(float, math.ulp(0.0), MAX_TIMEOUT,
                   f"must be a positive finite number of seconds <= {MAX_TIMEOUT:.0f} (a week)")
"""``--timeout``: seconds in (0, :data:`MAX_TIMEOUT`]."""


def experience_id(text: str) -> Union[int, str]:
    """``--experience``: an integer from 0 to :data:`MAX_EXPERIENCE_ID` (an index into the
    training stream) or ``all``."""
    if text == "all":
        return text
    if not re.fullmatch(r"\d+", text) or int(text) > MAX_EXPERIENCE_ID:
        raise argparse.ArgumentTypeError(f"an experience id is an integer >= 0 or 'all' (ids at most "
                                         f"{MAX_EXPERIENCE_ID}), got {text!r}")
    return int(text)


def module_name(text: str) -> str:
    """``--start-at``: a dotted module name (``layer1``, ``blocks.6``; checked against the model
    once it is built)."""
    if not re.fullmatch(r"[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*", text) or len(text) > 200:
        raise argparse.ArgumentTypeError(f"a module name is dotted words such as layer1 or blocks.6, got {text!r}")
    return text


def device(text: str) -> str:
    """``--device``: cpu, cuda, cuda:N, mps, xpu or xpu:N (checked to exist by :func:`check_device`)."""
    if not re.fullmatch(r"cpu|cuda(:\d+)?|mps|xpu(:\d+)?", text):
        raise argparse.ArgumentTypeError(f"must be cpu, cuda, cuda:N, mps, xpu or xpu:N, got {text!r}")
    return text


def check_device(name: str) -> None:
    """Refuse a device this machine does not have (torch only: before Avalanche's slow import)."""
    from ..training.devices import device_problem

    problem = device_problem(name)
    if problem is not None:
        raise UsageError(f"--device {name}: {problem}")
