"""The old module path ``avalanche_tmc.fast_tangent`` keeps working for one release, with a
DeprecationWarning naming the new path; ``avalanche_tmc.tangent`` (now a package) keeps
every name it had."""

import importlib

import pytest

import avalanche_tmc.tangent as tangent
from avalanche_tmc import _compat
from avalanche_tmc.tangent import plan, rules, trace, tree


@pytest.mark.parametrize("name, new", [
    ("TracingError", trace), ("TangentPlan", plan), ("build_plan", plan), ("tree_flatten", tree),
    ("tree_unflatten", tree), ("bilinear_rule", rules.linear), ("batchnorm_rule", rules.normalization),
    ("conv_batchnorm_rule", rules.normalization), ("fold_batchnorm_into_tangent", rules.normalization),
    ("FOLD_MAX_WEIGHT_RATIO", rules.normalization), ("layer_norm_rule", rules.normalization),
    ("attention_rule", rules.attention),
])
def test_fast_tangent_names_resolve_to_their_new_home_with_a_warning(name, new):
    old = importlib.import_module("avalanche_tmc.fast_tangent")
    moved = rf"avalanche_tmc\.fast_tangent\.{name} moved to avalanche_tmc\.tangent"
    with pytest.warns(DeprecationWarning, match=moved):
        value = getattr(old, name)
    assert value is getattr(new, name)


def test_from_import_of_the_old_path_warns_and_gives_the_same_class():
    with pytest.warns(DeprecationWarning, match="goes away in avalanche-tmc 0.3.0"):
        from avalanche_tmc.fast_tangent import TracingError
    assert TracingError is tangent.TracingError
    with pytest.raises(AttributeError, match="moved to avalanche_tmc.tangent"):
        importlib.import_module("avalanche_tmc.fast_tangent").no_such_name


def test_the_tangent_package_keeps_the_names_of_the_old_module():
    for name in ("Delta", "LinearizeSpec", "IMPLEMENTATIONS", "find_head", "replace_head", "TangentModel",
                 "TracingError", "TangentPlan", "build_plan"):
        assert name in tangent.__all__ and getattr(tangent, name) is not None
    # files and checkpoints name TangentModel by its path before the move (their hashes stay the same)
    assert _compat.recorded_class_path(tangent.TangentModel) == "avalanche_tmc.tangent.TangentModel"
    assert _compat.recorded_class_path(tangent.TangentPlan) == "avalanche_tmc.fast_tangent.TangentPlan"
