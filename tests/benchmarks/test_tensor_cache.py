"""The datasets' tensor cache (benchmarks.datasets.cache, issue 52, item 11): a cache file of
another image size (copied or renamed over this size's) was used silently, the run training
on images of another size than it said; it is stale, and rebuilt like a truncated one."""

import shutil

import pytest
import torch

from benchmarks.datasets import cache as dataset_cache
from benchmarks.datasets.mnist_like import load_digits


@pytest.fixture
def cache_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("AVALANCHE_TMC_CACHE", str(tmp_path))
    dataset_cache._MEMORY_CACHE.clear()
    yield tmp_path / "tensors"
    dataset_cache._MEMORY_CACHE.clear()


def _file(folder, size):
    (path,) = folder.glob(f"digits-{size}px-*.pt")
    return path


def test_a_cache_file_of_another_image_size_is_rebuilt_not_used(cache_folder):
    load_digits(image_size=8)
    expected, _ = load_digits(image_size=16)
    shutil.copyfile(_file(cache_folder, 8), _file(cache_folder, 16))  # 8 px images under the 16 px name
    dataset_cache._MEMORY_CACHE.clear()
    train, test = load_digits(image_size=16)
    assert train.images.shape[-2:] == test.images.shape[-2:] == (16, 16)
    assert torch.equal(train.images, expected.images)
    assert torch.load(_file(cache_folder, 16), weights_only=True)["train_images"].shape[-2:] == (16, 16)  # rewritten


@pytest.mark.parametrize("content", [[1, 2], {"train_images": "x"}, {"train_images": torch.zeros(3, 3, 16, 16)}],
                         ids=["a-list", "text-images", "float-images"])
def test_a_cache_file_of_another_shape_is_rebuilt(cache_folder, content):
    expected, _ = load_digits(image_size=16)
    torch.save(content, _file(cache_folder, 16))
    dataset_cache._MEMORY_CACHE.clear()
    train, _ = load_digits(image_size=16)
    assert torch.equal(train.images, expected.images)
