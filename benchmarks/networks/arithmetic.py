"""The runner's one CPU arithmetic: every row computed with AVX2, on every x86-64 machine.

PyTorch chooses its CPU kernels by instruction set, and an SGD row trained with AVX-512
kernels differs from the same row trained with AVX2 ones (by up to 12 points on one seed;
docs/results.md, "One arithmetic"). The runner therefore pins the instruction set
(:func:`avalanche_tmc.arithmetic.pin_cpu_arithmetic`) before anything computes, in every
entry that makes numbers: ``python -m benchmarks.run`` (and so the tuning, forked jobs,
which inherit the process's kernels, and the frozen trunk's features), the tools and
experiments that train, and the test suite. ``--native-arithmetic`` (or
``AVALANCHE_TMC_ARITHMETIC=native``) opts out, for speed: the measured arithmetic then
enters the progress key, ``settings.json`` and the decoded-image cache's key
(:func:`arithmetic_key`), so such rows are never mixed with pinned ones.
"""

import os
from typing import Optional

from avalanche_tmc.arithmetic import PIN_VARIABLES, PINNED_ISA, CpuArithmetic, cpu_arithmetic, pin_cpu_arithmetic

__all__ = ["NATIVE_VARIABLE", "runner_arithmetic", "arithmetic_key"]

NATIVE_VARIABLE = "AVALANCHE_TMC_ARITHMETIC"
"""Set to ``native`` to compute with the CPU's own instruction set (the runner's
``--native-arithmetic``), for the entries that have no flag of their own."""


def runner_arithmetic(native: bool = False) -> CpuArithmetic:
    """Pin the arithmetic (or, ``native`` or ``$AVALANCHE_TMC_ARITHMETIC=native``, leave the
    CPU's own, dropping the pin's variables from the environment so that no process started
    later takes them) and return what this process computes with. Call it before the first
    tensor operation; called later, the result says it is not pinned (never raises)."""
    native = native or os.environ.get(NATIVE_VARIABLE, "").strip().lower() == "native"
    if native:
        for name, value in PIN_VARIABLES.items():
            if os.environ.get(name) == value:
                del os.environ[name]
        os.environ[NATIVE_VARIABLE] = "native"  # the entries a forked or spawned job runs take it too
        return cpu_arithmetic()
    return pin_cpu_arithmetic(strict=False)


def arithmetic_key() -> Optional[str]:
    """What a key of results or cached tensors records of the arithmetic: ``None`` for the
    pinned one (the key every earlier row was made under: an AVX2 CPU's), else its label
    (:attr:`~avalanche_tmc.arithmetic.CpuArithmetic.label`)."""
    label = cpu_arithmetic().label
    return None if label == PINNED_ISA else label
