"""avalanche-tmc: Tangent Model Composition (TMC) for Avalanche continual learning.

The names below are imported on first use (PEP 562), so ``import avalanche_tmc`` and the
``avalanche-tmc`` command line start in a fraction of a second: torch and Avalanche load
when a name that needs them is first touched. Importing the package registers nothing and
adds one warning filter (below), for a third-party message only.
"""

from . import _safe_path

if _safe_path.running_as_main(__name__):  # `python -m avalanche_tmc[.cli]`: before this package imports anything
    _safe_path.drop_working_directory()

import importlib  # noqa: E402
import os  # noqa: E402
import warnings  # noqa: E402
from typing import TYPE_CHECKING, Dict  # noqa: E402

import avalanche_tmc_torchvision_fallback  # noqa: F401  (first: lets torchvision import on a CPU-only torch)

# The one thing importing the package does beyond defining names: Avalanche imports qpsolvers
# (for its GEM plugin), which warns when no QP solver is installed; nothing here uses one.
# That message, from that package, is hidden, so that importing the library prints no
# third-party warning (tests/test_clean_install.py); no other filter, nothing registered.
warnings.filterwarnings("ignore", message="no QP solver found", category=UserWarning, module="qpsolvers")

if TYPE_CHECKING:  # what the names are; at run time __getattr__ imports them on first use
    from .arithmetic import ArithmeticNotPinnedError, CpuArithmetic, cpu_arithmetic, pin_cpu_arithmetic
    from .composition.additive import AdditiveComposition
    from .composition.batchnorm import reestimate_batchnorm
    from .composition.deltas import (
        DeltaComposition,
        add_deltas,
        check_compatible,
        compose,
        scale_delta,
        subtract_deltas,
        weighted_sum,
        zeros_like_delta,
    )
    from .composition.ensemble import class_mask, log_softmax_ensemble, logit_ensemble, mask_logits
    from .composition.statistics import (
        HeadStats,
        RandomReLUFeatures,
        StatisticsComposition,
        gcv_ridge_lambda,
        head_statistics,
        ridge_head,
    )
    from .distributed import ParallelReport, train_parallel
    from .distributed_setup import ParallelSetupError, ParallelTrainingError, init_parallel, shutdown_parallel
    from .factories.benchmarks import DatasetNotFoundError
    from .factories.frozen_features import (
        FeaturesTooLargeError,
        RandomTransformsError,
        feature_bytes,
        frozen_trunk_benchmark,
    )
    from .factories.models import WeightsNotFoundError
    from .files import (
        Component,
        ComponentExistsError,
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
    from .files.checkpoint import CheckpointError, maybe_load_checkpoint, save_checkpoint
    from .files.learned import load_learned, save_learned
    from .models.frozen_trunk import ChainSegment, NotAChainError, split_network, trunk_features
    from .models.training_free import LayerFeatures, TrainingFreeClassifier, penultimate
    from .tangent import Delta, TangentModel, TracingError, find_head, replace_head
    from .training.adaptation import Adaptation, adapt_features, fine_tune, select_adaptation
    from .training.divergence import DivergenceError
    from .training.losses import RescaledSquareLoss
    from .training.metrics import loss_metrics, loss_name
    from .training.plugins.autocast import AutocastPlugin
    from .training.plugins.composition import CompositionPlugin
    from .training.plugins.delta_decay import DECAY_KINDS, NORM_DECAY_EPSILON, DeltaDecayPlugin
    from .training.plugins.divergence import DivergenceGuardPlugin, LossIncreaseWarning
    from .training.plugins.progress import ProgressPlugin
    from .training.plugins.tangent import TangentPlugin
    from .training.plugins.task_mask import TaskMaskPlugin
    from .training.protocols import ComposableLearner
    from .training.registry import (
        StrategySpec,
        create_strategy,
        list_strategies,
        register_strategy,
        strategy_spec,
    )
    from .training.seeding import experience_seed, seed_experience
    from .training.strategies.adapt_then_compose import AdaptThenComposeStrategy
    from .training.strategies.tangent import DEFAULT_LR, TMCSeqStrategy, TMCStrategy, TMEStrategy
    from .training.strategies.training_free import TrainingFreeStrategy
    from .training.summary import StreamAccuracies, accuracy_matrix, plot_stream, summary_table

def _lazy_names() -> Dict[str, str]:
    """Public name -> the submodule defining it, read from the ``TYPE_CHECKING`` imports above
    (one list of imports, for type checkers, the API reference and the lazy loader alike; a
    runtime copy would be a third list beside them and ``__all__``, which the API reference
    and type checkers read statically). Reads this file once, on the first attribute access;
    changes nothing in the process."""
    import ast  # here, not at the top: nothing beyond the start-up's modules is imported before `-m` drops the cwd

    with open(os.path.join(os.path.dirname(__file__), "__init__.py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    guard = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", None) == "TYPE_CHECKING")
    return {alias.asname or alias.name: "." * node.level + (node.module or "")
            for node in guard.body if isinstance(node, ast.ImportFrom) for alias in node.names}


_LAZY: Dict[str, str] = {}


def __getattr__(name: str):
    if not _LAZY:
        _LAZY.update(_lazy_names())
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))


__version__ = "0.1.0"

__all__ = [
    "split_network",
    "frozen_trunk_benchmark",
    "feature_bytes",
    "trunk_features",
    "ChainSegment",
    "NotAChainError",
    "RandomTransformsError",
    "FeaturesTooLargeError",
    "pin_cpu_arithmetic",
    "cpu_arithmetic",
    "CpuArithmetic",
    "ArithmeticNotPinnedError",
    "TangentModel",
    "TracingError",
    "reestimate_batchnorm",
    "Delta",
    "find_head",
    "replace_head",
    "RescaledSquareLoss",
    "experience_seed",
    "register_strategy",
    "create_strategy",
    "list_strategies",
    "strategy_spec",
    "StrategySpec",
    "seed_experience",
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
    "DivergenceGuardPlugin",
    "LossIncreaseWarning",
    "TaskMaskPlugin",
    "CompositionPlugin",
    "AutocastPlugin",
    "DeltaDecayPlugin",
    "ProgressPlugin",
    "DECAY_KINDS",
    "NORM_DECAY_EPSILON",
    "TMCStrategy",
    "TMEStrategy",
    "TMCSeqStrategy",
    "HeadStats",
    "head_statistics",
    "StatisticsComposition",
    "ridge_head",
    "gcv_ridge_lambda",
    "RandomReLUFeatures",
    "TrainingFreeClassifier",
    "TrainingFreeStrategy",
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
    "save_checkpoint",
    "maybe_load_checkpoint",
    "CheckpointError",
    "save_learned",
    "load_learned",
    "AdditiveComposition",
    "ComposableLearner",
    "ComponentExistsError",
    "ParallelSetupError",
    "DEFAULT_LR",
    "loss_name",
    "loss_metrics",
    "summary_table",
    "plot_stream",
    "accuracy_matrix",
    "StreamAccuracies",
    "DatasetNotFoundError",
    "WeightsNotFoundError",
]
