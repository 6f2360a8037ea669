"""The Avalanche plugins of this library, one per file (as Avalanche's ``training/plugins``)."""

from .autocast import AutocastPlugin
from .composition import CompositionPlugin
from .delta_decay import DECAY_KINDS, NORM_DECAY_EPSILON, DeltaDecayPlugin
from .divergence import LOSS_INCREASE_FACTOR, DivergenceGuardPlugin, LossIncreaseWarning
from .progress import ProgressPlugin
from .tangent import TangentPlugin
from .task_mask import TaskMaskPlugin

__all__ = ["TaskMaskPlugin", "CompositionPlugin", "TangentPlugin", "DivergenceGuardPlugin", "AutocastPlugin",
           "DeltaDecayPlugin", "DECAY_KINDS", "NORM_DECAY_EPSILON", "LossIncreaseWarning", "LOSS_INCREASE_FACTOR",
           "ProgressPlugin"]
