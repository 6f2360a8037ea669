"""``python -m benchmarks.tools.steady_state``: the paper step's last epoch beside the loader
alone and the step alone, the bound it names, the fp16 scaler's skipped steps, its file."""

import json

import pytest
import torch

from benchmarks.tools import steady_state
from benchmarks.tools.steady_state import bound, format_report, make_folder, measure, read_report


def test_the_bound_is_the_slower_of_loader_and_step():
    assert bound(loader_ips=300.0, step_ips=450.0) == "loader-bound"
    assert bound(loader_ips=900.0, step_ips=450.0) == "step-bound"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """fp32 and fp16 on a generated folder of 2 classes x 4 training images (ResNet-18 at 32 px)."""
    root = make_folder(tmp_path_factory.mktemp("steady") / "data", classes=2, per_class=4, image_size=32)
    torch.set_num_threads(1)
    return root, [measure(root, device=torch.device("cpu"), amp=amp, classes=2, per_class=4, epochs=2, workers=0,
                          batch=3, image_size=32, backbone="resnet18", rounds=1) for amp in ("fp32", "fp16")]


def test_it_trains_every_image_of_the_folder_for_each_epoch_and_reports_the_last(tiny):
    root, (fp32, fp16) = tiny
    files = [p for p in root.rglob("*.jpg")]
    assert len(files) == 2 * (4 + 2)  # 4 training and 2 test images per class
    for r in (fp32, fp16):
        assert r["train_images"] == 8 and r["epochs"] == 2 and len(r["epoch_images_per_second"]) == 2
        assert r["pipeline_images_per_second"] == pytest.approx(8 / r["epoch_seconds"])
        assert r["pipeline_images_per_second"] == r["epoch_images_per_second"][-1]
        assert r["bound"] == bound(r["loader_images_per_second"], r["step_images_per_second"])
        slower = min(r["loader_images_per_second"], r["step_images_per_second"])
        assert r["overlap"] == pytest.approx(r["pipeline_images_per_second"] / slower)
        assert r["gpu_busy"] is None and 0 < r["step_share"] <= 1  # no nvidia-smi on the CPU
    assert fp32["skipped_steps"] == [0, 0]
    # fp16: a GradScaler from 2**16; 3 steps per epoch (8 images, batch 3), each skipped or taken
    assert len(fp16["skipped_steps"]) == 2 and all(0 <= n <= 3 for n in fp16["skipped_steps"])


def test_the_report_and_the_file_gpu_hours_reads(tiny, tmp_path):
    _, results = tiny
    text = format_report(results)
    rows = [line for line in text.splitlines() if line.startswith(("| fp32 |", "| fp16 |"))]
    assert len(rows) == 2 and rows[0].split(" | ")[2] == "8"
    assert rows[1].rstrip(" |").endswith(", ".join(map(str, results[1]["skipped_steps"])))
    path = tmp_path / "steady.json"
    path.write_text(json.dumps(results), encoding="utf-8")
    assert [r["amp"] for r in read_report(path)] == ["fp32", "fp16"]
    bad = dict(results[0], pipeline_images_per_second=float("nan"))
    path.write_text(json.dumps([bad]), encoding="utf-8")
    with pytest.raises(ValueError, match="pipeline_images_per_second"):
        read_report(path)
    path.write_text(json.dumps([{"kind": "speed"}]), encoding="utf-8")
    with pytest.raises(ValueError, match="not a steady-state file"):
        read_report(path)


def test_the_folder_draws_a_few_classes_and_copies_them_to_the_rest(tmp_path):
    from benchmarks.datasets.folders import load_caltech256

    root = make_folder(tmp_path / "data", classes=6, per_class=2, image_size=32, distinct=4)
    train, test = load_caltech256(root, image_size=32, train_per_class=2)
    assert (len(train), len(test), sorted(set(train.targets))) == (12, 12, list(range(6)))
    categories = next(root.rglob("256_ObjectCategories"))
    for copy, drawn in (("005.shape-005", "001.shape-001"), ("006.shape-006", "002.shape-002")):
        assert [f.read_bytes() for f in sorted((categories / copy).iterdir())] == [
            f.read_bytes() for f in sorted((categories / drawn).iterdir())]
    assert make_folder(root, classes=50, per_class=9, image_size=32) == root  # a folder with images is kept
    assert len(list(categories.iterdir())) == 6


def test_one_epoch_is_refused(tmp_path, capsys):
    with pytest.raises(ValueError, match="at least 2"):
        measure(tmp_path, device=torch.device("cpu"), epochs=1)
    with pytest.raises(SystemExit):
        steady_state.main(["--root", str(tmp_path), "--device", "cpu", "--epochs", "1"])
    assert "--epochs must be at least 2" in capsys.readouterr().err
