"""``python -m benchmarks.tools.gpu_check``: its plan, the numbers it reads from the steps' output,
its report, and (second tier) the whole dry run on the CPU."""

import re
import sys
from pathlib import Path

import pytest

from benchmarks.tools import gpu_check
from benchmarks.tools.gpu_check import Step, StepResult, images_per_second, plan, report, speed_rows


def test_images_per_second_is_the_median_of_the_progress_lines():
    output = "\n".join([
        "  tmc seed 0 exp 0 epoch 1/1: 120 img/s, epoch 2s, ETA 8s",
        "some other line: 999 img/s without an epoch",
        "  tmc seed 0 exp 1 epoch 1/1: 80 img/s, epoch 3s, ETA 6s",
        "  tmc seed 0 exp 2 epoch 1/1: 100 img/s, epoch 2s, ETA 4s",
    ])
    assert images_per_second(output) == 100
    assert images_per_second("no progress here") is None


def test_speed_rows_read_the_table_speed_writes():
    from benchmarks.tools.speed import format_training_table
    from benchmarks.tools.speed_timing import NETWORKS

    mb = 2**20
    results = [{"spec": NETWORKS["resnet50@224"], "train": {"plain": 0.200, "generic": 0.400, "fast": 0.250},
                "memory": {"plain": {"params": 100 * mb, "activations": 50 * mb},
                           "tangent": {"params": 150 * mb, "activations": 40 * mb}}}]
    rows = speed_rows(format_training_table(results))
    assert set(rows) == {"resnet50@224"}
    # batch 32: 32 / 0.200 s and 32 / 0.250 s; the ratio printed with two decimals
    assert rows["resnet50@224"]["plain_img_s"] == pytest.approx(160.0)
    assert rows["resnet50@224"]["tangent_img_s"] == pytest.approx(128.0)
    assert rows["resnet50@224"]["ratio"] == pytest.approx(1.25)


def test_plan_on_a_gpu_and_in_a_dry_run(tmp_path):
    on_gpu = {s.name: s for s in plan("cuda", tmp_path, dry_run=False, gpus=1)}
    assert set(on_gpu) == {"device-tests", "speed", "steady-fp32", "steady-bf16", "steady-fp16", "paper-epoch-fp16",
                           "fast-options", "fast-options-compile", "authors-speed", "nccl"}
    # torch.compile in its own step (a slow compile cannot cost the other options' numbers)
    compiled = on_gpu["fast-options-compile"].argv
    assert compiled[compiled.index("--configs") + 1] == "baseline,compile"
    assert "compile" not in on_gpu["fast-options"].argv[on_gpu["fast-options"].argv.index("--configs") + 1]
    assert on_gpu["nccl"].skipped and "NCCL needs two" in on_gpu["nccl"].skipped
    # the steady state: the real experience size (the tool's defaults, 51 x 60), 8 workers, 2 epochs
    steady = on_gpu["steady-fp16"].argv
    assert steady[steady.index("--amp") + 1] == "fp16" and "--classes" not in steady and "--epochs" not in steady
    assert steady[steady.index("--workers") + 1] == "8"
    from benchmarks.tools.steady_state import PAPER_CLASSES, PAPER_PER_CLASS

    assert PAPER_CLASSES * PAPER_PER_CLASS >= 3000
    # without the authors' code their step is skipped with a note naming the flag; with it, it runs
    assert "--authors-code" in on_gpu["authors-speed"].skipped
    with_code = {s.name: s for s in plan("cuda", tmp_path, dry_run=False, gpus=1, authors_code="/x/tmc")}
    assert not with_code["authors-speed"].skipped and "/x/tmc" in with_code["authors-speed"].argv
    # every step has a planned time, and the plan fits the 15 minutes with start-up and inputs
    assert set(on_gpu) <= set(gpu_check.PLANNED)
    assert sum(gpu_check.PLANNED[n] for n, s in on_gpu.items() if not s.skipped) + 180 + 60 <= 15 * 60
    assert "--device" in on_gpu["device-tests"].argv and "cuda" in on_gpu["device-tests"].argv
    epoch = on_gpu["paper-epoch-fp16"].argv
    assert epoch[epoch.index("--amp") + 1] == "fp16" and epoch[epoch.index("--workers") + 1] == "8"
    assert "--backbone" not in epoch  # the preset's ResNet-50 at 224 px
    assert "resnet50@224" in on_gpu["speed"].argv[on_gpu["speed"].argv.index("--networks") + 1]
    assert not plan("cuda", tmp_path, dry_run=False, gpus=2)[-1].skipped
    dry = {s.name: s for s in plan("cpu", tmp_path, dry_run=True, gpus=0)}
    assert "paper-epoch-fp16" not in dry  # the runner's fp16 autocast is for CUDA
    assert {"steady-fp32", "steady-bf16", "steady-fp16", "fast-options", "fast-options-compile",
            "authors-speed"} <= set(dry)
    assert not dry["authors-speed"].skipped and "--stand-in" in dry["authors-speed"].argv
    assert all("cuda" not in s.argv for s in dry.values())
    # the device-sensitive tests named on the GPU exist
    root = Path(gpu_check.__file__).resolve().parents[2]
    assert all((root / t).exists() for t in gpu_check.DEVICE_TESTS)


def test_report_shows_each_step_s_status_and_the_output_of_failures():
    ok = StepResult(Step("paper-epoch-bf16", [sys.executable], 10), 0, 12.3,
                    "x epoch 1/1: 300 img/s, epoch 1s", utilisation=[50.0, 90.0], memory_mib=[1000.0, 4000.0])
    failed = StepResult(Step("speed", [sys.executable], 10), 3, 1.0, "line\nTraceback: boom")
    hung = StepResult(Step("device-tests", [sys.executable], 10), None, 10.0, "")
    skipped = StepResult(Step("nccl", [sys.executable], 10, skipped="1 GPU(s): NCCL needs two"), None, 0.0, "")
    text = report([ok, failed, hung, skipped], device_name="NVIDIA H100",
                  command="python -m benchmarks.tools.gpu_check",
                  dry_run=False, sections={"The paper step in steady state": "| a steady table |", "Empty": " "})
    assert "| paper-epoch-bf16 | passed | 12 | 300 | 70% / 90% | 4,000 MiB | – |" in text
    assert "| speed | failed (exit 3) | 1 | – | – | – | 50 |" in text  # planned seconds beside the measured
    assert "## The paper step in steady state\n\n| a steady table |" in text and "## Empty" not in text
    assert "| speed | failed (exit 3) |" in text and "Traceback: boom" in text
    assert "| device-tests | timed out after 10 s |" in text
    assert "| nccl | skipped: 1 GPU(s): NCCL needs two |" in text
    assert "Dry run" not in text
    assert "Dry run on the CPU" in report([ok], device_name="cpu", command="c", dry_run=True)


def test_without_cuda_it_refuses_and_points_to_the_dry_run(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    with pytest.raises(SystemExit):
        gpu_check.main([])
    assert "--dry-run" in capsys.readouterr().err


@pytest.mark.integration
def test_the_dry_run_runs_every_step_and_writes_the_report(tmp_path):
    path = gpu_check.main(["--dry-run", "--out", str(tmp_path / "out"), "--workdir", str(tmp_path / "work")])
    text = path.read_text()
    assert path.name == "cpu-dry-run.md" and "Dry run on the CPU" in text
    for name in ("device-tests", "speed", "steady-fp32", "steady-bf16", "steady-fp16", "paper-epoch-fp32",
                 "fast-options", "fast-options-compile", "authors-speed"):
        assert f"| {name} | passed |" in text
    rates = [line.split(" | ")[3] for line in text.splitlines() if line.startswith("| paper-epoch")]
    assert rates and all(float(r) > 0 for r in rates)
    assert "## Speed" in text and "## GPU-hours from the measured throughput" in text
    assert "## The paper step in steady state" in text and "## Fast-path options" in text
    assert "A stand-in hand-linearized network (not the authors' code)" in text
    steady_rows = [line for line in text.splitlines() if re.search(r"\| (step|loader)-bound \(", line)]
    assert [r.split(" | ")[0] for r in steady_rows] == ["| fp32", "| bf16", "| fp16"]
    assert "--steady-state" in text and "Throughput measured in steady state" in text
