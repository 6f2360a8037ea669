"""The model part of the training-free heads: frozen features (:func:`penultimate`,
:class:`LayerFeatures`) and :class:`TrainingFreeClassifier`, a head solved in closed form from
sufficient statistics (:mod:`avalanche_tmc.composition.statistics`). The continual strategy that
feeds it, one experience's statistics at a time, is
:class:`~avalanche_tmc.training.strategies.training_free.TrainingFreeStrategy`.
"""

import copy
from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..composition.statistics import HeadStats, RandomReLUFeatures, class_means, ridge_head
from ..tangent import find_head

__all__ = ["HEADS", "MAX_PROJECTION_DIM", "check_num_classes", "penultimate", "LayerFeatures",
           "TrainingFreeClassifier"]

HEADS = ("ridge", "ncm")
MAX_PROJECTION_DIM = 16_384
"""The widest random projection (its statistics are M x M: 2 GiB in float64 at 16384; the
command line's ``avalanche_tmc.cli.argtypes.MAX_PROJECTION_DIM`` is the same)."""


def check_num_classes(num_classes: Any) -> int:
    """``num_classes`` if it is a positive int (a head's output size), else ``ValueError``
    (0 once became the network head's size, a negative count failed deep inside training)."""
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
        raise ValueError(f"num_classes must be a positive int (the head's outputs), got {num_classes!r}.")
    return num_classes


def penultimate(model: nn.Module, head: Optional[str] = None) -> nn.Module:
    """A frozen copy of ``model`` whose classification layer is replaced by the identity,
    so that it outputs the head's input features."""
    features = copy.deepcopy(model)
    name = head if head is not None else find_head(features)
    parent_name, _, child = name.rpartition(".")
    setattr(features.get_submodule(parent_name) if parent_name else features, child, nn.Identity())
    return features.eval().requires_grad_(False)


class _Reached(Exception):
    """Raised by the hook of :class:`LayerFeatures` to stop the forward pass early."""


class LayerFeatures(nn.Module):
    """A frozen copy of ``model`` that outputs the output of module ``layer``, averaged
    over every dimension after the channel one (global average pooling for a conv map, a
    token mean for a ``(batch, tokens, dim)`` output), as ``(batch, channels)`` features.

    What it is for: the training-free heads on an earlier layer than the head's input. On
    small images a network's last activations can be mostly zero (e.g. ReLU6 after
    ImageNet BatchNorm statistics), while a block's pooled output still separates the
    classes. The forward pass stops at ``layer``.
    """

    def __init__(self, model: nn.Module, layer: str):
        super().__init__()
        modules = dict(model.named_modules())
        if layer not in modules or not layer:
            names = [n for n, m in model.named_modules() if n and next(m.parameters(), None) is not None]
            raise ValueError(f"LayerFeatures: the model has no module {layer!r}; e.g. one of {names[-8:]}.")
        self.model = copy.deepcopy(model).eval().requires_grad_(False)
        self.layer = layer
        self.model.get_submodule(layer).register_forward_hook(self._stop)

    @staticmethod
    def _stop(module: nn.Module, inputs: Any, output: Any) -> None:
        raise _Reached(output)

    def forward(self, x: Tensor) -> Tensor:
        """The pooled ``(batch, channels)`` output of :attr:`layer` for ``x``."""
        try:
            self.model(x)
        except _Reached as reached:
            out = reached.args[0]
        else:  # the hook never fired: the layer is not on the forward path
            raise RuntimeError(f"LayerFeatures: module {self.layer!r} was not called by the model's forward.")
        if not isinstance(out, Tensor):
            raise TypeError(f"LayerFeatures: module {self.layer!r} returns {type(out).__name__}, not a tensor.")
        if out.dim() == 4:  # (batch, channels, height, width)
            return out.mean((2, 3))
        if out.dim() == 3:  # (batch, tokens, dim)
            return out.mean(1)
        return out.flatten(1)


class TrainingFreeClassifier(nn.Module):
    """Frozen features -> optional random ReLU projection -> a head solved in closed form.

    :param features: a network producing (batch, D) features (e.g. :func:`penultimate`).
    :param num_classes: size of the output.
    :param projection_dim: if given, features go through a fixed seeded
        :class:`RandomReLUFeatures` of this width first (RanPAC style).
    :param head: ``"ridge"`` or ``"ncm"``.
    """

    def __init__(self, features: nn.Module, num_classes: int, *, projection_dim: Optional[int] = None,
                 head: str = "ridge", seed: int = 0):
        super().__init__()
        if head not in HEADS:
            raise ValueError(f"head must be one of {HEADS}, got {head!r}.")
        check_num_classes(num_classes)
        if projection_dim is not None and (isinstance(projection_dim, bool) or not isinstance(projection_dim, int)
                                           or not 1 <= projection_dim <= MAX_PROJECTION_DIM):
            raise ValueError(f"projection_dim must be an int in 1..{MAX_PROJECTION_DIM} (its statistics are M x M), "
                             f"got {projection_dim!r}.")
        self.features = features.eval().requires_grad_(False)
        self.num_classes = num_classes
        self.head = head
        self.projection_dim = projection_dim
        self.seed = seed
        self.projection: Optional[RandomReLUFeatures] = None
        self.register_buffer("weight", torch.zeros(0))
        self.register_buffer("means", torch.zeros(0))
        self.ridge_lambda: Optional[float] = None

    def train(self, mode: bool = True) -> "TrainingFreeClassifier":
        """Set the wrapper's flag only: the feature network stays in eval mode."""
        self.training = mode
        self.features.eval()
        return self

    def embed(self, x: Tensor) -> Tensor:
        """The features the head sees (projected when asked; a constant 1 appended for
        the ridge head's bias)."""
        with torch.no_grad():
            phi = self.features(x).flatten(1)
            if self.projection_dim is not None:
                if self.projection is None:
                    self.projection = RandomReLUFeatures(phi.shape[1], self.projection_dim, self.seed).to(phi.device)
                phi = self.projection(phi)
            if self.head == "ridge":
                phi = torch.cat([phi, torch.ones_like(phi[:, :1])], dim=1)
        return phi

    def fit(self, stats: HeadStats, ridge_lambda: Optional[float] = None) -> None:
        """Solve the head from (summed) statistics, wherever they live (e.g. read from a
        file); the head lands on this module's device."""
        device = self.weight.device  # a buffer: it follows the module's .to()
        if self.head == "ridge":
            weight, self.ridge_lambda = ridge_head(stats, ridge_lambda)
            self.weight = weight.to(device=device, dtype=torch.float32)
        else:
            means = class_means(stats)
            means[stats["class_count"] == 0] = float("nan")  # never seen: never predicted
            self.means = means.to(device=device, dtype=torch.float32)

    def scores(self, phi: Tensor) -> Tensor:
        """Class scores of embedded features."""
        if self.head == "ridge":
            if self.weight.numel() == 0:
                return phi.new_zeros(len(phi), self.num_classes)
            return phi @ self.weight
        if self.means.numel() == 0:
            return phi.new_zeros(len(phi), self.num_classes)
        cosine = F.normalize(phi, dim=1) @ F.normalize(self.means.nan_to_num(0.0), dim=1).T
        return cosine.masked_fill(torch.isnan(self.means[:, 0]).unsqueeze(0), -2.0)  # below any cosine

    def forward(self, x: Tensor) -> Tensor:
        """Class scores of ``x``: :meth:`scores` of :meth:`embed`."""
        return self.scores(self.embed(x))
