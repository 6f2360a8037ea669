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
