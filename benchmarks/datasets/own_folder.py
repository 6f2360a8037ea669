"""``--dataset folder --data-root DIR``: a researcher's own images, one sub-folder per class
(or ``DIR/train`` and ``DIR/test``), listed and split by the library's
:func:`avalanche_tmc.factories.image_folder.read_image_folder` and read lazily like the
paper's folder datasets; tables, plots and output folders name it after ``DIR``."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Callable, Optional, Tuple, Union

from avalanche_tmc.factories.image_folder import FOLDER_LAYOUT, IMAGE_EXTENSIONS, read_image_folder
from benchmarks.datasets.names import safe_name

from .base import DatasetNotFoundError, ImageFileDataset, Normalization
from .folders import file_pair

__all__ = ["load_folder", "folder_label", "folder_digest"]


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
    name (``~/data/birds`` -> ``birds``), control characters, bytes that are not UTF-8 and
    HTML comment markers escaped (:func:`~benchmarks.results.reading.safe_name`)."""
    path = Path(data_root).expanduser()
    return safe_name(path.resolve().name or str(path))  # escaped: a name the runner's own report reads back


def folder_digest(data_root: Union[str, Path]) -> str:
    """A digest of the image folder's content as the run reads it: every image file's path
    (relative to ``data_root``), size and modification time. It enters the run's key, so that
    a class added or an image replaced between a Ctrl-C and the resume (or between two runs
    into one ``--out``) trains afresh instead of mixing rows of two folders in one table."""
    root = Path(data_root).expanduser()
    entries = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if name.startswith(".") or Path(name).suffix.lower() not in IMAGE_EXTENSIONS:
                continue
            path = Path(folder) / name
            try:
                info = path.stat()
            except OSError:
                continue
            entries.append(f"{path.relative_to(root).as_posix()}\t{info.st_size}\t{info.st_mtime_ns}")
    return hashlib.sha256("\n".join(entries).encode("utf-8", "surrogateescape")).hexdigest()[:16]
