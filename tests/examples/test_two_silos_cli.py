"""``python -m examples.two_silos_cli`` as a user runs it: the composition the two silos'
command-line processes produce equals the one trained in memory (``TMCStrategy`` on the same
factories, seeds and settings), and the accuracy it prints is that composition's."""

import re

import pytest
import torch

from avalanche_tmc import TangentModel, TMCStrategy, composed_delta, load_component, train_parallel
from avalanche_tmc.factories import digits, digits_cnn
from tests.helpers import examples_digits_accuracy, run_example


@pytest.mark.integration
def test_the_two_silo_composition_equals_the_one_trained_in_memory(tmp_path):
    out = run_example("-m", "examples.two_silos_cli", "--workdir", str(tmp_path))
    printed = re.search(r"two silos composed: experiences \[0, 1, 2, 3, 4\] accuracy ([0-9.]+) on (\d+) test", out)
    assert printed, out
    assert "experience 4 forgotten: composition of experiences [0, 1, 2, 3], total weight 4" in out
    # the same computation in memory: the command line's defaults (lr 1e-2, batch 32, beta 25)
    # and the example's --epochs 2; experience e seeded with 0 + e
    here = TMCStrategy(model=TangentModel(digits_cnn()), lr=1e-2, train_mb_size=32, train_epochs=2, evaluator=None)
    train_parallel(here, digits().train_stream, seed=0)
    for name, ids in (("composed", range(5)), ("rest", range(4))):
        delta = composed_delta(load_component(str(tmp_path / f"{name}.safetensors")))
        for parameter, value in delta.items():  # weighting "mean": the average of the components
            expected = sum(here.components[e][parameter] for e in ids) / len(ids)
            assert torch.allclose(value, expected, rtol=1e-4, atol=1e-6), (name, parameter)
    accuracy, samples = examples_digits_accuracy(composed_delta(load_component(str(tmp_path / "composed.safetensors"))))
    assert float(printed[1]) == pytest.approx(accuracy, abs=1e-4) and int(printed[2]) == samples
    assert accuracy > 0.15  # 10 classes in 5 class-incremental experiences: above chance (0.1)
