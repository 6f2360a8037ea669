"""benchmarks.speed runs end to end on a tiny network (plumbing only: no timed assertions)."""

import torch
from torch import nn

from benchmarks.speed import (
    NetworkSpec,
    format_inference_table,
    format_training_table,
    time_network,
    training_memory,
)
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

    import benchmarks.speed as speed

    real = speed.TangentModel

    def generic_fails(*args, **kwargs):
        tm = real(*args, **kwargs)
        if kwargs.get("implementation") == "generic":
            def broken(x, delta):
                raise RuntimeError("no jvp here")
            tm.forward_with = broken
        return tm

    monkeypatch.setattr(speed, "TangentModel", generic_fails)
    result = time_network(spec, device=torch.device("cpu"), rounds=1, ensemble_rounds=0, channels_last=False,
                          task_counts=(1,), num_classes=5)
    assert result["failed"] == {"generic": "RuntimeError: no jvp here"}
    table = format_training_table([result])
    assert "RuntimeError: no jvp here" in table and "tmc-generic T=1" not in result["inference"]
    assert "| TMC, generic path | – |" in format_inference_table([result], task_counts=(1,))


def test_network_presets_expand_and_unknown_names_are_refused(capsys):
    import pytest

    from benchmarks.speed import NETWORKS, PRESETS, _network_names, main

    assert _network_names("small,vit_small@224") == list(PRESETS["small"]) + ["vit_small@224"]
    assert _network_names("all") == list(NETWORKS)
    assert all(n in NETWORKS for preset in PRESETS.values() for n in preset)
    with pytest.raises(SystemExit):
        main(["--networks", "resnet19"])
    assert "unknown network(s) ['resnet19']" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--amp", "fp16"])
    assert "--amp fp16 is for CUDA" in capsys.readouterr().err


def test_save_writes_the_tables_headed_by_the_command(tmp_path, monkeypatch):
    import benchmarks.speed as speed

    monkeypatch.setitem(speed.NETWORKS, "tiny", NetworkSpec("tiny", 8, 4, lambda: TinyResNet(in_channels=3,
                                                                                               num_classes=5)))
    out = tmp_path / "speed.md"
    speed.main(["--networks", "tiny", "--rounds", "1", "--ensemble-rounds", "0", "--task-counts", "1",
                "--no-pin-allocator", "--save", str(out)])
    text = out.read_text()
    assert text.startswith("<!-- written by: python -m benchmarks.speed --networks tiny --rounds 1")
    assert "| tiny (8px, 4) |" in text and "Inference per batch" in text and "at commit " in text


def test_allocator_pinning_takes_effect_on_glibc():
    """In a process of its own (it changes the allocator of the process that calls it)."""
    import platform
    import subprocess
    import sys

    import pytest

    if platform.system() != "Linux" or not platform.libc_ver()[0] == "glibc":
        pytest.skip("glibc only")
    done = subprocess.run([sys.executable, "-c", "from benchmarks.speed import pin_allocator; print(pin_allocator())"],
                          capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "True"
