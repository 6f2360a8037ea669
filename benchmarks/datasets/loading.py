"""How the runner feeds images to a strategy: DataLoader settings and an optional cache of
decoded images.

* :func:`dataloader_kwargs` returns the keyword arguments that Avalanche 0.6's
  ``strategy.train(exp, **kw)`` and ``strategy.eval(stream, **kw)`` hand to
  ``SupervisedTemplate.make_train_dataloader`` / ``make_eval_dataloader``
  (``num_workers``, ``pin_memory``, ``persistent_workers``). Worker processes decode and
  augment images while the main process trains; in-memory tensor datasets get none (their
  items cost a division, a worker would cost more than it saves).
* :func:`decode_once` returns a copy of an :class:`~benchmarks.datasets.base.ImageFileDataset`
  that reads each image from a cache of its transform's first ``Resize`` (decoded JPEG,
  shorter side at the resize size, ``uint8``), written once under
  ``<cache>/decoded/<key>/`` (key: the file list with sizes and modification times, and
  the resize settings). Later epochs and runs skip JPEG decoding and resizing; the rest of
  the transform (random crop, flip, ToTensor, normalisation) still runs at every access, so
  augmentation stays random, and the result is bit for bit what the files give.

``python -m benchmarks.tools.pipeline`` measures both (docs/results/pipeline/).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

from avalanche_tmc.factories.image_folder import rgb_image
from benchmarks.datasets.base import ImageFileDataset, ImageTensorDataset
from benchmarks.datasets.cache import cache_dir, digest
from benchmarks.networks.threads import available_cores

__all__ = [
    "MAX_WORKERS", "is_in_memory", "default_workers", "dataloader_kwargs", "DecodedImages",
    "decode_once",
]

MAX_WORKERS = 8
"""The most workers :func:`default_workers` gives (more rarely help one GPU; each holds a
copy of the dataset's file list and its own decoder buffers)."""


def is_in_memory(dataset: Any) -> bool:
    """True for datasets whose items are already tensors in memory (:class:`ImageTensorDataset`,
    ``TensorDataset``, or a ``Subset`` / Avalanche wrapper of one through ``.dataset``)."""
    seen = 0
    while dataset is not None and seen < 16:
        if isinstance(dataset, (ImageTensorDataset, TensorDataset)):
            return True
        if isinstance(dataset, ImageFileDataset):
            return False
        dataset, seen = getattr(dataset, "dataset", None), seen + 1
    return False


def default_workers(dataset: Any = None, cores: Optional[int] = None, cap: int = MAX_WORKERS) -> int:
    """DataLoader workers for ``dataset``: 0 for in-memory tensors (:func:`is_in_memory`),
    else one per core but one (the main process trains), at most ``cap``; 0 on one core.
    ``cores``: None for :func:`benchmarks.networks.threads.available_cores` (the affinity mask)."""
    if dataset is not None and is_in_memory(dataset):
        return 0
    cores = available_cores() if cores is None else cores
    return max(0, min(cap, cores - 1))


def dataloader_kwargs(
    dataset: Any = None,
    num_workers: Optional[int] = None,
    device: Union[str, torch.device, None] = None,
    persistent: bool = True,
) -> Dict[str, Any]:
    """Keyword arguments for ``strategy.train(exp, **kw)`` and ``strategy.eval(stream, **kw)``.

    ``num_workers``: None for :func:`default_workers` of ``dataset``. ``pin_memory`` is on
    for a CUDA ``device`` (page-locked batches copy to the GPU asynchronously).
    ``persistent_workers`` (with ``persistent`` and workers): the workers of one
    experience's DataLoader live across its epochs instead of starting again at each.
    """
    if num_workers is None:
        num_workers = default_workers(dataset)
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0:
        raise ValueError(f"num_workers={num_workers!r}: give a whole number >= 0 (0 loads in the main process)")
    cuda = device is not None and torch.device(device).type == "cuda"
    return {"num_workers": num_workers, "pin_memory": cuda, "persistent_workers": persistent and num_workers > 0}


# --------------------------------------------------------------------------------------
# The decoded-image cache
# --------------------------------------------------------------------------------------

_INDEX = "index.npy"
_PIXELS = "pixels.u8"
_FORMAT = "2"  # 2: wide (16-bit) images scaled to 8 bits, not clipped (issue 61)


class DecodedImages:
    """Decoded ``uint8`` images ``(H, W, 3)`` of varied sizes kept in one file, memory-mapped.

    ``folder`` holds ``index.npy`` (``N x 3`` int64: offset, height, width) and
    ``pixels.u8`` (the images' bytes one after the other). Picklable: a DataLoader worker
    maps the file itself on its first access.
    """

    def __init__(self, folder: Union[str, Path]) -> None:
        self.folder = Path(folder)
        self.index = np.load(self.folder / _INDEX)
        self._pixels: Optional[np.ndarray] = None

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, i: int) -> np.ndarray:
        if self._pixels is None:
            self._pixels = np.memmap(self.folder / _PIXELS, dtype=np.uint8, mode="r")
        offset, height, width = (int(v) for v in self.index[i])
        return self._pixels[offset:offset + height * width * 3].reshape(height, width, 3)

    def __getstate__(self) -> Dict[str, Any]:
        return {"folder": self.folder, "index": self.index, "_pixels": None}

    @property
    def nbytes(self) -> int:
        """Bytes of pixels held."""
        return int((self.index[:, 1] * self.index[:, 2]).sum() * 3) if len(self.index) else 0


def _first_resize(transform: Any):
    """The ``Resize`` a ``Compose`` starts with, else a ValueError."""
    from torchvision import transforms as T

    steps = getattr(transform, "transforms", None)
    if not steps or not isinstance(steps[0], T.Resize):
        raise ValueError(
            "decode_once needs a transform that starts with a torchvision Resize (as make_transforms' do): "
            f"got {transform!r}"
        )
    return steps[0]


class _Decode(Dataset):
    """Worker-side: file ``i`` decoded to RGB and resized, as a uint8 array."""

    def __init__(self, paths: Sequence[str], resize: Any) -> None:
        self.paths, self.resize = list(paths), resize

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> np.ndarray:
        from PIL import Image

        with Image.open(self.paths[i]) as img:
            rgb = rgb_image(img)  # (a 16-bit image scaled, not clipped to white)
        return np.asarray(self.resize(rgb), dtype=np.uint8)


def _identity(x: Any) -> Any:
    return x


def _key(dataset: ImageFileDataset, resize: Any) -> str:
    files: List[Tuple[str, int, int]] = []
    for path, _ in dataset.samples:
        st = os.stat(path)
        files.append((os.path.abspath(path), st.st_size, st.st_mtime_ns))
    settings = (repr(resize.size), str(resize.interpolation), repr(resize.max_size), repr(resize.antialias))
    return digest(_FORMAT, settings, files)


def decode_once(
    dataset: ImageFileDataset,
    folder: Union[str, Path, None] = None,
    num_workers: int = 0,
) -> ImageFileDataset:
    """A copy of ``dataset`` that reads its images from a decoded cache (built on first use).

    The cache holds the output of the first step of ``dataset.transform`` (a ``Resize``: the
    decoded image with its shorter side at the resize size, or the square of
    ``make_transform``); the copy still applies the whole transform, whose ``Resize`` then
    leaves the image as it is (torchvision returns an image already at the target size
    unchanged), so items equal the uncached dataset's bit for bit. ``folder``: where caches
    live (default ``<cache>/decoded``, see :func:`benchmarks.datasets.cache.cache_dir`);
    ``num_workers``: processes decoding while the cache is built.
    """
    if dataset.decoded is not None:
        return dataset
    resize = _first_resize(dataset.transform)
    root = Path(folder) if folder is not None else cache_dir() / "decoded"
    target = root / _key(dataset, resize)
    if not (target / _INDEX).is_file():
        shutil.rmtree(target, ignore_errors=True)  # an unfinished build
        _build(dataset, resize, target, num_workers)
    decoded = DecodedImages(target)
    if len(decoded) != len(dataset):
        raise ValueError(f"the decoded cache {target} holds {len(decoded)} images for {len(dataset)} samples: "
                         "delete that folder")
    return ImageFileDataset(dataset.samples, dataset.classes, dataset.transform, decoded=decoded)


def _build(dataset: ImageFileDataset, resize: Any, target: Path, num_workers: int) -> None:
    """Decode every file once into ``target`` (written under a temporary name, then renamed)."""
    tmp = target.with_name(f"{target.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    index = np.zeros((len(dataset), 3), dtype=np.int64)
    loader = DataLoader(_Decode([p for p, _ in dataset.samples], resize), batch_size=None, shuffle=False,
                        num_workers=num_workers, collate_fn=_identity)
    offset = 0
    with open(tmp / _PIXELS, "wb") as out:
        for i, pixels in enumerate(loader):
            out.write(np.ascontiguousarray(pixels).tobytes())
            index[i] = (offset, pixels.shape[0], pixels.shape[1])
            offset += pixels.size
    np.save(tmp / _INDEX, index)
    try:
        os.replace(tmp, target)
    except OSError:  # another process finished the same cache first
        shutil.rmtree(tmp, ignore_errors=True)
