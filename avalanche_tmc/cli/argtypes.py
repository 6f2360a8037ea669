"""The command line's argument types: a bad value is a usage error (exit 2) naming what is allowed."""

import argparse
import math
import re
from typing import Callable, Union

from .exits import UsageError

__all__ = ["positive", "in_range", "POSITIVE_FLOAT", "POSITIVE_INT", "INT_MAX", "FLOAT32_MAX", "SEED_MAX",
           "PROJECTION_DIM_MAX", "TIMEOUT_MAX", "LEARNING_RATE", "BETA", "SEED", "PROJECTION_DIM", "TIMEOUT",
           "experience_id", "device", "check_device"]


def positive(kind: Callable[[str], float], allowed: str) -> Callable[[str], float]:
    """An argparse type: a ``kind`` (int or float) in (0, inf), else a usage error saying ``allowed``."""
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            value = math.nan
        if not 0 < value < math.inf:
            raise argparse.ArgumentTypeError(f"{allowed}, got {text!r}")
        return value

    parse.__name__ = allowed
    return parse


POSITIVE_FLOAT = positive(float, "must be a positive finite number")
"""A float in (0, inf)."""


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


INT_MAX = 2 ** 31 - 1
"""The largest count the command line takes (a batch size beyond ``sys.maxsize`` failed in the DataLoader)."""
POSITIVE_INT = in_range(int, 1, INT_MAX, f"must be an integer >= 1 (at most {INT_MAX})")
"""An integer in 1 … 2**31 - 1 (batch sizes, epochs)."""
FLOAT32_MAX = 3.4028234663852886e38
"""The largest finite float32: a learning rate or β beyond it is infinite in the network's dtype."""
SEED_MAX = 2 ** 32 - 1
"""The largest run seed (``1000 · seed + experience`` stays a valid torch seed; numpy's limit too)."""
PROJECTION_DIM_MAX = 20000
"""The largest ``--projection-dim``: RanPAC's statistics are a D x D matrix (20000: 1.6 GB in float32)."""
TIMEOUT_MAX = 10 ** 7
"""The longest ``--timeout`` in seconds (about 115 days; Python's timedelta overflows far beyond)."""
_FLOAT32 = "must be a positive finite number at most 3.4e38 (float32's largest)"
LEARNING_RATE = in_range(float, math.ulp(0.0), FLOAT32_MAX, _FLOAT32)
"""``--lr``: a float in (0, float32's largest]."""
BETA = in_range(float, math.ulp(0.0), FLOAT32_MAX, _FLOAT32)
"""``--beta``: a float in (0, float32's largest]."""
SEED = in_range(int, 0, SEED_MAX, f"must be an integer in 0..{SEED_MAX}")
"""``--seed``: an integer in 0 … 2**32 - 1."""
PROJECTION_DIM = in_range(int, 1, PROJECTION_DIM_MAX,
                          f"must be an integer >= 1 and <= {PROJECTION_DIM_MAX}, i.e. 1..{PROJECTION_DIM_MAX} "
                          "(its statistics are a D x D matrix)")
"""``--projection-dim``: an integer in 1 … 20000."""
TIMEOUT = in_range(float, math.ulp(0.0), TIMEOUT_MAX, "must be a positive finite number of seconds at most 1e7")
"""``--timeout``: seconds in (0, 1e7]."""


def experience_id(text: str) -> Union[int, str]:
    """``--experience``: an integer >= 0 (an index into the training stream) or ``all``."""
    if text == "all":
        return text
    if not re.fullmatch(r"\d+", text):
        raise argparse.ArgumentTypeError(f"an experience id is an integer >= 0 or 'all', got {text!r}")
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
