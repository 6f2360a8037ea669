"""The paper's large image-folder datasets (Caltech-256, MIT Indoor-67, Oxford-IIIT Pets,
Tiny-ImageNet-200), read lazily with PIL from ``data_root``; a missing folder raises
:class:`~avalanche_tmc.factories.benchmarks.DatasetNotFoundError` saying where to download it and
how to lay it out. ``transforms="authors"`` gives the training set the TMC authors' random
crop and flip and the test set their centre crop (:func:`~benchmarks.datasets.base.make_transforms`);
a class whose split leaves its train or test side empty raises
:class:`~benchmarks.datasets.base.TooFewImagesError` at load time."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

from avalanche_tmc.factories.image_folder import IMAGE_EXTENSIONS, check_both_sides, describe_counts

from .base import (
    DatasetNotFoundError,
    ImageFileDataset,
    Normalization,
    TooFewImagesError,
    make_transforms,
    stratified_split,
)
from .cache import default_data_root

__all__ = [
    "IMAGE_EXTENSIONS", "FolderLayout", "list_images", "CALTECH256", "MIT67", "OXFORD_PETS", "TINYIMAGENET",
    "load_caltech256", "load_mit67", "load_oxford_pets", "load_tinyimagenet", "file_pair",
]

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
        # The first line says everything needed (listings print only that line); the layout follows.
        raise DatasetNotFoundError(
            f"{self.name} not found: looked in {', '.join(map(str, candidates))}. Download it from {self.url}, "
            "lay it out as shown below and pass data_root=<the folder holding it> (or set $AVALANCHE_TMC_DATA).\n"
            f"Layout:\n{self.layout}"
        )


def list_images(folder: Path) -> List[Path]:
    """Image files directly in ``folder`` (by extension), sorted by name."""
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS)


def _split_groups(
    groups: Sequence[Sequence[Path]],
    seed: int,
    train_per_class: Optional[int] = None,
    train_fraction: Optional[float] = None,
    dataset: str = "dataset",
    names: Optional[Sequence[str]] = None,
) -> Tuple[List[Tuple[Path, int]], List[Tuple[Path, int]]]:
    """Seeded per-class split of file lists (label = position in ``groups``); a class left
    with an empty train or test side raises :class:`TooFewImagesError`."""
    names = list(names) if names is not None else [str(i) for i in range(len(groups))]
    if train_per_class is not None:
        short = [(name, len(group)) for name, group in zip(names, groups) if len(group) <= train_per_class]
        if short:
            smallest = min(n for _, n in short)
            raise TooFewImagesError(
                f"{dataset}: {describe_counts(short)}: train_per_class={train_per_class} takes that many for "
                "training and leaves none for the test set. Lower train_per_class to at most "
                f"{max(smallest - 1, 0)} (the smallest class has {smallest} images) or add images to "
                f"{'that class' if len(short) == 1 else 'those classes'}."
            )
    paths = [p for group in groups for p in group]
    labels = [label for label, group in enumerate(groups) for _ in group]
    test_fraction = None if train_fraction is None else 1.0 - train_fraction
    train, test = stratified_split(labels, test_fraction=test_fraction, train_per_class=train_per_class, seed=seed)
    train_pairs, test_pairs = [(paths[i], labels[i]) for i in train], [(paths[i], labels[i]) for i in test]
    option = f"train_per_class={train_per_class}" if train_per_class is not None else f"train_fraction={train_fraction}"
    check_both_sides(dataset, names, train_pairs, test_pairs, option)
    return train_pairs, test_pairs


def file_pair(
    train: Sequence[Tuple[Path, int]], test: Sequence[Tuple[Path, int]], classes: Sequence[str],
    image_size: int, normalization: Normalization, transform: Optional[Callable], transforms: str = "square",
) -> Tuple[ImageFileDataset, ImageFileDataset]:  # fmt: skip
    """Wrap split file lists as datasets: ``transform`` for both if given, else the training
    and evaluation transforms of the ``transforms`` recipe."""
    if transform is not None:
        if transforms != "square":
            raise ValueError(f"give transform=<callable> or transforms={transforms!r}, not both")
        return ImageFileDataset(train, classes, transform), ImageFileDataset(test, classes, transform)
    train_transform, eval_transform = make_transforms(image_size, normalization, transforms)
    return ImageFileDataset(train, classes, train_transform), ImageFileDataset(test, classes, eval_transform)


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
    transforms: str = "square",
) -> Tuple[ImageFileDataset, ImageFileDataset]:
    """Caltech-256: ``train_per_class`` (60) seeded random images per class for training,
    the rest for test; 256 classes (257 with ``include_clutter``)."""

    def class_dirs(root: Path) -> List[Path]:
        dirs = sorted(d for d in root.iterdir() if d.is_dir() and _CALTECH_CLASS.match(d.name))
        return [d for d in dirs if include_clutter or not d.name.endswith(".clutter")]

    root = CALTECH256.locate(data_root, lambda p: bool(class_dirs(p)))
    dirs = class_dirs(root)
    classes = [_CALTECH_CLASS.match(d.name).group(2) for d in dirs]  # type: ignore[union-attr]
    train, test = _split_groups([list_images(d) for d in dirs], seed, train_per_class=train_per_class,
                                dataset="caltech256", names=[d.name for d in dirs])
    return file_pair(train, test, classes, image_size, normalization, transform, transforms)


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
    transforms: str = "square",
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
    check_both_sides("mit67", classes, train, test, "the lists TrainImages.txt / TestImages.txt")
    return file_pair(train, test, classes, image_size, normalization, transform, transforms)


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
    transforms: str = "square",
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
    train, test = _split_groups([by_class[c] for c in classes], seed, train_fraction=train_fraction,
                                dataset="oxford_pets", names=classes)
    return file_pair(train, test, classes, image_size, normalization, transform, transforms)


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
    transforms: str = "square",
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
    check_both_sides("tinyimagenet", wnids, train, test, "train/<wnid>/images and val/val_annotations.txt")
    return file_pair(train, test, classes, image_size, normalization, transform, transforms)
