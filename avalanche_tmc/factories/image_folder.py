"""A researcher's own images as a continual-learning benchmark: one sub-folder per class.

:func:`read_image_folder` lists ``root`` and splits it (seeded and stratified, or by its own
``train/`` and ``test/`` folders); :func:`image_folder` turns that into an Avalanche
benchmark; the benchmark runner's ``--dataset folder`` reads the same listing
(``benchmarks.datasets``). Nothing is decoded until an image is read; nothing is
downloaded.

Accepted layouts (images may sit in nested folders under a class folder; hidden folders
are skipped)::

    root/<class>/<image>                  a seeded per-class split (train_fraction, train_per_class)
    root/train/<class>/<image>            the folder's own split, used as it is
    root/test/<class>/<image>
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Sequence, Tuple, Union

import numpy as np

from ._checks import whole_number
from .benchmarks import DatasetNotFoundError

if TYPE_CHECKING:  # for the annotations only: Avalanche loads when the factory is called
    from avalanche.benchmarks.scenarios import CLScenario

__all__ = [
    "IMAGE_EXTENSIONS", "FOLDER_LAYOUT", "TooFewImagesError", "FolderSplit", "stratified_split",
    "check_both_sides", "describe_counts", "read_image_folder", "image_folder",
]

PathLike = Union[str, "os.PathLike[str]"]  # noqa: F821 (a string annotation)

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff")
"""File endings read as images (any case)."""

FOLDER_LAYOUT = ("  <root>/<class>/<image>.jpg  (one folder per class, split by a seed: train_fraction 0.8,\n"
                 "                               or train_per_class)\n"
                 "  or <root>/train/<class>/<image>.jpg and <root>/test/<class>/<image>.jpg  (used as they are)")
"""The layouts :func:`read_image_folder` accepts, as error messages show them."""

Samples = List[Tuple[Path, int]]


class TooFewImagesError(ValueError):
    """A class of a folder dataset has too few images for the requested split (one of its
    sides would be empty); the message names the class, its image count and the option to
    lower."""


@dataclass(frozen=True)
class FolderSplit:
    """A listed image folder: class names (label = position) and ``(path, label)`` pairs of
    each side; ``own_split`` is True when the folder brought its ``train/`` and ``test/``."""

    classes: List[str]
    train: Samples
    test: Samples
    own_split: bool


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


def describe_counts(counts: Sequence[Tuple[str, int]], most: int = 5) -> str:
    """``class 'a' has 3 images`` / ``classes 'a' (3 images), 'b' (1 image) ... have too few images``."""

    def images(n: int) -> str:
        return f"{n} image{'' if n == 1 else 's'}"

    if len(counts) == 1:
        return f"class {counts[0][0]!r} has {images(counts[0][1])}"
    shown = ", ".join(f"{name!r} ({images(n)})" for name, n in counts[:most])
    more = f" and {len(counts) - most} more" if len(counts) > most else ""
    return f"classes {shown}{more} have too few images"


def check_both_sides(dataset: str, classes: Sequence[str], train: Samples, test: Samples, what_sets_it: str) -> None:
    """Raise :class:`TooFewImagesError` if a class has no training or no test sample (Avalanche
    would fail much later, e.g. with a bare IndexError on an empty experience)."""
    count_train = [0] * len(classes)
    count_test = [0] * len(classes)
    for _, label in train:
        count_train[label] += 1
    for _, label in test:
        count_test[label] += 1
    for side, counts in (("training", count_train), ("test", count_test)):
        empty = [(name, count_train[i] + count_test[i]) for i, name in enumerate(classes) if counts[i] == 0]
        if empty:
            raise TooFewImagesError(
                f"{dataset}: {describe_counts(empty)}: {what_sets_it} leaves none for "
                f"{'its' if len(empty) == 1 else 'their'} {side} set. "
                "Every class needs at least one training and one test image: change that option or add images."
            )


def _class_folders(root: Path) -> List[Path]:
    """The visible sub-folders of ``root``, sorted by name."""
    return sorted(d for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))


def _images(folder: Path) -> List[Path]:
    """Image files under ``folder`` (nested folders too, hidden ones skipped), sorted."""
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS
                  and not any(part.startswith(".") for part in p.relative_to(folder).parts))


_SPLIT_NAMES = ("train", "test", "val", "valid", "validation", "training", "testing", "eval")


def _check_folder_names(root: Path) -> None:
    """Refuse a folder the reader would take otherwise than meant: split folders it does not
    use as a split (``Train/``+``Test/``, ``train/``+``val/``: read as classes), ``train/`` and
    ``test/`` beside class folders (those would be ignored), and a class folder that is a link
    to the folder itself, one of its parents or another class (it would hold their images)."""
    folders = _class_folders(root)
    splits = sorted(d.name for d in folders if d.name.lower() in _SPLIT_NAMES)
    names = {d.name for d in folders}
    if {"train", "test"} <= names and len(folders) > 2:
        others = sorted(names - {"train", "test"})
        raise _not_found(root, f"it holds train/ and test/ beside other folders ({', '.join(map(repr, others[:5]))}), "
                               "which would be ignored: keep either train/ and test/ (of class folders each) or "
                               "class folders only")
    if len(splits) >= 2 and set(splits) != {"train", "test"}:
        raise _not_found(root, f"it holds {', '.join(f'{n}/' for n in splits)}, which would be read as classes: name "
                               "the split folders train/ and test/ (lower case; a validation folder is not read) to "
                               "use them as the split, or give class folders only")
    top = root.resolve()
    for folder in folders:
        if folder.is_symlink():
            target = folder.resolve()
            if target == top or top.is_relative_to(target) or target.is_relative_to(top):
                where = ("the folder itself" if target == top else "a folder that holds it"
                         if top.is_relative_to(target) else f"{target.relative_to(top)} inside it")
                raise _not_found(root, f"class folder {folder.name!r} is a link to {where}, so it would hold other "
                                       "classes' images: remove the link, or copy the class's own images there")


def _not_found(root: Path, why: str) -> DatasetNotFoundError:
    from ..files.component import _shown  # a crafted name's control characters escaped

    return DatasetNotFoundError(f"image folder {_shown(root)}: {why}; give the folder that holds one sub-folder per "
                                f"class (layout below).\nLayout:\n{FOLDER_LAYOUT}")


def _listing(root: Path, classes: Sequence[str]) -> Samples:
    """``(path, label)`` of every image of each class folder of ``root``."""
    return [(path, label) for label, name in enumerate(classes) for path in _images(root / name)]


def _check_split_options(train_fraction: Optional[float], train_per_class: Optional[int]) -> None:
    if train_fraction is not None and train_per_class is not None:
        raise ValueError(f"give train_fraction ({train_fraction}) or train_per_class ({train_per_class}), not both")
    if train_fraction is not None and not (isinstance(train_fraction, (int, float)) and math.isfinite(train_fraction)
                                           and 0 < train_fraction < 1):
        raise ValueError(f"train_fraction={train_fraction!r}: the share of each class used for training, "
                         "a number between 0 and 1 (exclusive), e.g. 0.8")
    if train_per_class is not None and (isinstance(train_per_class, bool) or not isinstance(train_per_class, int)
                                        or train_per_class < 1):
        raise ValueError(f"train_per_class={train_per_class!r}: the training images per class, a whole number >= 1")


def read_image_folder(
    root: PathLike,
    *,
    train_fraction: Optional[float] = None,
    train_per_class: Optional[int] = None,
    seed: int = 0,
) -> FolderSplit:
    """List the image folder ``root`` (layouts in the module's docstring) and split it.

    Without ``train/`` and ``test/`` sub-folders each class is split by ``seed``:
    ``train_fraction`` of its images for training (default 0.8), or ``train_per_class``
    of them. A missing or empty folder raises :class:`DatasetNotFoundError`, a class left
    without a training or test image :class:`TooFewImagesError`, both saying what to do.
    """
    _check_split_options(train_fraction, train_per_class)
    seed = whole_number(seed, "seed", minimum=0)  # (numpy's own error named neither the option nor the fix)
    root = Path(root).expanduser()
    if not root.is_dir():
        raise _not_found(root, "no such folder" if not root.exists() else "not a folder")
    name = root.resolve().name or str(root)
    _check_folder_names(root)
    train_dir, test_dir = root / "train", root / "test"
    if train_dir.is_dir() and test_dir.is_dir():
        if train_fraction is not None or train_per_class is not None:
            raise ValueError(f"{root} holds its own train/ and test/ folders, used as they are: "
                             "drop train_fraction / train_per_class")
        classes = [d.name for d in _class_folders(train_dir)]
        extra = sorted({d.name for d in _class_folders(test_dir)} - set(classes))
        if extra:
            raise _not_found(root, f"test/ has class folders that train/ lacks ({', '.join(map(repr, extra[:5]))}); "
                                   "give both sides the same classes")
        if not classes:
            raise _not_found(root, "train/ holds no class folders")
        train, test = _listing(train_dir, classes), _listing(test_dir, classes)
        check_both_sides(name, classes, train, test, "the folder's own train/ and test/ split")
        return FolderSplit(classes, train, test, own_split=True)
    classes = [d.name for d in _class_folders(root)]
    if not classes:
        loose = _images(root)
        raise _not_found(root, f"it holds {len(loose)} images but no class folders" if loose else "no class folders")
    samples = _listing(root, classes)
    counts = [0] * len(classes)
    for _, label in samples:
        counts[label] += 1
    empty = [(c, 0) for c, n in zip(classes, counts) if n == 0]
    if empty:
        raise TooFewImagesError(f"{name}: {describe_counts(empty)} (files ending in {', '.join(IMAGE_EXTENSIONS)}): "
                                "add images or remove the folder")
    if train_per_class is not None:
        short = [(c, n) for c, n in zip(classes, counts) if n <= train_per_class]
        if short:
            smallest = min(n for _, n in short)
            raise TooFewImagesError(
                f"{name}: {describe_counts(short)}: train_per_class={train_per_class} leaves none for the test "
                f"set. Lower train_per_class to at most {max(smallest - 1, 0)} or add images.")
    fraction = 0.8 if train_fraction is None and train_per_class is None else train_fraction
    test_fraction = None if fraction is None else 1.0 - fraction
    picked = stratified_split([label for _, label in samples], test_fraction=test_fraction,
                              train_per_class=train_per_class, seed=seed)
    train, test = ([samples[i] for i in side] for side in picked)
    option = f"train_per_class={train_per_class}" if train_per_class is not None else f"train_fraction={fraction}"
    check_both_sides(name, classes, train, test, option)
    return FolderSplit(classes, train, test, own_split=False)


_WIDE_MODES = ("I;16", "I;16L", "I;16B", "I;16N", "I", "F")  # one channel wider than 8 bits


def rgb_image(image: Any) -> Any:
    """``image`` (an open PIL image) as 8-bit RGB, its values scaled: Pillow's
    ``convert("RGB")`` clips a wide image instead (a 16-bit PNG read 99.6% pure white). One
    wide channel is scaled to 0..255 by its range: 65535 for 16-bit, for 32-bit integers the
    smallest of 255, 65535 and their maximum that holds them, 1 or the maximum for floats."""
    from PIL import Image

    if image.mode not in _WIDE_MODES:
        return image.convert("RGB")
    values = np.asarray(image, dtype=np.float64)
    peak = float(values.max()) if values.size else 0.0
    if image.mode.startswith("I;16"):
        top = 65535.0
    elif image.mode == "I":
        top = 255.0 if peak <= 255 else 65535.0 if peak <= 65535 else peak
    else:
        top = 1.0 if peak <= 1.0 else peak
    eight = np.clip(np.rint(values / top * 255.0), 0, 255).astype(np.uint8)
    return Image.fromarray(eight, mode="L").convert("RGB")


def read_rgb(path: Union[str, Path]) -> Any:
    """The image file ``path`` as an 8-bit RGB PIL image (:func:`rgb_image`)."""
    from PIL import Image

    with Image.open(path) as image:
        return rgb_image(image)


class _ImageFiles:
    """``(transform(RGB image), label)`` of listed files, read at each access; ``targets``
    and ``classes`` as Avalanche reads them."""

    def __init__(self, samples: Samples, classes: Sequence[str], transform: Callable) -> None:
        self.samples = [(str(p), int(y)) for p, y in samples]
        self.targets = [y for _, y in self.samples]
        self.classes = list(classes)
        self.transform = transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> Tuple[Any, int]:
        path, label = self.samples[index]
        return self.transform(read_rgb(path)), label


def _imagenet_transforms(image_size: int, augment: bool) -> Tuple[Callable, Callable]:
    """(train, test) transforms for an ImageNet-pre-trained network: resize to
    ``image_size * 256 / 224``, random crop and flip for training (``augment``), centre crop."""
    from torchvision import transforms as T

    norm = [T.ToTensor(), T.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))]
    resize = T.Resize(int(round(image_size * 256 / 224)))
    test = T.Compose([resize, T.CenterCrop(image_size), *norm])
    train = T.Compose([resize, T.RandomCrop(image_size), T.RandomHorizontalFlip(), *norm]) if augment else test
    return train, test


def image_folder(
    *,
    root: PathLike,
    n_experiences: int = 5,
    return_task_id: bool = False,
    seed: int = 0,
    split_seed: int = 0,
    train_fraction: Optional[float] = None,
    train_per_class: Optional[int] = None,
    image_size: int = 224,
    augment: bool = True,
) -> "CLScenario":
    """Your own image folder (:func:`read_image_folder`) as a class-incremental Avalanche
    benchmark of ``n_experiences`` experiences, classes ordered by ``seed``
    (``return_task_id``: task-incremental); ``split_seed`` fixes the train/test split.
    Images get ImageNet's normalisation at ``image_size`` (random crop and flip for
    training when ``augment``). Command line: ``--data avalanche_tmc.factories:image_folder
    --data-option root=DIR``."""
    from avalanche.benchmarks.scenarios import class_incremental_benchmark, task_incremental_benchmark
    from avalanche.benchmarks.utils import as_classification_dataset

    n_experiences = whole_number(n_experiences, "n_experiences", minimum=1)
    seed, split_seed = whole_number(seed, "seed", minimum=0), whole_number(split_seed, "split_seed", minimum=0)
    image_size = whole_number(image_size, "image_size", minimum=1)
    split = read_image_folder(root, train_fraction=train_fraction, train_per_class=train_per_class, seed=split_seed)
    if not 1 <= n_experiences <= len(split.classes):
        raise ValueError(f"{root} has {len(split.classes)} classes: n_experiences must be 1 to {len(split.classes)}, "
                         f"got {n_experiences}")
    train_tf, test_tf = _imagenet_transforms(image_size, augment)
    datasets = {"train": as_classification_dataset(_ImageFiles(split.train, split.classes, train_tf)),
                "test": as_classification_dataset(_ImageFiles(split.test, split.classes, test_tf))}
    order = np.random.default_rng(seed).permutation(len(split.classes)).tolist()
    bm = class_incremental_benchmark(datasets, class_order=order, num_experiences=n_experiences)
    return task_incremental_benchmark(bm) if return_task_id else bm
