"""The torch-only math of composition (this path was the module of delta arithmetic, whose
names it still exports):  what every strategy, file format and process
exchange builds on, with no Avalanche, file or process code (a test checks the imports).

* :mod:`.additive`: :class:`AdditiveComposition`, one weighted sum of per-experience
  contributions that adds, forgets exactly, merges, snapshots and restores;
* :mod:`.deltas`: arithmetic on tangent components (``δ = Σ w_i δ_i / Σ w_i``, TMC);
* :mod:`.statistics`: sufficient statistics of the training-free heads (ridge, NCM, RanPAC);
* :mod:`.ensemble`: logit and softmax ensembles (TME, Ens-L, Ens-SM) and task masks;
* :mod:`.batchnorm`: BatchNorm statistics re-estimated on the data.
"""

from .additive import AdditiveComposition, tensors_sha256
from .batchnorm import reestimate_batchnorm
from .deltas import (
    Delta,
    DeltaComposition,
    add_deltas,
    check_compatible,
    check_finite,
    compose,
    non_finite_names,
    scale_delta,
    subtract_deltas,
    weighted_sum,
    zeros_like_delta,
)
from .ensemble import class_mask, log_softmax_ensemble, logit_ensemble, mask_logits
from .statistics import (
    HeadStats,
    RandomReLUFeatures,
    StatisticsComposition,
    gcv_ridge_lambda,
    head_statistics,
    ridge_head,
)

__all__ = [
    "AdditiveComposition", "tensors_sha256", "reestimate_batchnorm", "Delta", "DeltaComposition", "add_deltas",
    "check_compatible", "check_finite", "non_finite_names", "compose", "scale_delta", "subtract_deltas",
    "weighted_sum", "zeros_like_delta", "class_mask", "log_softmax_ensemble", "logit_ensemble", "mask_logits",
    "HeadStats", "RandomReLUFeatures", "StatisticsComposition",
    "gcv_ridge_lambda", "head_statistics", "ridge_head",
]
