"""The image pipeline of the folder datasets: the authors' transforms against torchvision
built by hand, the generated folders, the too-small-class error, DataLoader workers (also
under an Avalanche strategy) and the decoded cache. Nothing here is timed."""

import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader
from torchvision import transforms as T

from benchmarks.datasets import base as B
from benchmarks.datasets.folders import load_caltech256, load_mit67, load_oxford_pets, load_tinyimagenet
from benchmarks.datasets.loading import DecodedImages, dataloader_kwargs, decode_once, default_workers, is_in_memory
from benchmarks.datasets.synthetic import main as synthetic_main
from benchmarks.datasets.synthetic import make_image_folder, synthetic_image

NORMALIZE = T.Normalize(list(B.IMAGENET_MEAN), list(B.IMAGENET_STD))


def _photo(width: int = 457, height: int = 331, seed: int = 3) -> Image.Image:
    return synthetic_image(np.random.default_rng(seed), width, height, label=1, classes=4)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """Caltech-style: 3 classes x 5 small JPEGs."""
    return make_image_folder(tmp_path_factory.mktemp("caltech"), classes=3, per_class=5, min_size=40, max_size=64)


def test_eval_transform_equals_torchvision_by_hand():
    img = _photo()
    _, evaluation = B.make_transforms(224, "imagenet", "authors")
    by_hand = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(), NORMALIZE])
    out = evaluation(img)
    assert out.shape == (3, 224, 224)
    assert torch.equal(out, by_hand(img))
    # generalised: resize to round(s * 256 / 224), crop s (the authors' int(round(...)))
    assert [B.resize_size(s) for s in (224, 112, 32, 64)] == [256, 128, 37, 73]
    _, small = B.make_transforms(32, "imagenet", "authors")
    assert torch.equal(small(img), T.Compose([T.Resize(37), T.CenterCrop(32), T.ToTensor(), NORMALIZE])(img))


def test_square_recipe_is_the_old_transform_for_both_sets():
    img = _photo()
    train, evaluation = B.make_transforms(32, "imagenet", "square")
    assert train is evaluation
    by_hand = T.Compose([T.Resize((32, 32)), T.ToTensor(), NORMALIZE])
    assert torch.equal(train(img), by_hand(img)) and torch.equal(B.make_transform(32)(img), by_hand(img))
    with pytest.raises(ValueError, match="'square', 'authors'"):
        B.make_transforms(32, recipe="imagenet")


def test_train_transform_crops_and_flips_at_random():
    # An image already at the resize size (Resize leaves it as it is) whose red channel is
    # the column and green the row: each output tells its crop offset and whether it was flipped.
    cols, rows = np.meshgrid(np.arange(256), np.arange(256))
    img = Image.fromarray(np.stack([cols, rows, np.zeros_like(cols)], -1).astype(np.uint8))
    train, _ = B.make_transforms(224, "imagenet", "authors")
    mean, std = torch.tensor(B.IMAGENET_MEAN).view(3, 1, 1), torch.tensor(B.IMAGENET_STD).view(3, 1, 1)
    torch.manual_seed(0)
    offsets, flips = set(), 0
    for _ in range(200):
        pixels = torch.round((train(img) * std + mean) * 255).long()
        red_row, top = pixels[0, 0], int(pixels[1, 0, 0])
        flipped = bool(red_row[0] > red_row[-1])
        assert torch.equal(red_row, red_row.sort(descending=flipped).values)  # a whole row, in order
        left = int(red_row.min())
        assert 0 <= left <= 32 and 0 <= top <= 32 and int(red_row.max()) == left + 223
        offsets.add((left, top))
        flips += flipped
    assert len(offsets) > 100
    assert 0.4 <= flips / 200 <= 0.6


def test_generated_folder_loads_with_train_and_test_transforms(folder):
    sizes = {Image.open(p).size for p in folder.glob("caltech256/256_ObjectCategories/*/*.jpg")}
    assert len(sizes) > 5 and all(40 <= w <= 64 and 40 <= h <= 64 and w != h for w, h in sizes)
    train, test = load_caltech256(folder, image_size=32, train_per_class=3, transforms="authors")
    assert train.classes == ["shape-001", "shape-002", "shape-003"]
    assert np.bincount(train.targets).tolist() == [3, 3, 3] and np.bincount(test.targets).tolist() == [2, 2, 2]
    assert train.transform is not test.transform
    assert [type(t) for t in train.transform.transforms][:3] == [T.Resize, T.RandomCrop, T.RandomHorizontalFlip]
    by_hand = T.Compose([T.Resize(37), T.CenterCrop(32), T.ToTensor(), NORMALIZE])
    for i in range(len(test)):
        x, y = test[i]
        assert torch.equal(x, by_hand(Image.open(test.samples[i][0]).convert("RGB"))) and y == test.targets[i]
    torch.manual_seed(0)
    assert not torch.equal(train[0][0], train[0][0])  # augmented at every access, never cached
    assert torch.equal(test[0][0], test[0][0])


def test_default_transforms_are_unchanged(folder):
    train, test = load_caltech256(folder, image_size=16, train_per_class=3)
    assert train.transform is test.transform
    by_hand = T.Compose([T.Resize((16, 16)), T.ToTensor(), NORMALIZE])
    for data in (train, test):
        assert torch.equal(data[1][0], by_hand(Image.open(data.samples[1][0]).convert("RGB")))
    with pytest.raises(ValueError, match="not both"):
        load_caltech256(folder, train_per_class=3, transform=by_hand, transforms="authors")


@pytest.mark.parametrize("layout, load, counts", [
    ("mit67", load_mit67, ([4, 4], [1, 1])),
    ("oxford_pets", load_oxford_pets, ([3, 3], [2, 2])),  # test: round(5 * 0.5) = 2
    ("tinyimagenet", load_tinyimagenet, ([5, 5], [1, 1])),
])
def test_other_layouts_load(tmp_path, layout, load, counts):
    root = make_image_folder(tmp_path, layout, classes=2, per_class=5, min_size=20, max_size=30, seed=1)
    train, test = load(root, image_size=16, transforms="authors")
    assert len(train.classes) == 2
    assert (np.bincount(train.targets).tolist(), np.bincount(test.targets).tolist()) == counts
    assert train[0][0].shape == test[0][0].shape == (3, 16, 16)


def test_synthetic_command_line(tmp_path, capsys):
    assert synthetic_main(["--out", str(tmp_path), "--classes", "2", "--per-class", "2", "--min-size", "20",
                           "--max-size", "24"]) == 0
    assert len(list(tmp_path.glob("caltech256/256_ObjectCategories/00?.*/*.jpg"))) == 4
    assert f"python -m benchmarks.datasets caltech256 --data-root {tmp_path}" in capsys.readouterr().out


def test_a_class_too_small_for_the_split_says_which_and_what_to_lower(tmp_path):
    root = make_image_folder(tmp_path, classes=3, per_class=[5, 2, 5], min_size=20, max_size=24)
    with pytest.raises(B.TooFewImagesError) as info:
        load_caltech256(root, train_per_class=3)
    message = str(info.value)
    assert isinstance(info.value, ValueError)
    assert "002.shape-002" in message and "has 2 images" in message and "train_per_class=3" in message
    assert "Lower train_per_class to at most 1" in message
    load_caltech256(root, train_per_class=1)  # what it says to do works
    pets = make_image_folder(tmp_path / "pets", "oxford_pets", classes=2, per_class=[4, 1], min_size=20,
                             max_size=24)
    with pytest.raises(B.TooFewImagesError, match="'breed_01' has 1 image: train_fraction=0.5 leaves none for its"):
        load_oxford_pets(pets)


def test_missing_folder_first_line_says_what_to_do(tmp_path):
    with pytest.raises(B.DatasetNotFoundError) as info:
        load_caltech256(tmp_path / "nothing")
    first, *rest = str(info.value).splitlines()
    assert "caltech.edu" in first and "data_root=" in first and "AVALANCHE_TMC_DATA" in first
    assert any("001.ak47" in line for line in rest)


def test_two_workers_give_the_same_eval_tensors_as_none(folder):
    _, test = load_caltech256(folder, image_size=32, train_per_class=3, transforms="authors")
    restored = pickle.loads(pickle.dumps(test))
    assert torch.equal(restored[2][0], test[2][0])

    def batches(workers):
        return list(DataLoader(test, batch_size=4, num_workers=workers))

    for (x0, y0), (x2, y2) in zip(batches(0), batches(2), strict=True):
        assert torch.equal(x0, x2) and torch.equal(y0, y2)


class _MarkWorker:
    """A transform that leaves a file named by the worker that ran it (picklable)."""

    def __init__(self, inner, folder: Path) -> None:
        self.inner, self.folder = inner, folder

    def __call__(self, img):
        info = torch.utils.data.get_worker_info()
        (self.folder / f"{os.getpid()}-{'main' if info is None else info.id}").touch()
        return self.inner(img)


def test_a_strategy_trains_and_evaluates_with_two_workers(folder, tmp_path):
    from avalanche.training import Naive

    from benchmarks.protocol.scenarios import class_incremental

    train, test = load_caltech256(folder, image_size=32, train_per_class=3, transforms="authors")
    train.transform = _MarkWorker(train.transform, tmp_path)
    bm = class_incremental(train, test, n_experiences=1, seed=0)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                torch.nn.Linear(4, 3))
    strategy = Naive(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), train_mb_size=4,
                     train_epochs=2, eval_mb_size=4, evaluator=None)
    kwargs = dataloader_kwargs(train, num_workers=2)
    assert kwargs == {"num_workers": 2, "pin_memory": False, "persistent_workers": True}
    strategy.train(bm.train_stream[0], **kwargs)
    strategy.eval(bm.test_stream, **kwargs)
    marks = sorted(p.name for p in tmp_path.iterdir())
    assert marks and not any(m.endswith("-main") for m in marks)
    assert {m.split("-")[1] for m in marks} == {"0", "1"} and str(os.getpid()) not in {m.split("-")[0] for m in marks}


def test_worker_defaults():
    images = B.ImageTensorDataset(torch.zeros(2, 1, 4, 4, dtype=torch.uint8), [0, 1], ["a", "b"])
    files = B.ImageFileDataset([("x.jpg", 0)], ["a"], T.ToTensor())
    assert is_in_memory(images) and is_in_memory(torch.utils.data.Subset(images, [0])) and not is_in_memory(files)
    assert default_workers(images, cores=16) == 0
    assert [default_workers(files, cores=c) for c in (1, 2, 4, 16, 64)] == [0, 1, 3, 8, 8]
    assert dataloader_kwargs(images, device="cuda") == {"num_workers": 0, "pin_memory": True,
                                                        "persistent_workers": False}
    with pytest.raises(ValueError, match="num_workers"):
        dataloader_kwargs(num_workers=-1)


def test_decoded_cache_gives_the_same_items_and_is_built_once(folder, tmp_path):
    train, test = load_caltech256(folder, image_size=32, train_per_class=3, transforms="authors")
    cached_test = decode_once(test, tmp_path, num_workers=2)
    (key,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    for i in range(len(test)):
        stored = cached_test.decoded[i]
        assert stored.dtype == np.uint8 and min(stored.shape[:2]) == 37  # shorter side at the resize size
        assert torch.equal(cached_test[i][0], test[i][0])
    cached_train = decode_once(train, tmp_path)
    for i in range(len(train)):
        torch.manual_seed(i)
        expected = train[i][0]
        torch.manual_seed(i)
        assert torch.equal(cached_train[i][0], expected)  # the same random crop and flip on the same image
    stamp = (key / "pixels.u8").stat().st_mtime_ns
    again = decode_once(test, tmp_path)
    assert again.decoded.folder == key and (key / "pixels.u8").stat().st_mtime_ns == stamp
    worker_copy = pickle.loads(pickle.dumps(cached_test))
    assert isinstance(worker_copy.decoded, DecodedImages) and torch.equal(worker_copy[1][0], test[1][0])
    with pytest.raises(ValueError, match="starts with a torchvision Resize"):
        decode_once(B.ImageFileDataset(test.samples, test.classes, T.ToTensor()), tmp_path)
