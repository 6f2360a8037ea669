"""Whether a torch device is on this machine, asked before any work is done.

A strategy given ``device="cuda"`` on a CPU-only torch used to fail about twenty frames deep
inside Avalanche (``Torch not compiled with CUDA enabled``), and the benchmark runner only
after preparing its data. :func:`device_problem` answers from torch alone (no allocation,
no Avalanche import), so the strategies, the command line and the runner refuse such a
device at once, in one sentence that says what to do.
"""

from typing import Optional, Union

import torch

__all__ = ["device_problem", "check_device"]


def device_problem(device: Union[str, torch.device]) -> Optional[str]:
    """Why ``device`` cannot be used here (one sentence), or None when it can: an unknown
    device string, ``meta`` (no values to train on), a backend this torch lacks or that has
    no device (``cuda`` on a CPU build or a machine without a GPU, ``mps`` off Apple
    silicon), or an index beyond the devices present."""
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as error:
        return f"{device!r} is not a torch device ({error}); use cpu, cuda, cuda:N, mps or xpu."
    if device.type == "cpu":
        return None
    if device.type == "meta":  # shapes without values: building works, training fails deep inside Avalanche
        return "a meta device holds shapes, no values: nothing can train or be evaluated on it; use cpu or cuda."
    backend = getattr(torch, device.type, None)
    if backend is None or not hasattr(backend, "is_available"):
        return "not a device type this check knows (cpu, cuda, mps, xpu)."
    if not backend.is_available():
        build = (f" (torch {torch.__version__} is a CPU build: install a CUDA build of torch, see docs/install.md)"
                 if device.type == "cuda" and torch.version.cuda is None else "")
        return f"no {device.type} device on this machine{build}; use cpu."
    count = backend.device_count() if hasattr(backend, "device_count") else 1
    if device.index is not None and device.index >= count:
        return f"this machine has {count} {device.type} device(s) (0..{count - 1})."
    return None


def check_device(device: Union[str, torch.device]) -> None:
    """Raise ``ValueError`` naming ``device`` and :func:`device_problem`'s sentence when it
    cannot be used."""
    problem = device_problem(device)
    if problem is not None:
        raise ValueError(f"device {device}: {problem}")
