"""A researcher's own image folder (issue 52, item 1): the listing and its seeded split
against counts made by hand from the files written, the folder's own train/test split, the
refusals, and the Avalanche benchmark built from it."""

from pathlib import Path

import pytest

from avalanche_tmc.factories import DatasetNotFoundError, image_folder, read_image_folder
from avalanche_tmc.factories.image_folder import TooFewImagesError
from benchmarks.datasets.synthetic import make_image_folder


@pytest.fixture(scope="module")
def own(tmp_path_factory) -> Path:
    """class00..class02 with 10, 7 and 5 small JPEGs."""
    return make_image_folder(tmp_path_factory.mktemp("birds"), "folder", classes=3, per_class=[10, 7, 5],
                             min_size=16, max_size=20)


def _files(root: Path, name: str):
    return sorted((root / name).glob("*.jpg"))


def test_each_class_is_split_by_the_fraction_and_the_seed(own):
    split = read_image_folder(own)
    assert split.classes == ["class00", "class01", "class02"] and not split.own_split
    per_class = {c: ([p for p, y in split.train if y == i], [p for p, y in split.test if y == i])
                 for i, c in enumerate(split.classes)}
    # 0.8 of each class trains: n - round(0.2 n) -> 8 of 10, 6 of 7, 4 of 5
    assert {c: (len(tr), len(te)) for c, (tr, te) in per_class.items()} == {
        "class00": (8, 2), "class01": (6, 1), "class02": (4, 1)}
    for c, (tr, te) in per_class.items():
        assert sorted(tr + te) == _files(own, c) and not set(tr) & set(te)
    assert read_image_folder(own).train == split.train  # the same seed, the same split
    assert read_image_folder(own, seed=1).train != split.train
    by_count = read_image_folder(own, train_per_class=4)
    assert [sum(1 for _, y in by_count.train if y == i) for i in range(3)] == [4, 4, 4]
    assert len(read_image_folder(own, train_fraction=0.5).test) == 5 + 4 + 2  # round(n / 2): 5, 3.5 -> 4, 2.5 -> 2


def test_nested_images_count_and_hidden_folders_do_not(tmp_path):
    make_image_folder(tmp_path, "folder", classes=2, per_class=4, min_size=16, max_size=20)
    nested = tmp_path / "class00" / "more"
    nested.mkdir()
    (tmp_path / "class00" / "img0000.jpg").rename(nested / "moved.JPG")
    (tmp_path / ".thumbnails").mkdir()
    (tmp_path / ".thumbnails" / "x.jpg").write_bytes(b"")
    (tmp_path / "class01" / "notes.txt").write_text("not an image")
    split = read_image_folder(tmp_path)
    assert split.classes == ["class00", "class01"]
    assert nested / "moved.JPG" in [p for p, _ in split.train + split.test]
    assert len(split.train + split.test) == 8


def test_a_folder_with_its_own_train_and_test_is_used_as_it_is(tmp_path):
    make_image_folder(tmp_path / "train", "folder", classes=2, per_class=3, min_size=16, max_size=20)
    make_image_folder(tmp_path / "test", "folder", classes=2, per_class=2, min_size=16, max_size=20, seed=1)
    split = read_image_folder(tmp_path)
    assert split.own_split and split.classes == ["class00", "class01"]
    assert sorted(p for p, _ in split.train) == sorted((tmp_path / "train").rglob("*.jpg"))
    assert sorted(p for p, _ in split.test) == sorted((tmp_path / "test").rglob("*.jpg"))
    with pytest.raises(ValueError, match="own train/ and test/"):
        read_image_folder(tmp_path, train_fraction=0.5)
    (tmp_path / "test" / "class09").mkdir()
    with pytest.raises(DatasetNotFoundError, match="'class09'"):
        read_image_folder(tmp_path)


@pytest.mark.parametrize("options, message", [
    (dict(train_fraction=0.0), "between 0 and 1"), (dict(train_fraction=1.5), "between 0 and 1"),
    (dict(train_fraction=float("nan")), "between 0 and 1"), (dict(train_per_class=-3), "whole number >= 1"),
    (dict(train_per_class=0), "whole number >= 1"), (dict(train_per_class=2.5), "whole number >= 1"),
    (dict(train_per_class=2, train_fraction=0.5), "not both"),
])
def test_split_options_out_of_bounds_are_refused(own, options, message):
    with pytest.raises(ValueError, match=message):
        read_image_folder(own, **options)


def test_missing_empty_or_too_small_folders_say_what_to_do(own, tmp_path):
    with pytest.raises(DatasetNotFoundError, match="(?s)no such folder.*Layout:.*<root>/<class>/<image>.jpg"):
        read_image_folder(tmp_path / "nope")
    (tmp_path / "flat").mkdir()
    (tmp_path / "flat" / "a.png").write_bytes(b"")
    with pytest.raises(DatasetNotFoundError, match="1 images but no class folders"):
        read_image_folder(tmp_path / "flat")
    with pytest.raises(TooFewImagesError, match="'class02' has 5 images.*at most 4"):
        read_image_folder(own, train_per_class=5)
    (tmp_path / "flat" / "empty").mkdir()
    with pytest.raises(TooFewImagesError, match="class 'empty' has 0 images"):
        read_image_folder(tmp_path / "flat")


def test_the_benchmark_holds_the_split_in_experiences_of_the_seeded_class_order(own):
    split = read_image_folder(own)
    bm = image_folder(root=own, n_experiences=3, image_size=16, seed=2)
    train_counts = {y: sum(1 for _, t in split.train if t == y) for y in range(3)}
    test_counts = {y: sum(1 for _, t in split.test if t == y) for y in range(3)}
    seen = []
    for train_exp, test_exp in zip(bm.train_stream, bm.test_stream):
        (cls,) = train_exp.classes_in_this_experience
        seen.append(cls)
        assert len(train_exp.dataset) == train_counts[cls] and len(test_exp.dataset) == test_counts[cls]
        x, y = train_exp.dataset[0]
        assert tuple(x.shape) == (3, 16, 16) and y == cls
    assert sorted(seen) == [0, 1, 2]
    assert [e.task_label for e in image_folder(root=own, n_experiences=3, image_size=16,
                                               return_task_id=True).train_stream] == [0, 1, 2]
    with pytest.raises(ValueError, match="3 classes: n_experiences must be 1 to 3"):
        image_folder(root=own, n_experiences=4)
