"""``benchmarks.tools.library_speed`` (issue 60): the library on the images, the library on a
frozen trunk's features and the runner, trained on one small folder; the tool's table has
the three, the features' size estimated before equals the size made, and the three reach
the same final accuracy (they compute the same training)."""

import pytest

from benchmarks.datasets.synthetic import make_image_folder
from benchmarks.tools import library_speed


@pytest.mark.integration
def test_the_three_paths_train_the_same_and_are_timed(tmp_path, capsys):
    folder = make_image_folder(tmp_path / "shapes", "folder", classes=4, per_class=8, min_size=32, max_size=40)
    save = tmp_path / "table.md"
    assert library_speed.main(["--data-root", str(folder), "--tasks", "2", "--image-size", "32", "--epochs", "2",
                               "--save", str(save)]) == 0
    table = save.read_text(encoding="utf-8")
    rows = {line.split(" | ")[0][2:]: line.strip("| ").split(" | ") for line in table.splitlines()
            if line.startswith("| library") or line.startswith("| runner")}
    assert set(rows) == {"library, no cache", "library, cached", "runner"}
    assert len({cells[-1] for cells in rows.values()}) == 1, rows  # one final accuracy for the three
    assert rows["runner"][-2] == "1.00"
    sizes = table.split("(feature_bytes): ")[1]
    estimated = int(sizes.split(" bytes;")[0].replace(",", ""))
    made = int(sizes.split("the features made: ")[1].split(" bytes")[0].replace(",", ""))
    assert estimated == made > 0
