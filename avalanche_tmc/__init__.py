"""avalanche-tmc: Tangent Model Composition (TMC) for Avalanche continual learning."""

import avalanche_tmc_torchvision_fallback  # noqa: F401  (first: lets torchvision import on a CPU-only torch)

from .adaptation import Adaptation, AdaptThenComposeStrategy, adapt_features, fine_tune, select_adaptation
from .analytic import AnalyticClassifier, AnalyticHeadStrategy, LayerFeatures, penultimate
from .batchnorm import reestimate_batchnorm
from .component_files import (
    Component,
    ComponentFileError,
    IncompatibleComponentsError,
    compose_components,
    composed_delta,
    forget_component,
    load_component,
    load_components,
    save_component,
    statistics_component,
    strategy_components,
    tangent_component,
)
from .composition import (
    DeltaComposition,
    add_deltas,
    check_compatible,
    compose,
    scale_delta,
    subtract_deltas,
    weighted_sum,
    zeros_like_delta,
)
from .distributed import ParallelReport, ParallelTrainingError, init_parallel, shutdown_parallel, train_parallel
from .ensemble import class_mask, log_softmax_ensemble, logit_ensemble, mask_logits
from .fast_tangent import TracingError
from .losses import RescaledSquareLoss
from .plugin import CompositionPlugin, DivergenceError, TangentPlugin, TaskMaskPlugin
from .statistics import (
    HeadStats,
    RandomReLUFeatures,
    StatisticsComposition,
    gcv_ridge_lambda,
    head_statistics,
    ridge_head,
)
from .strategies import TMCSeqStrategy, TMCStrategy, TMEStrategy
from .tangent import Delta, TangentModel, find_head, replace_head

__version__ = "0.1.0"

__all__ = [
    "TangentModel",
    "TracingError",
    "reestimate_batchnorm",
    "Delta",
    "find_head",
    "replace_head",
    "RescaledSquareLoss",
    "DeltaComposition",
    "add_deltas",
    "subtract_deltas",
    "scale_delta",
    "weighted_sum",
    "compose",
    "check_compatible",
    "zeros_like_delta",
    "class_mask",
    "mask_logits",
    "logit_ensemble",
    "log_softmax_ensemble",
    "TangentPlugin",
    "DivergenceError",
    "TaskMaskPlugin",
    "CompositionPlugin",
    "TMCStrategy",
    "TMEStrategy",
    "TMCSeqStrategy",
    "HeadStats",
    "head_statistics",
    "StatisticsComposition",
    "ridge_head",
    "gcv_ridge_lambda",
    "RandomReLUFeatures",
    "AnalyticClassifier",
    "AnalyticHeadStrategy",
    "penultimate",
    "LayerFeatures",
    "Adaptation",
    "AdaptThenComposeStrategy",
    "adapt_features",
    "fine_tune",
    "select_adaptation",
    "train_parallel",
    "init_parallel",
    "shutdown_parallel",
    "ParallelTrainingError",
    "ParallelReport",
    "Component",
    "ComponentFileError",
    "IncompatibleComponentsError",
    "tangent_component",
    "statistics_component",
    "strategy_components",
    "save_component",
    "load_component",
    "load_components",
    "compose_components",
    "forget_component",
    "composed_delta",
]
