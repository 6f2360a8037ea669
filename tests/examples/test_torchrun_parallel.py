"""``examples.torchrun_parallel`` under torchrun (2 gloo processes on CPU) as a user runs it:
the experiences are shared between the ranks and the composition equals the one the same
script computes in one process, one experience after the other."""

import re

import pytest
import torch

from avalanche_tmc import composed_delta, load_component
from tests.helpers import examples_digits_accuracy, run_example

ACCURACY = re.compile(r"composition of experiences \[0, 1, 2, 3, 4\]: accuracy ([0-9.]+)")


@pytest.mark.integration
def test_two_torchrun_processes_compose_what_one_process_composes(tmp_path):
    parallel = run_example("-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m",
                           "examples.torchrun_parallel", "--out", str(tmp_path / "parallel.safetensors"))
    alone = run_example("-m", "examples.torchrun_parallel", "--out", str(tmp_path / "alone.safetensors"))
    assert "rank 0 trained experiences [0, 1]; rank 1 trained experiences [2, 3, 4]" in parallel
    assert "1 process(es): rank 0 trained experiences [0, 1, 2, 3, 4]" in alone
    assert parallel.count("composition of experiences") == 1  # rank 0 prints, rank 1 does not
    deltas = [composed_delta(load_component(str(tmp_path / f"{n}.safetensors"))) for n in ("parallel", "alone")]
    for name, value in deltas[1].items():  # same data and seeds; 1 thread per process vs several
        assert torch.allclose(deltas[0][name], value, rtol=1e-4, atol=1e-6), name
    accuracy, _ = examples_digits_accuracy(deltas[0])
    for out in (parallel, alone):
        assert float(ACCURACY.search(out)[1]) == pytest.approx(accuracy, abs=1e-4)
    assert accuracy > 0.15  # 10 classes in 5 class-incremental experiences: above chance (0.1)


@pytest.mark.integration
def test_the_torchrun_example_prints_no_warning(tmp_path):
    """Issue 42, B12: it passed evaluator=None, which printed Avalanche's "No loggers specified"; its evaluator now
    logs on rank 0 only (Avalanche's way), and nothing warns (warnings shown, as a user sees them)."""
    import os
    import subprocess
    import sys

    from tests.helpers import ROOT

    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m",
                           "examples.torchrun_parallel", "--epochs", "1"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=dict(env, OMP_WAIT_POLICY="PASSIVE", OMP_NUM_THREADS="1"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Warning" not in done.stderr and "No loggers specified" not in done.stdout + done.stderr, done.stderr
    assert "Top1_Acc_Epoch/train_phase/train_stream" in done.stdout  # rank 0's evaluator logs
