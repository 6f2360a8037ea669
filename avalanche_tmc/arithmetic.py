"""One CPU arithmetic on every x86-64 machine: pin the instruction set PyTorch computes with.

PyTorch's CPU build chooses its kernels by the instruction set of the machine it runs on:
ATen's own kernels (``ATEN_CPU_CAPABILITY``) and oneDNN's convolutions
(``ONEDNN_MAX_CPU_ISA``) take AVX-512 paths where the CPU has them, and those round
otherwise than the AVX2 paths. A tangent model, linear in δ and trained by a convex loss,
hardly notices; SGD training of a non-linear network turns the last bit into points of
accuracy (one seed of one baseline moved by 12 points between an AVX2 and an AVX-512 CPU).
Capped at AVX2, an AVX-512 machine computes what an AVX2 machine computes, bit for bit
(docs/results.md, "One arithmetic").

Both libraries read their variable once, at their first operation (not at ``import torch``),
so :func:`pin_cpu_arithmetic` works at the top of a script, after the imports, before the
first tensor operation; :func:`cpu_arithmetic` reports what this process computes with,
from the libraries' own reports (``torch.backends.cpu.get_cpu_capability()``, oneDNN's and
MKL's verbose headers)::

    from avalanche_tmc import pin_cpu_arithmetic
    print(pin_cpu_arithmetic().describe())   # first thing, before any tensor is made

Measuring fixes the choice for the rest of the process, as the first operation would.
"""

import ctypes
import os
import platform
import re
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, Optional

import torch

__all__ = ["fixed_threads", "PINNED_ISA", "PIN_VARIABLES", "CpuArithmetic", "ArithmeticNotPinnedError",
           "cpu_arithmetic", "pin_cpu_arithmetic"]

PINNED_ISA = "avx2"
"""The instruction set every pinned row is computed with: the widest every x86-64 CPU of the
last decade has, so AVX2 and AVX-512 machines (Intel and AMD) compute the same numbers."""

PIN_VARIABLES: Dict[str, str] = {
    "ATEN_CPU_CAPABILITY": "avx2",  # ATen's own vectorised kernels (measured to matter)
    "ONEDNN_MAX_CPU_ISA": "AVX2",  # oneDNN's convolutions and their backward (measured to matter)
    # MKL's matrix products: no effect measured on AMD CPUs, where MKL takes its generic path
    # whatever the CPU has; on Intel AVX-512 CPUs MKL would take AVX-512 paths without them
    "MKL_CBWR": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
}
"""The variables that cap each library at AVX2, read when the library first computes."""

_ONEDNN_PINNED = ("Intel AVX2", "avx2 (from a convolution)")  # oneDNN's names of its ISA when capped at AVX2


class ArithmeticNotPinnedError(RuntimeError):
    """The arithmetic could not be pinned: torch computed before the variables were set."""


@dataclass(frozen=True)
class CpuArithmetic:
    """What this process computes with on the CPU, from the libraries' own reports.

    ``aten``: ATen's capability (``AVX2``, ``AVX512``, ``DEFAULT``...); ``onednn``: the ISA
    oneDNN names in its verbose header (``Intel AVX2``...; ``none`` without oneDNN); ``mkl``:
    the code path MKL names in its verbose header and its CNR mode (``none`` without MKL);
    ``cpu``: the CPU's model name; ``machine``: ``platform.machine()``; ``requested``: the
    variables' values this process was asked to compute with (``None``: not pinned)."""

    aten: str
    onednn: str
    mkl: str
    cpu: str
    machine: str
    requested: Optional[str] = None

    @property
    def pinned(self) -> bool:
        """Whether both measured libraries compute with AVX2 (the pinned arithmetic)."""
        return self.aten == PINNED_ISA.upper() and self.onednn in _ONEDNN_PINNED + ("none",)

    @property
    def label(self) -> str:
        """``avx2`` when pinned, else ``native:<ATen>/<oneDNN>``: what a results key records."""
        if self.pinned:
            return PINNED_ISA
        return f"native:{self.aten.lower()}/{re.sub(r'[^a-z0-9]+', '-', self.onednn.lower()).strip('-')}"

    def describe(self) -> str:
        """One line: what the arithmetic is, where it was measured, and what it means for rows."""
        libraries = f"ATen {self.aten}, oneDNN {self.onednn}, MKL {self.mkl}"
        if self.pinned:
            return (f"arithmetic: AVX2, pinned ({libraries}; {self.cpu}): what any x86-64 CPU with AVX2 computes so "
                    "pinned (measured bit for bit alike on AMD AVX2 and AVX-512 CPUs)")
        if self.requested is None:
            return (f"arithmetic: native, not pinned ({libraries}; {self.cpu}): SGD rows may differ from another "
                    "CPU's in the last bits and then by points; kept apart from the pinned AVX2 rows")
        if not _has_avx2():
            return (f"arithmetic: {self.aten}, this CPU has no AVX2 ({self.machine}; {libraries}; {self.cpu}): "
                    "its rows are its own, kept apart from the AVX2 rows that every x86-64 CPU with AVX2 reproduces")
        return (f"arithmetic: native, NOT pinned ({libraries}; {self.cpu}): torch computed before the variables "
                "were set; kept apart from the pinned AVX2 rows")


_MEASURED: Dict[str, CpuArithmetic] = {}
# Measured once; a forked child inherits the record with the kernels its parent chose (oneDNN
# prints its header once a process, so a child's own reading would name them otherwise), a
# spawned process measures anew.


def _cpu_flags() -> Optional[set]:
    """The CPU's feature flags (``/proc/cpuinfo``; None off Linux)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            return next((set(line.split(":", 1)[1].split()) for line in f if line.startswith("flags")), set())
    except OSError:
        return None


def _cpu_model() -> str:
    """The CPU's model name and the widest vector instructions it has: ``AMD EPYC (AVX-512)``."""
    name = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            name = next((line.split(":", 1)[1].strip() for line in f
                         if line.lower().startswith(("model name", "hardware", "cpu model"))), "")
    except OSError:
        pass
    flags = _cpu_flags()
    widest = None if flags is None else "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    name = name or platform.processor() or platform.machine() or "unknown CPU"
    return f"{name} ({widest})" if widest else name


def _has_avx2() -> bool:
    """Whether the CPU has AVX2 (from /proc/cpuinfo; off Linux, by the machine's name)."""
    flags = _cpu_flags()
    return "avx2" in flags if flags is not None else platform.machine().lower() in ("x86_64", "amd64")


def _c_stdout(action: Callable[[], None]) -> str:
    """What ``action`` printed on file descriptor 1 (the C libraries print their verbose
    reports there); empty where the descriptor cannot be redirected."""
    try:
        libc = ctypes.CDLL(None)
    except (OSError, TypeError):  # no C library to flush (Windows)
        action()
        return ""
    sys.stdout.flush()
    saved = os.dup(1)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 1)
        try:
            action()
        finally:
            libc.fflush(None)
            os.dup2(saved, 1)
            os.close(saved)
        captured.seek(0)
        return captured.read().decode("utf-8", errors="replace")


def _onednn_isa() -> str:
    """The ISA oneDNN computes with: its verbose header's ``isa:``, else the implementation
    of a convolution it ran (the header is printed once a process)."""
    if not torch.backends.mkldnn.is_available():
        return "none"

    def convolve() -> None:
        with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON), torch.no_grad():
            torch.nn.functional.conv2d(torch.ones(2, 8, 8, 8), torch.ones(8, 8, 3, 3))

    text = _c_stdout(convolve)
    header = re.search(r"info,cpu,isa:([^\r\n]+)", text)
    if header:
        return header.group(1).strip()
    implementation = re.search(r"primitive,exec,cpu,convolution,[^,:]*:(\w+)", text)
    return f"{implementation.group(1)} (from a convolution)" if implementation else "unknown"


def _mkl_path() -> str:
    """The code path MKL names in its verbose header, and its CNR mode."""
    if not torch.backends.mkl.is_available():
        return "none"

    def multiply() -> None:
        with torch.backends.mkl.verbose(torch.backends.mkl.VERBOSE_ON):
            torch.ones(8, 8) @ torch.ones(8, 8)

    text = _c_stdout(multiply)
    path = re.search(r"for Intel\(R\) 64 architecture (.+?)(?:, Lnx|, Win|, Mac|$)", text, re.MULTILINE)
    cnr = re.search(r"CNR:(\w+)", text)
    if not path and not cnr:
        return "unknown"
    return f"{path.group(1).strip() if path else 'unknown path'}, CNR {cnr.group(1) if cnr else 'unknown'}"


def cpu_arithmetic() -> CpuArithmetic:
    """What this process computes with on the CPU (measured once; measuring runs a small
    convolution and product, which fixes the kernels' choice as any first operation would;
    a forked child inherits its parent's record, as it inherits the kernels chosen)."""
    if "process" not in _MEASURED:
        requested = PINNED_ISA if all(os.environ.get(k) == v for k, v in PIN_VARIABLES.items()) else None
        _MEASURED["process"] = CpuArithmetic(aten=torch.backends.cpu.get_cpu_capability(), onednn=_onednn_isa(),
                                             mkl=_mkl_path(), cpu=_cpu_model(), machine=platform.machine(),
                                             requested=requested)
    return _MEASURED["process"]


def pin_cpu_arithmetic(strict: bool = True) -> CpuArithmetic:
    """Compute with AVX2 on every x86-64 CPU: set :data:`PIN_VARIABLES` (in ``os.environ``,
    so processes started later inherit them) and measure what this process now computes
    with (:func:`cpu_arithmetic`). Call it first thing, before any tensor operation.

    On a CPU without AVX2 (or not x86) nothing can be pinned: the result says what it
    computes instead (:meth:`CpuArithmetic.describe`). Where torch computed before the call,
    its kernels are already chosen: ``strict`` raises :class:`ArithmeticNotPinnedError`
    saying what to do; otherwise the result says so (``pinned`` False)."""
    already = _MEASURED.get("process")
    os.environ.update(PIN_VARIABLES)
    if already is not None and already.requested is None:  # measured before the pin: a record of that
        _MEASURED["process"] = CpuArithmetic(already.aten, already.onednn, already.mkl, already.cpu,
                                             already.machine, requested=PINNED_ISA)
    measured = cpu_arithmetic()
    if strict and not measured.pinned and _has_avx2():
        exports = " ".join(f"{k}={v}" for k, v in PIN_VARIABLES.items())
        raise ArithmeticNotPinnedError(
            f"The CPU arithmetic could not be pinned to AVX2: torch already computes with ATen {measured.aten}, "
            f"oneDNN {measured.onednn} (an operation ran before pin_cpu_arithmetic()). Call it before the first "
            f"tensor operation of the process, or start the process with: export {exports}")
    return measured


@contextmanager
def fixed_threads(threads: int = 1) -> Iterator[None]:
    """Run the block with ``threads`` intra-op threads, then restore the process's count.
    PyTorch's CPU kernels split their work by the number of threads, and a reduction split
    another way rounds another way: what a result depends on (a frozen trunk's features, a
    training) is computed on a fixed count, so that it does not depend on the process."""
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}.")
    before = torch.get_num_threads()
    if before != threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)
