"""What avalanche_tmc.arithmetic says of a process's CPU arithmetic, case by case (the pin
itself, across processes and machines: tests/benchmarks/test_arithmetic.py)."""

import os

import pytest
import torch

from avalanche_tmc import arithmetic
from avalanche_tmc.arithmetic import PIN_VARIABLES, CpuArithmetic


def _measured(aten="AVX2", onednn="Intel AVX2", requested="avx2"):
    return CpuArithmetic(aten=aten, onednn=onednn, mkl="Intel(R) Architecture processors, CNR AUTO",
                         cpu="AMD EPYC (AVX-512)", machine="x86_64", requested=requested)


def test_pinned_only_when_both_measured_libraries_compute_with_avx2():
    assert _measured().pinned and _measured().label == "avx2"
    assert _measured(onednn="avx2 (from a convolution)").pinned  # a process whose oneDNN header was printed before
    assert _measured(onednn="none").pinned  # a build without oneDNN
    for aten, onednn in (("AVX512", "Intel AVX2"), ("AVX2", "Intel AVX-512 with Intel DL Boost"), ("DEFAULT", "none")):
        assert not _measured(aten, onednn).pinned
    label = _measured("AVX512", "Intel AVX-512 with Intel DL Boost").label
    assert label == "native:avx512/intel-avx-512-with-intel-dl-boost"


def test_each_case_is_said_in_one_line(monkeypatch):
    assert _measured().describe().startswith("arithmetic: AVX2, pinned (ATen AVX2, oneDNN Intel AVX2")
    assert "native, not pinned" in _measured("AVX512", "Intel AVX-512", requested=None).describe()
    monkeypatch.setattr(arithmetic, "_has_avx2", lambda: True)
    late = _measured("AVX512", "Intel AVX2").describe()
    assert "NOT pinned" in late and "torch computed before the variables were set" in late
    monkeypatch.setattr(arithmetic, "_has_avx2", lambda: False)
    other = CpuArithmetic("DEFAULT", "none", "none", "Neoverse-N1 (no AVX2)", "aarch64", requested="avx2")
    assert other.describe().startswith("arithmetic: DEFAULT, this CPU has no AVX2 (aarch64;")
    assert "\n" not in other.describe() and other.label == "native:default/none"


def test_the_measurement_reads_the_libraries_reports():
    measured = arithmetic.cpu_arithmetic()
    assert measured.aten == torch.backends.cpu.get_cpu_capability()
    assert measured is arithmetic.cpu_arithmetic()  # measured once a process
    if torch.backends.mkldnn.is_available():
        assert measured.onednn.startswith(("Intel", "avx", "sse")), measured.onednn
    assert measured.cpu


def test_the_pin_sets_every_variable_for_the_processes_started_later(monkeypatch):
    for name in PIN_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    measured = arithmetic.pin_cpu_arithmetic(strict=False)
    assert {name: os.environ[name] for name in PIN_VARIABLES} == PIN_VARIABLES
    assert measured.requested == "avx2"


def test_a_late_pin_is_refused_with_what_to_do(monkeypatch):
    monkeypatch.setattr(arithmetic, "cpu_arithmetic", lambda: _measured("AVX512", "Intel AVX2"))
    monkeypatch.setattr(arithmetic, "_has_avx2", lambda: True)
    with pytest.raises(arithmetic.ArithmeticNotPinnedError, match="before the first tensor operation"):
        arithmetic.pin_cpu_arithmetic()
    assert not arithmetic.pin_cpu_arithmetic(strict=False).pinned
