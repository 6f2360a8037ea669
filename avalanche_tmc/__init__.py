"""avalanche-tmc: Tangent Model Composition (TMC) for Avalanche continual learning."""

import avalanche_tmc_torchvision_fallback as _tv_fallback

_tv_fallback.install()  # before anything can import torchvision (see that module)

from .composition import (  # noqa: E402
    DeltaComposition,
    add_deltas,
    check_compatible,
    compose,
    scale_delta,
    subtract_deltas,
    weighted_sum,
    zeros_like_delta,
)
from .ensemble import class_mask, log_softmax_ensemble, logit_ensemble, mask_logits  # noqa: E402
from .losses import RescaledSquareLoss  # noqa: E402
from .plugin import CompositionPlugin, DivergenceError, TangentPlugin, TaskMaskPlugin  # noqa: E402
from .strategies import TMCSeqStrategy, TMCStrategy, TMEStrategy  # noqa: E402
from .tangent import Delta, TangentModel, find_head, replace_head  # noqa: E402
from .fast_tangent import TracingError  # noqa: E402
from .batchnorm import reestimate_batchnorm  # noqa: E402
from .statistics import (  # noqa: E402
    HeadStats,
    RandomReLUFeatures,
    StatisticsComposition,
    gcv_ridge_lambda,
    head_statistics,
    ridge_head,
)
from .analytic import AnalyticClassifier, AnalyticHeadStrategy, penultimate  # noqa: E402

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
]
