"""The methods of the comparison: their hyper-parameters (:mod:`.train_config`), the
registry (:mod:`.registry`: rows, groups, tuning units), the registered groups
(:mod:`.catalogue`, imported here so that every row is registered once this package is),
what their strategies share (:mod:`.builders`) and how the runner builds one
(:mod:`.strategy`). Importing this package imports no Avalanche: of ``baselines`` only
``baselines.builtin``, whose entries (each baseline's table row beside its builder) are
light until a strategy is built."""

from benchmarks.methods import catalogue  # noqa: F401  (registers every group)
from benchmarks.methods.catalogue import group_named, groups_for
from benchmarks.methods.registry import (
    FAMILIES,
    TUNINGS,
    UNTUNED_LR_CAPS,
    MethodGroup,
    Row,
    config_for,
    joint_methods,
    method_family,
    method_groups,
    method_names,
    method_row,
    method_unit,
    register_method,
    representatives,
    tangent_units,
    tuning_unit,
)
from benchmarks.methods.train_config import TrainConfig

__all__ = [
    "Row", "MethodGroup", "TrainConfig", "register_method", "method_groups", "method_names", "method_row",
    "group_named", "joint_methods", "method_family", "method_unit", "groups_for", "FAMILIES", "TUNINGS",
    "representatives", "tangent_units", "tuning_unit", "config_for", "UNTUNED_LR_CAPS",
]
