"""A device this machine lacks is refused at once, in one sentence (avalanche_tmc.training.devices)."""

import pytest
import torch

from avalanche_tmc import TangentModel, TMCStrategy, TMEStrategy
from avalanche_tmc.training.devices import check_device, device_problem
from tests.helpers import NUM_CLASSES, TinyResNet

NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")


def test_the_cpu_is_always_there_and_a_bad_name_is_named():
    assert device_problem("cpu") is None and device_problem(torch.device("cpu")) is None
    assert "is not a torch device" in device_problem("gpu0")
    with pytest.raises(ValueError, match="not a torch device"):
        check_device("cuda:x")


@NO_CUDA
def test_cuda_without_a_gpu_is_refused_with_what_to_do():
    problem = device_problem("cuda")
    assert problem.startswith("no cuda device on this machine") and problem.endswith("use cpu.")
    if torch.version.cuda is None:  # the CPU build this project installs
        assert "is a CPU build: install a CUDA build of torch, see docs/install.md" in problem
    assert device_problem("cuda:1").startswith("no cuda device")


@NO_CUDA
@pytest.mark.parametrize("strategy", [TMCStrategy, TMEStrategy])
def test_a_strategy_refuses_an_unavailable_device_when_it_is_built(strategy):
    """Not ~20 frames deep inside Avalanche at the first training step."""
    with pytest.raises(ValueError, match="device cuda: no cuda device on this machine"):
        strategy(model=TangentModel(TinyResNet(num_classes=NUM_CLASSES)), device="cuda")
