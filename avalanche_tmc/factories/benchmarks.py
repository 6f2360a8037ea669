"""Data factories: Avalanche benchmarks built from data on this machine, never downloaded.

Each function returns an Avalanche benchmark (``train_stream``, ``test_stream``) and takes
keyword options only, so the command line can call it with ``--data-option KEY=VALUE``:

* :func:`split_mnist`, :func:`split_fmnist`, :func:`split_cifar10`, :func:`split_cifar100`:
  Avalanche's classic benchmarks (``avalanche.benchmarks.classic``) with their usual
  transforms, reading the files under ``dataset_root``; ``return_task_id=True`` gives the
  task-incremental version (each experience its task label).
* :func:`digits`: scikit-learn's digits (shipped with scikit-learn, so fully offline),
  class- or task-incremental, without the images :func:`~avalanche_tmc.factories.models.digits_cnn`
  is pre-trained on.

Avalanche's own ``get_*_dataset`` functions download a missing data set. These factories
look for the files first and raise :class:`DatasetNotFoundError` (a ``FileNotFoundError``)
saying where they looked and how to get the files; Avalanche is called only once the files
are there, so it never downloads.
"""

import gzip
import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple, Union

from ._checks import whole_number

if TYPE_CHECKING:  # for the annotations only: Avalanche and torch load when a factory is called
    from avalanche.benchmarks import NCScenario
    from avalanche.benchmarks.scenarios import CLScenario
    from avalanche.benchmarks.utils import TaskAwareClassificationDataset
    from torch import Tensor

__all__ = [
    "DatasetNotFoundError", "MNIST_FILES", "DEBIAN_FASHION_MNIST", "cache_dir",
    "split_mnist", "split_fmnist", "split_cifar10", "split_cifar100", "digits", "digits_splits",
]

PathLike = Union[str, "os.PathLike[str]"]

MNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
               "t10k-labels-idx1-ubyte")
"""The four files of MNIST and of Fashion-MNIST (each may also be gzipped, ``.gz``)."""

DEBIAN_FASHION_MNIST = "/usr/share/datasets/fashion-mnist"
"""Where Debian's ``dataset-fashion-mnist`` package puts the four gzipped files; looked at
when ``dataset_root`` is not given and Avalanche's default location has no copy."""


class DatasetNotFoundError(FileNotFoundError):
    """A data set's files are not where they were looked for; nothing is downloaded, and the
    message says where it looked and how to get the files. The one class for this error:
    these factories raise it, and so do the benchmark runner's loaders
    (``benchmarks.datasets``)."""


def cache_dir() -> Path:
    """Where the factories keep what they derive from local files (decompressed MNIST
    files): ``$AVALANCHE_TMC_CACHE``, else ``~/.cache/avalanche_tmc``."""
    return Path(os.environ.get("AVALANCHE_TMC_CACHE") or Path.home() / ".cache" / "avalanche_tmc")


def _avalanche_location(name: str) -> Path:
    from avalanche.benchmarks.datasets import default_dataset_location

    return Path(default_dataset_location(name))


# ---------------------------------------------------------------------------- MNIST-like files


def _find_mnist_files(root: Path, folder: str) -> Optional[Tuple[Path, List[Path]]]:
    """``(torchvision root, [])`` when ``root`` already has torchvision's layout
    (``root/<folder>/raw/<file>``); ``(root, files)`` when the four files (plain or
    ``.gz``) lie directly in ``root``; None otherwise."""
    raw = root / folder / "raw"
    if all((raw / name).is_file() for name in MNIST_FILES):
        return root, []
    flat = []
    for name in MNIST_FILES:
        found = next((root / n for n in (name, name + ".gz") if (root / n).is_file()), None)
        if found is None:
            return None
        flat.append(found)
    return root, flat


def _torchvision_layout(folder: str, files: List[Path]) -> Path:
    """A cache directory in torchvision's layout (``<cache>/<folder>/raw/<file>``, gzipped
    files decompressed once), made atomically from ``files``; its root."""
    key = hashlib.sha256("\n".join(str(f.resolve()) for f in files).encode()).hexdigest()[:16]
    root = cache_dir() / "datasets" / f"{folder}-{key}"
    raw = root / folder / "raw"
    if all((raw / name).is_file() for name in MNIST_FILES):
        return root
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".raw-", dir=root))
    try:
        for name, source in zip(MNIST_FILES, files):
            opener = gzip.open if source.suffix == ".gz" else open
            with opener(source, "rb") as src, open(tmp / name, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        (root / folder).mkdir(exist_ok=True)
        try:
            os.rename(tmp, raw)
        except OSError:  # another process made it first
            if not raw.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root


def _mnist_like_root(title: str, folder: str, avalanche_name: str, dataset_root: Optional[PathLike],
                     also: Sequence[str] = ()) -> str:
    candidates = [Path(dataset_root)] if dataset_root is not None else [_avalanche_location(avalanche_name),
                                                                          *map(Path, also)]
    for root in candidates:
        found = _find_mnist_files(root, folder)
        if found is not None:
            root, flat = found
            return str(_torchvision_layout(folder, flat) if flat else root)
    where = " or ".join(str(c) for c in candidates)
    debian = (f" On Debian/Ubuntu: `sudo apt-get install dataset-fashion-mnist` (files in {DEBIAN_FASHION_MNIST})."
              if folder == "FashionMNIST" else "")
    raise DatasetNotFoundError(
        f"{title} is not in {where}: put its four files ({', '.join(MNIST_FILES)}, plain or .gz) directly in a "
        f"directory, or in torchvision's layout <dir>/{folder}/raw/, and pass dataset_root=<dir> "
        f"(command line: --data-option dataset_root=<dir>).{debian} Nothing is downloaded at run time.")


def _cifar_root(title: str, tv_class: str, folder: str, avalanche_name: str,
                dataset_root: Optional[PathLike]) -> str:
    import torchvision.datasets

    candidates = [Path(dataset_root)] if dataset_root is not None else [_avalanche_location(avalanche_name)]
    if dataset_root is not None and Path(dataset_root).name == folder:  # the extracted folder itself
        candidates.insert(0, Path(dataset_root).parent)
    cls = getattr(torchvision.datasets, tv_class)
    for root in candidates:
        if (root / folder).is_dir():
            probe = cls.__new__(cls)
            probe.root = str(root)
            if probe._check_integrity():  # torchvision's own check (MD5 of every file)
                return str(root)
            raise DatasetNotFoundError(
                f"{title} in {root / folder} is incomplete or corrupted (torchvision's MD5 check failed): "
                f"extract {folder} again from the official archive. Nothing is downloaded at run time.")
    raise DatasetNotFoundError(
        f"{title} is not in {' or '.join(str(c) for c in candidates)}: extract the official python archive "
        f"so that <dir>/{folder}/ exists and pass dataset_root=<dir> (command line: --data-option "
        "dataset_root=<dir>). Nothing is downloaded at run time.")


# ---------------------------------------------------------------------------- classic benchmarks


def split_mnist(*, n_experiences: int = 5, return_task_id: bool = False, seed: int = 0,
                dataset_root: Optional[PathLike] = None, fixed_class_order: Optional[Sequence[int]] = None,
                **options: Any) -> "NCScenario":
    """Avalanche's ``SplitMNIST`` on local files (``dataset_root``: the four MNIST files,
    plain or ``.gz``, or torchvision's layout; default Avalanche's data folder).
    ``options`` go to ``SplitMNIST`` as they are (e.g. ``class_ids_from_zero_in_each_exp``)."""
    from avalanche.benchmarks.classic import SplitMNIST

    root = _mnist_like_root("MNIST", "MNIST", "mnist", dataset_root)
    return SplitMNIST(n_experiences, return_task_id=return_task_id, seed=seed, fixed_class_order=fixed_class_order,
                      dataset_root=root, **options)


def split_fmnist(*, n_experiences: int = 5, return_task_id: bool = False, seed: int = 0,
                 dataset_root: Optional[PathLike] = None, fixed_class_order: Optional[Sequence[int]] = None,
                 **options: Any) -> "NCScenario":
    """Avalanche's ``SplitFMNIST`` on local files (``dataset_root``: the four Fashion-MNIST
    files, plain or ``.gz``, or torchvision's layout; default Avalanche's data folder, then
    Debian's :data:`DEBIAN_FASHION_MNIST`)."""
    from avalanche.benchmarks.classic import SplitFMNIST

    root = _mnist_like_root("Fashion-MNIST", "FashionMNIST", "fashionmnist", dataset_root,
                            also=[DEBIAN_FASHION_MNIST])
    return SplitFMNIST(n_experiences, return_task_id=return_task_id, seed=seed, fixed_class_order=fixed_class_order,
                       dataset_root=root, **options)


def split_cifar10(*, n_experiences: int = 5, return_task_id: bool = False, seed: int = 0,
                  dataset_root: Optional[PathLike] = None, fixed_class_order: Optional[Sequence[int]] = None,
                  **options: Any) -> "NCScenario":
    """Avalanche's ``SplitCIFAR10`` on local files (``dataset_root``: the directory holding
    ``cifar-10-batches-py/``, or that folder itself)."""
    from avalanche.benchmarks.classic import SplitCIFAR10

    root = _cifar_root("CIFAR-10", "CIFAR10", "cifar-10-batches-py", "cifar10", dataset_root)
    return SplitCIFAR10(n_experiences, return_task_id=return_task_id, seed=seed,
                        fixed_class_order=fixed_class_order, dataset_root=root, **options)


def split_cifar100(*, n_experiences: int = 10, return_task_id: bool = False, seed: int = 0,
                   dataset_root: Optional[PathLike] = None, fixed_class_order: Optional[Sequence[int]] = None,
                   **options: Any) -> "NCScenario":
    """Avalanche's ``SplitCIFAR100`` on local files (``dataset_root``: the directory holding
    ``cifar-100-python/``, or that folder itself)."""
    from avalanche.benchmarks.classic import SplitCIFAR100

    root = _cifar_root("CIFAR-100", "CIFAR100", "cifar-100-python", "cifar100", dataset_root)
    return SplitCIFAR100(n_experiences, return_task_id=return_task_id, seed=seed,
                         fixed_class_order=fixed_class_order, dataset_root=root, **options)


# ---------------------------------------------------------------------------- scikit-learn digits


def digits_splits(split_seed: int = 0, pretrain_per_class: int = 40,
                  test_fraction: float = 0.3) -> Dict[str, Tuple["Tensor", "Tensor"]]:
    """scikit-learn's digits as ``{"pretrain", "train", "test"}`` -> ``(images, labels)``
    tensors, images ``(N, 1, 8, 8)`` in [-0.5, 0.5]: each class's images in a seeded order,
    the first ``pretrain_per_class`` for pre-training, ``test_fraction`` of the rest for test."""
    import torch

    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise ImportError("The digits factories need scikit-learn (an Avalanche dependency): "
                          "pip install scikit-learn") from None
    data = load_digits()
    x = torch.tensor(data.images, dtype=torch.float32).unsqueeze(1) / 16 - 0.5
    y = torch.tensor(data.target, dtype=torch.long)
    gen = torch.Generator().manual_seed(split_seed)
    parts = {"pretrain": [], "train": [], "test": []}
    for c in range(10):
        idx = torch.nonzero(y == c).flatten()
        idx = idx[torch.randperm(len(idx), generator=gen)]
        n_test = int(round(test_fraction * (len(idx) - pretrain_per_class)))
        parts["pretrain"].append(idx[:pretrain_per_class])
        parts["test"].append(idx[pretrain_per_class:pretrain_per_class + n_test])
        parts["train"].append(idx[pretrain_per_class + n_test:])
    return {k: (x[torch.cat(v)], y[torch.cat(v)]) for k, v in parts.items()}


def _classification_dataset(x: "Tensor", y: "Tensor") -> "TaskAwareClassificationDataset":
    from avalanche.benchmarks.utils import as_classification_dataset
    from torch.utils.data import TensorDataset

    dataset = TensorDataset(x, y)
    dataset.targets = y.tolist()  # Avalanche reads the class labels from here
    return as_classification_dataset(dataset)


def digits(*, n_experiences: int = 5, return_task_id: bool = False, seed: int = 0,
           split_seed: int = 0) -> "CLScenario":
    """scikit-learn's digits (8x8 images, 10 classes) as a class-incremental benchmark of
    ``n_experiences`` experiences (``return_task_id``: task-incremental), classes ordered by
    ``seed``. Offline: scikit-learn ships the images. The 400 images
    :func:`~avalanche_tmc.factories.models.digits_cnn` is pre-trained on are left out.

    Built as Avalanche 0.6's ``class_incremental_benchmark`` builds its benchmarks
    (``benchmark_from_datasets`` of datasets without task labels), not with the deprecated
    ``nc_benchmark``: ``task_incremental_benchmark(digits())`` gives the task-incremental
    version (what ``return_task_id=True`` returns), and ``with_task_labels`` reads the task
    labels of that one (Avalanche's ``with_task_labels`` needs datasets that carry task
    labels, ``task_incremental_benchmark`` datasets that do not). The experiences are those
    ``nc_benchmark`` gave (the same class order for a seed, the same samples in the same
    order; each experience keeps its class lists). When 10 does not divide by
    ``n_experiences`` the first experiences take one class more."""
    import torch
    from avalanche.benchmarks.scenarios import benchmark_from_datasets, task_incremental_benchmark

    n_experiences = whole_number(n_experiences, "n_experiences")
    seed = whole_number(seed, "seed", minimum=0)
    if not 1 <= n_experiences <= 10:
        raise ValueError(f"digits has 10 classes: n_experiences must be 1 to 10, got {n_experiences}.")
    parts = digits_splits(split_seed)
    order = torch.randperm(10, generator=torch.Generator().manual_seed(seed)).tolist()  # nc_benchmark's order
    base, extra = divmod(10, n_experiences)
    bounds = [0]
    for i in range(n_experiences):
        bounds.append(bounds[-1] + base + (1 if i < extra else 0))
    groups = [list(set(order[start:end])) for start, end in zip(bounds[:-1], bounds[1:])]  # nc_benchmark's order

    def stream(x: "Tensor", y: "Tensor", group: str) -> List[Any]:
        return [_labelled_dataset(x[keep], y[keep]).with_transforms(group) for keep in
                (torch.cat([torch.nonzero(y == c).flatten() for c in classes]) for classes in groups)]

    bm = benchmark_from_datasets(train=stream(*parts["train"], "train"), test=stream(*parts["test"], "eval"))
    if return_task_id:
        bm = task_incremental_benchmark(bm)
    for exps in bm.streams.values():  # nc_benchmark's class lists, for code that reads them
        seen: List[int] = []
        for i, (exp, classes) in enumerate(zip(exps, groups)):
            exp.classes_in_this_experience, exp.previous_classes = list(classes), list(seen)
            seen = seen + list(classes)
            exp.classes_seen_so_far = list(seen)
            exp.future_classes = [c for later in groups[i + 1:] for c in later]
    return bm


def _labelled_dataset(x: "Tensor", y: "Tensor") -> Any:
    """``(x, y)`` as an Avalanche dataset with integer targets and task label 0 on every
    sample (what ``with_task_labels`` and ``task_incremental_benchmark`` read)."""
    from avalanche.benchmarks.utils import DataAttribute, DefaultTransformGroups
    from avalanche.benchmarks.utils.classification_dataset import ClassificationDataset
    from torch.utils.data import TensorDataset

    return ClassificationDataset(
        [TensorDataset(x, y)], data_attributes=[DataAttribute(y.tolist(), "targets", use_in_getitem=False)],
        frozen_transform_groups=DefaultTransformGroups((None, int)))
