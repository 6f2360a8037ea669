"""The command line's argument types: a bad value is a usage error (exit 2) naming what is allowed."""

import argparse
import math
import re
from typing import Callable, Union

from .exits import UsageError

__all__ = ["positive", "POSITIVE_FLOAT", "POSITIVE_INT", "experience_id", "device", "check_device"]


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
POSITIVE_INT = positive(int, "must be an integer >= 1")
"""An integer >= 1."""


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
