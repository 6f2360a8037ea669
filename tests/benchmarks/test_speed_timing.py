"""benchmarks.tools.speed_timing on a tiny network (plumbing only: no timed assertions): a network's
numbers and their tables, the memory a training step counts, a failing path reported."""

import torch
from torch import nn

from benchmarks.tools.speed import format_inference_table, format_training_table
from benchmarks.tools.speed_timing import NetworkSpec, time_network, training_memory
from tests.helpers import TinyResNet


def test_time_network_and_tables_on_a_tiny_network():
    spec = NetworkSpec("tiny", 8, 4, lambda: nn.Sequential(nn.Conv2d(3, 1, 1), TinyResNet(num_classes=5)))
    result = time_network(spec, device=torch.device("cpu"), rounds=1, ensemble_rounds=1, channels_last=True,
                          task_counts=(1, 3), num_classes=5)
    assert set(result["train"]) == {"plain", "generic", "fast"}
    assert all(v > 0 for v in result["train"].values())
    assert {"plain", "tmc T=1", "tmc T=3", "tme T=3", "ens-sm T=3"} <= set(result["inference"])
    assert result["fallbacks"] == []
    training = format_training_table([result])
    inference = format_inference_table([result], task_counts=(1, 3))
    assert "tiny (8px, 4)" in training and "TME" in inference and inference.count("\n") == 5


def test_training_memory_counts_parameters_optimizer_state_and_saved_activations():
    layer = nn.Linear(100, 50)
    x = torch.randn(64, 100)

    def step():
        layer(torch.relu(x)).sum().backward()

    params = sum(p.numel() for p in layer.parameters()) * 4
    got = training_memory(step, list(layer.parameters()), [], 1, torch.device("cpu"))
    # parameters, gradients, momentum (3x) and the saved input of the linear layer
    assert got == 3 * params + x.numel() * 4

    conv = nn.Conv2d(3, 4, 3)
    image = torch.randn(2, 3, 8, 8)

    def conv_step():  # autograd saves the convolution's weight, which is the parameter itself
        conv(image).sum().backward()

    conv_params = sum(p.numel() for p in conv.parameters()) * 4
    got = training_memory(conv_step, list(conv.parameters()), [], 1, torch.device("cpu"))
    assert got == 3 * conv_params + image.numel() * 4  # the weight is not counted twice


def test_memory_parts_add_up_to_the_total():
    layer = nn.Linear(100, 50)
    x = torch.randn(64, 100)

    def step():
        layer(torch.relu(x)).sum().backward()

    total = training_memory(step, list(layer.parameters()), [], 2, torch.device("cpu"))
    parts = training_memory(step, list(layer.parameters()), [], 2, torch.device("cpu"), parts=True)
    params = sum(p.numel() for p in layer.parameters()) * 4
    assert parts == {"weights": params, "state": 3 * params, "activations": x.numel() * 4}
    assert sum(parts.values()) == total


def test_autocast_run_and_a_failing_path_is_reported_not_raised(monkeypatch):
    spec = NetworkSpec("tiny", 8, 4, lambda: TinyResNet(in_channels=3, num_classes=5))
    result = time_network(spec, device=torch.device("cpu"), rounds=1, ensemble_rounds=0, channels_last=False,
                          task_counts=(1,), num_classes=5, amp_dtype=torch.bfloat16, plain_optimizer="sgd")
    assert set(result["train"]) == {"plain", "generic", "fast"} and not result["failed"]
    assert "tme T=1" not in result["inference"]  # ensembles skipped with 0 rounds

    import benchmarks.tools.speed_timing as speed_timing

    real = speed_timing.TangentModel

    def generic_fails(*args, **kwargs):
        tm = real(*args, **kwargs)
        if kwargs.get("implementation") == "generic":
            def broken(x, delta):
                raise RuntimeError("no jvp here")
            tm.forward_with = broken
        return tm

    monkeypatch.setattr(speed_timing, "TangentModel", generic_fails)
    result = time_network(spec, device=torch.device("cpu"), rounds=1, ensemble_rounds=0, channels_last=False,
                          task_counts=(1,), num_classes=5)
    assert result["failed"] == {"generic": "RuntimeError: no jvp here"}
    table = format_training_table([result])
    assert "RuntimeError: no jvp here" in table and "tmc-generic T=1" not in result["inference"]
    assert "| TMC, generic path | – |" in format_inference_table([result], task_counts=(1,))
