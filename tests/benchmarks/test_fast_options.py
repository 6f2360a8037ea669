"""The opt-in fast-path settings of the GPU tools (``benchmarks.tools.fast_options``): each leaves
the results unchanged beyond float rounding where it applies on the CPU, the CUDA-only ones are
no-ops here and say so, and none changes the library's defaults."""

import pytest
import torch
from torch import nn

from avalanche_tmc import TangentModel
from benchmarks.tools.fast_options import CONFIGS, Options, apply_backend_options, backend, format_options


def _net() -> nn.Module:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 5))
    with torch.no_grad():
        net[1].running_mean.normal_(0, 0.1)
        net[1].running_var.uniform_(0.5, 1.5)
    return net


def _output_and_grads(tm: TangentModel, forward=None):
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in tm.delta_parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 1e-2)
    x = torch.randn(4, 3, 8, 8, generator=gen)
    out = (tm if forward is None else forward)(x)
    out.square().sum().backward()
    return out.detach(), [p.grad.clone() for p in tm.delta_parameters()]


def test_channels_last_leaves_outputs_and_delta_gradients_unchanged():
    ref_out, ref_grads = _output_and_grads(TangentModel(_net()))
    out, grads = _output_and_grads(TangentModel(_net(), channels_last=True))
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-6)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_compile_leaves_outputs_and_delta_gradients_unchanged():
    """torch.compile of the tangent model (about 30 s of compiling on one CPU core)."""
    ref_out, ref_grads = _output_and_grads(TangentModel(_net()))
    tm = TangentModel(_net())
    out, grads = _output_and_grads(tm, torch.compile(tm))
    torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-6)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-6)


def test_the_cuda_settings_are_no_ops_on_the_cpu_and_say_so():
    flags = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark)
    notes = apply_backend_options(Options(tf32=True, cudnn_benchmark=True), torch.device("cpu"))
    assert notes == ["tf32: no-op on cpu (a CUDA setting)", "cudnn-benchmark: no-op on cpu (a CUDA setting)"]
    with backend(Options.named("all"), torch.device("cpu")):
        pass
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
            torch.backends.cudnn.benchmark) == flags
    assert apply_backend_options(Options(), torch.device("cpu")) == []


def test_configurations_name_their_options_and_all_are_off_by_default():
    assert Options().names() == []
    assert Options.named("channels-last").names() == ["channels-last"]
    assert Options.named("bf16").names() == []  # a precision, not an option
    assert Options.named("all").names() == ["tf32", "cudnn-benchmark", "channels-last"]  # compile apart
    assert Options.named("compile").names() == ["compile"]


def test_the_table_gives_ratios_to_plain_and_to_the_baseline():
    from benchmarks.tools.speed_timing import NETWORKS

    seconds = {"baseline": {"plain step": 0.020, "tangent step": 0.050, "plain forward": 0.005,
                            "composed forward": 0.020},
               "channels-last": {"plain step": 0.016, "tangent step": 0.030, "plain forward": 0.004,
                                 "composed forward": 0.012},
               "compile": {"error": "RuntimeError: no compiler"}}
    text = format_options({"spec": NETWORKS["resnet50@224"], "device": "cuda", "rounds": 5, "configs": seconds})
    assert "| baseline | 20.0 ms | 50.0 ms (2.50x) | 1.00 | 5.0 ms | 20.0 ms (4.00x) | 1.00 |" in text
    # 30 / 16 = 1.88 plain steps; 30 / 50 = 0.60 of the baseline; 12 / 4 = 3.00; 12 / 20 = 0.60
    assert "| channels-last | 16.0 ms | 30.0 ms (1.88x) | 0.60 | 4.0 ms | 12.0 ms (3.00x) | 0.60 |" in text
    assert "| compile | failed: RuntimeError: no compiler |" in text
    assert set(CONFIGS) >= set(seconds)
