"""``--dataset folder --data-root DIR``: a researcher's own images, one sub-folder per class
(or ``DIR/train`` and ``DIR/test``), listed and split by the library's
:func:`avalanche_tmc.factories.image_folder.read_image_folder` and read lazily like the
paper's folder datasets; tables, plots and output folders name it after ``DIR``."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional, Tuple, Union

from avalanche_tmc.factories.image_folder import FOLDER_LAYOUT, read_image_folder

from .base import DatasetNotFoundError, ImageFileDataset, Normalization
from .folders import file_pair

__all__ = ["load_folder", "folder_label"]


def load_folder(
    data_root: Optional[Union[str, Path]] = None,
    image_size: int = 32,
    normalization: Normalization = "imagenet",
    train_fraction: Optional[float] = None,
    train_per_class: Optional[int] = None,
    seed: int = 0,
    transform: Optional[Callable] = None,
    transforms: str = "square",
) -> Tuple[ImageFileDataset, ImageFileDataset]:
    """The image folder ``data_root``: its own ``train/`` and ``test/``, or each class split by
    ``seed`` (``train_fraction`` of its images for training, default 0.8, or
    ``train_per_class``)."""
    if data_root is None:
        raise DatasetNotFoundError("dataset folder reads your own images: pass --data-root DIR (data_root=DIR), "
                                   f"DIR laid out as\n{FOLDER_LAYOUT}")
    split = read_image_folder(data_root, train_fraction=train_fraction, train_per_class=train_per_class, seed=seed)
    return file_pair(split.train, split.test, split.classes, image_size, normalization, transform, transforms)


def folder_label(data_root: Union[str, Path]) -> str:
    """The name tables, plots and output folders give the image folder ``data_root``: its own
    name (``~/data/birds`` -> ``birds``)."""
    path = Path(data_root).expanduser()
    return path.resolve().name or str(path)
