"""The one CPU arithmetic (issue 58): every row computed with AVX2 on every x86-64 machine.

The fingerprint test is the one another machine can fail: the committed hashes of the main
job's SGD arithmetic (docs/results/machines/sgd-fingerprint.json, made on the CPU it names)
must come out of whatever machine runs the suite, bit for bit. On an AVX-512 machine it tests
the pin across instruction sets (with ``AVALANCHE_TMC_ARITHMETIC=native`` it fails there); on
an AVX2 one it is a same-machine check.
"""

import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from avalanche_tmc.arithmetic import PIN_VARIABLES, cpu_arithmetic
from benchmarks.networks.arithmetic import NATIVE_VARIABLE
from benchmarks.runner.forked_jobs import run_tasks
from benchmarks.tools import arithmetic_check

ROOT = Path(__file__).resolve().parents[2]
HAS_AVX2 = "AVX2" in cpu_arithmetic().cpu or "AVX-512" in cpu_arithmetic().cpu
needs_avx2 = pytest.mark.skipif(not HAS_AVX2, reason="this CPU has no AVX2: nothing to pin it to")


def _environment(**changes):
    env = {k: v for k, v in os.environ.items() if k not in PIN_VARIABLES and k != NATIVE_VARIABLE}
    env.update(PYTHONPATH=str(ROOT), **changes)
    return env


def _python(code: str, **env) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_environment(**env),
                          cwd=ROOT, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@needs_avx2
def test_the_suite_computes_with_the_pinned_arithmetic():
    arithmetic = cpu_arithmetic()
    assert arithmetic.pinned and arithmetic.label == "avx2", arithmetic.describe()
    assert torch.backends.cpu.get_cpu_capability() == "AVX2"


@needs_avx2
def test_the_main_jobs_sgd_arithmetic_is_the_committed_one_bit_for_bit():
    expected = arithmetic_check.reference()
    if expected["torch"] != torch.__version__:
        pytest.skip(f"the committed fingerprint is of torch {expected['torch']} (constraints.txt), this is "
                    f"{torch.__version__}")
    differ = arithmetic_check.differences(arithmetic_check.sgd_fingerprint(), expected)
    assert not differ, (f"{', '.join(differ)} of the main job's SGD steps differ from those committed from "
                        f"{expected['cpu']} ({expected['arithmetic']}); this machine: {cpu_arithmetic().describe()}")


def _arithmetic_in_job(_: int):
    """The job's pid, the label it records, ATen's own capability and the variable it sees."""
    return os.getpid(), cpu_arithmetic().label, torch.backends.cpu.get_cpu_capability(), \
        os.environ.get("ATEN_CPU_CAPABILITY")


@needs_avx2
def test_forked_jobs_and_spawned_processes_compute_with_the_pinned_arithmetic():
    jobs = run_tasks(_arithmetic_in_job, [0, 1, 2, 3], jobs=2)
    assert {job[0] for job in jobs} - {os.getpid()}, "the tasks ran in forked processes"
    assert all(job[1:] == ("avx2", "AVX2", "avx2") for job in jobs), jobs
    with multiprocessing.get_context("spawn").Pool(1) as pool:  # what gloo training starts with threads > 1
        spawned = pool.apply(_arithmetic_in_job, (0,))
    assert spawned[0] != os.getpid() and spawned[1:] == ("avx2", "AVX2", "avx2")


def test_another_arithmetic_gets_its_own_progress_key_and_cached_tensors(monkeypatch, tmp_path):
    from benchmarks.datasets import cache
    from benchmarks.runner import config
    from benchmarks.runner.presets import PRESETS

    monkeypatch.setenv("AVALANCHE_TMC_CACHE", str(tmp_path))
    run, options = config.RunConfig.from_dict(PRESETS["tiny"][0]), config.Options()
    pinned_key = config.progress_key(run, options, 0)
    assert "arithmetic" not in pinned_key  # the key every committed row was made under
    cache.cached_tensors("probe", lambda: {"x": torch.zeros(1)})
    monkeypatch.setattr(config, "arithmetic_key", lambda: "native:avx512/intel-avx-512")
    monkeypatch.setattr(cache, "arithmetic_key", lambda: "native:avx512/intel-avx-512")
    assert config.progress_key(run, options, 0) == dict(pinned_key, arithmetic="native:avx512/intel-avx-512")
    cache.cached_tensors("probe", lambda: {"x": torch.ones(1)})
    files = sorted(p.name for p in (tmp_path / "tensors").iterdir())
    assert len(files) == 2 and "probe.pt" in files  # the pinned file kept, the other arithmetic's beside it


@needs_avx2
def test_pinning_after_import_works_and_after_an_operation_is_refused():
    code = ("import torch, avalanche_tmc, benchmarks.run\n"
            "from avalanche_tmc import pin_cpu_arithmetic\n"
            "print(pin_cpu_arithmetic().label)\n")
    assert _python(code).split()[-1] == "avx2"
    late = ("import torch\n(torch.ones(2) + 1).sum()\n"
            "from avalanche_tmc import ArithmeticNotPinnedError, pin_cpu_arithmetic\n"
            "try:\n    pin_cpu_arithmetic()\nexcept ArithmeticNotPinnedError as e:\n    print('refused:', e)\n"
            "print(pin_cpu_arithmetic(strict=False).describe())\n")
    out = _python(late)
    assert "refused: The CPU arithmetic could not be pinned" in out and "export ATEN_CPU_CAPABILITY=avx2" in out
    if "AVX-512" in cpu_arithmetic().cpu:  # an AVX2 CPU computes AVX2 whatever ran first
        assert "NOT pinned" in out


@needs_avx2
def test_the_runner_says_its_arithmetic_in_its_header_and_native_opts_out():
    command = [sys.executable, "-m", "benchmarks.run", "--preset", "tiny", "--jobs", "64", "--threads", "64"]
    pinned = subprocess.run(command, capture_output=True, text=True, env=_environment(), cwd=ROOT, timeout=240)
    native = subprocess.run(command + ["--native-arithmetic"], capture_output=True, text=True,
                            env=_environment(), cwd=ROOT, timeout=240)
    assert pinned.returncode == native.returncode == 2  # refused by the preflight, after the header
    assert "arithmetic: AVX2, pinned (ATen AVX2, oneDNN Intel AVX2" in pinned.stdout
    assert "arithmetic: native, not pinned" in native.stdout


def test_a_native_run_records_one_arithmetic_in_its_parent_and_its_forked_jobs():
    """The progress key is made in the parent (to find what an earlier run kept) and in each
    job (to save what it trains): both must name the same arithmetic, or a native run could
    never resume. oneDNN names its ISA once a process, so the jobs inherit the parent's record."""
    code = ("from benchmarks.networks.arithmetic import runner_arithmetic, arithmetic_key\n"
            "from benchmarks.runner.forked_jobs import run_tasks\n"
            "runner_arithmetic(native=True)\n"
            "def key(_):\n    return arithmetic_key()\n"
            "print(arithmetic_key(), sorted(set(run_tasks(key, [0, 1, 2], jobs=2))))\n")
    parent, jobs = _python(code).strip().splitlines()[-1].split(" ", 1)
    assert jobs == repr([parent]) and (parent.startswith("native:") or parent == "None"), (parent, jobs)
