"""What every loader shares: input normalisation, the two dataset classes (in-memory
``uint8`` tensors and lazily read image files), seeded stratified splits, and the
dataset-not-found error."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset

__all__ = [
    "IMAGENET_MEAN", "IMAGENET_STD", "NORMALIZATIONS", "Normalization", "DatasetNotFoundError", "mean_std",
    "ImageTensorDataset", "ImageFileDataset", "make_transform", "split_by_domain", "stratified_split",
    "stratified_subsample", "subsample",
]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
NORMALIZATIONS: Dict[str, Optional[Tuple[Tuple[float, ...], Tuple[float, ...]]]] = {
    "imagenet": (IMAGENET_MEAN, IMAGENET_STD),
    # TF-ported weights (e.g. tf_efficientnet_lite0) were trained on [-1, 1] inputs.
    "inception": ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),
    "none": None,
}
Normalization = Union[str, Tuple[Sequence[float], Sequence[float]], None]


class DatasetNotFoundError(FileNotFoundError):
    """The files of a dataset are not where they were looked for (message: how to get them)."""



def mean_std(normalization: Normalization) -> Optional[Tuple[Tensor, Tensor]]:
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
        self._mean_std = mean_std(normalization)
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
    stats = mean_std(normalization)
    if stats is not None:
        steps.append(transforms.Normalize(stats[0].flatten().tolist(), stats[1].flatten().tolist()))
    return transforms.Compose(steps)


def split_by_domain(dataset: ImageTensorDataset) -> List[ImageTensorDataset]:
    """One dataset per domain (e.g. per emoji style), in ``domain_names`` order."""
    if dataset.domains is None or dataset.domain_names is None:
        raise ValueError("this dataset has no domains")
    return [dataset.subset(torch.nonzero(dataset.domains == d).flatten()) for d in range(len(dataset.domain_names))]



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


def subsample(dataset: ImageTensorDataset, per_class: Optional[int], seed: int) -> ImageTensorDataset:
    """``dataset`` itself, or its seeded stratified subsample of ``per_class`` per class."""
    if per_class is None:
        return dataset
    return dataset.subset(stratified_subsample(dataset.targets.numpy(), per_class, seed))
