"""What every loader shares: input normalisation, the two dataset classes (in-memory
``uint8`` tensors and lazily read image files), seeded stratified splits, and the
dataset-not-found error (the library's :class:`avalanche_tmc.factories.benchmarks.DatasetNotFoundError`,
re-exported: one class for the library and the runner)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset

from avalanche_tmc.factories.benchmarks import DatasetNotFoundError  # the library's class, re-exported
from avalanche_tmc.factories.image_folder import TooFewImagesError, rgb_image, stratified_split  # likewise
from benchmarks.datasets.names import safe_name

__all__ = [
    "IMAGENET_MEAN", "IMAGENET_STD", "NORMALIZATIONS", "Normalization", "DatasetNotFoundError", "TooFewImagesError",
    "CorruptImageError",
    "mean_std", "ImageTensorDataset", "ImageFileDataset", "TRANSFORM_RECIPES", "make_transform", "make_transforms",
    "resize_size", "stratified_split", "stratified_subsample", "subsample",
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


class CorruptImageError(ValueError):
    """An image file of a folder dataset that cannot be decoded (truncated, not an image);
    the message names the file and says to replace or remove it."""


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
    """Images read lazily from disk with PIL; ``dataset[i]`` is ``(transform(img), target)``.

    The transform runs at every ``__getitem__`` (random augmentation stays random: nothing
    transformed is cached). ``decoded`` (optional) serves image ``i`` as an already decoded
    ``uint8`` array ``(H, W, 3)`` instead of reading ``samples[i]`` from disk, e.g. a
    :class:`benchmarks.datasets.loading.DecodedImages` cache of the transform's first ``Resize``;
    it must be picklable, like the rest of the dataset, for DataLoader workers.
    """

    def __init__(
        self,
        samples: Sequence[Tuple[Union[str, Path], int]],
        classes: Sequence[str],
        transform: Callable,
        decoded: Optional[Sequence[np.ndarray]] = None,
    ) -> None:
        self.samples = [(str(path), int(target)) for path, target in samples]
        self.targets = [target for _, target in self.samples]
        self.classes = list(classes)
        self.transform = transform
        if decoded is not None and len(decoded) != len(self.samples):
            raise ValueError(f"decoded holds {len(decoded)} images for {len(self.samples)} samples")
        self.decoded = decoded

    def __len__(self) -> int:
        return len(self.samples)

    def load_image(self, index: int):  # -> PIL.Image.Image
        """Sample ``index`` as an RGB PIL image, before the transform."""
        from PIL import Image

        if self.decoded is not None:
            return Image.fromarray(np.ascontiguousarray(self.decoded[index]))
        path = self.samples[index][0]
        try:
            with Image.open(path) as img:
                return rgb_image(img)  # (a 16-bit image scaled, not clipped to white)
        except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as error:  # PIL's decoding errors
            raise CorruptImageError(f"{safe_name(path)}: not a readable image ({type(error).__name__}: {error}); "
                                    "replace the file with a good copy or remove it, then run again.") from None

    def __getitem__(self, index: int) -> Tuple[Tensor, int]:
        return self.transform(self.load_image(index)), self.samples[index][1]


TRANSFORM_RECIPES = ("square", "authors")
"""Names :func:`make_transforms` knows: ``"square"`` (one ``Resize((s, s))``, no
augmentation, train and test alike: the offline datasets' default) and ``"authors"`` (the
TMC authors' ImageNet recipe: train ``Resize(r)``, ``RandomCrop(s)``,
``RandomHorizontalFlip()``; test ``Resize(r)``, ``CenterCrop(s)``; ``r = round(s·256/224)``)."""


def resize_size(image_size: int) -> int:
    """The shorter side the ``"authors"`` recipe resizes to before cropping ``image_size``:
    ``round(image_size * 256 / 224)`` (256 for 224), as ``int(round(...))`` in the authors'
    ``datasets/datasets.py``."""
    return int(round(image_size * 256 / 224))


def _to_tensor_steps(normalization: Normalization) -> List[Callable]:
    from torchvision import transforms

    steps: List[Callable] = [transforms.ToTensor()]
    stats = mean_std(normalization)
    if stats is not None:
        steps.append(transforms.Normalize(stats[0].flatten().tolist(), stats[1].flatten().tolist()))
    return steps


def make_transform(image_size: int, normalization: Normalization = "imagenet") -> Callable:
    """torchvision transform: resize to ``image_size`` square, to tensor, normalise."""
    from torchvision import transforms

    return transforms.Compose([transforms.Resize((image_size, image_size)), *_to_tensor_steps(normalization)])


def make_transforms(
    image_size: int, normalization: Normalization = "imagenet", recipe: str = "square"
) -> Tuple[Callable, Callable]:
    """``(train_transform, eval_transform)`` of a recipe in :data:`TRANSFORM_RECIPES`.

    ``"square"``: :func:`make_transform` for both (the same object). ``"authors"``: the
    training transform draws a new crop position and flip at every call
    (``Resize(r)``, ``RandomCrop(image_size)``, ``RandomHorizontalFlip()``), the evaluation
    one is deterministic (``Resize(r)``, ``CenterCrop(image_size)``); both then ToTensor
    and normalise; ``r`` = :func:`resize_size`. Both start with their ``Resize``, which
    :class:`benchmarks.datasets.loading.DecodedImages` can do once and keep.
    """
    if recipe not in TRANSFORM_RECIPES:
        raise ValueError(f"transforms={recipe!r}: use one of {', '.join(map(repr, TRANSFORM_RECIPES))}")
    if recipe == "square":
        transform = make_transform(image_size, normalization)
        return transform, transform
    from torchvision import transforms

    resize = resize_size(image_size)
    train = transforms.Compose([
        transforms.Resize(resize), transforms.RandomCrop(image_size), transforms.RandomHorizontalFlip(),
        *_to_tensor_steps(normalization),
    ])
    evaluation = transforms.Compose([
        transforms.Resize(resize), transforms.CenterCrop(image_size), *_to_tensor_steps(normalization),
    ])
    return train, evaluation


def stratified_subsample(targets: Sequence[int], per_class: int, seed: int = 0) -> np.ndarray:
    """Sorted indices of ``per_class`` seeded random samples of each class (all if fewer)."""
    train, _ = stratified_split(targets, train_per_class=per_class, seed=seed)
    return train


def subsample(dataset: ImageTensorDataset, per_class: Optional[int], seed: int) -> ImageTensorDataset:
    """``dataset`` itself, or its seeded stratified subsample of ``per_class`` per class."""
    if per_class is None:
        return dataset
    return dataset.subset(stratified_subsample(dataset.targets.numpy(), per_class, seed))
