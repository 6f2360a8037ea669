"""``python -m benchmarks.tools.gpu_hours --steady-state FILE``: GPU-hours from a measured steady
state instead of the bound, saying which row it used and what limits it. The steady-state file
here is a test fixture, made up: no GPU measured it."""

import json

import pytest

from benchmarks.tools import gpu_hours

FIXTURE = [  # made-up numbers in the shape benchmarks.tools.steady_state --json writes
    {"kind": "steady-state", "device": "cuda", "amp": "fp32", "backbone": "resnet50", "image_size": 224, "batch": 32,
     "workers": 8, "train_images": 3060, "epochs": 2, "options": [], "option_notes": [],
     "pipeline_images_per_second": 400.0, "epoch_seconds": 7.65, "loader_images_per_second": 420.0,
     "step_images_per_second": 500.0, "step_share": 0.8, "gpu_busy": 0.78, "bound": "loader-bound",
     "overlap": 0.95, "skipped_steps": [0, 0], "epoch_images_per_second": [300.0, 400.0]},
]


def _fixture(tmp_path, rows=FIXTURE):
    path = tmp_path / "steady-fixture.json"
    path.write_text(json.dumps(rows), encoding="utf-8")
    return path


def test_the_steady_state_replaces_the_bound(tmp_path, capsys):
    path = _fixture(tmp_path)
    rate, text = gpu_hours.steady_throughput(path, "fp32", 2.5)
    assert rate == pytest.approx(400.0 * 2.5)  # tangent images/s x the tangent ratio = plain-step images/s
    assert "loader-bound" in text and "DataLoader" in text and "steady-fixture.json" in text
    measured = gpu_hours.main(["--steady-state", str(path), "--tangent-ratio", "2.5"])
    bound = gpu_hours.main(["--gpu-images-per-second", "1000", "--tangent-ratio", "2.5"])
    # the same work divided by the same 1000 plain-step images/s: the same hours
    assert measured == pytest.approx(bound, abs=1e-9)
    slower = gpu_hours.main(["--steady-state", str(_fixture(tmp_path, [dict(FIXTURE[0], **{
        "pipeline_images_per_second": 200.0, "bound": "step-bound"})])), "--tangent-ratio", "2.5"])
    assert all(slower[p] == pytest.approx(2 * bound[p]) for p in bound)  # half the rate, twice the hours
    out = capsys.readouterr().out
    assert "Throughput measured in steady state" in out and "the training step on the device" in out


def test_a_missing_row_or_a_wrong_file_is_refused(tmp_path, capsys):
    path = _fixture(tmp_path)
    with pytest.raises(SystemExit):
        gpu_hours.main(["--steady-state", str(path), "--precision", "bf16"])
    assert "no bf16 row" in capsys.readouterr().err
    path.write_text(json.dumps([{"kind": "gpu-hours"}]), encoding="utf-8")
    with pytest.raises(SystemExit):
        gpu_hours.main(["--steady-state", str(path)])
    assert "not a steady-state file" in capsys.readouterr().err
