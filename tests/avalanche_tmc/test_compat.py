"""Old import paths of moved modules: the same objects, with a DeprecationWarning naming the new path."""

import importlib

import pytest

from avalanche_tmc import _compat
from avalanche_tmc._compat import MOVED_MODULES, moved_module_getattr, recorded_class_path


def _moved_names():
    for old, new_modules in sorted(MOVED_MODULES.items()):
        for new in new_modules:
            for name in importlib.import_module(new).__all__:
                yield old, new, name


@pytest.mark.parametrize("old, new, name", list(_moved_names()))
def test_an_old_path_gives_the_same_object_with_a_warning(old, new, name):
    module = importlib.import_module(old)
    value = getattr(importlib.import_module(new), name)
    owner = next(n for n in MOVED_MODULES[old] if hasattr(importlib.import_module(n), name))
    with pytest.warns(DeprecationWarning, match=rf"{old}\.{name} moved to {owner}\.{name}.*{_compat.REMOVAL_VERSION}"):
        assert getattr(module, name) is value


def test_from_import_of_an_old_path_works_and_warns():
    with pytest.warns(DeprecationWarning, match="avalanche_tmc.losses.RescaledSquareLoss moved to "
                                                "avalanche_tmc.composition.losses.RescaledSquareLoss"):
        from avalanche_tmc.losses import RescaledSquareLoss
    from avalanche_tmc.composition.losses import RescaledSquareLoss as new
    assert RescaledSquareLoss is new


def test_the_old_module_of_delta_arithmetic_is_now_the_package_and_exports_the_same_names():
    import avalanche_tmc.composition as package
    from avalanche_tmc.composition import deltas

    old_names = ["check_compatible", "non_finite_names", "check_finite", "add_deltas", "subtract_deltas",
                 "scale_delta", "zeros_like_delta", "weighted_sum", "compose", "DeltaComposition"]
    assert all(getattr(package, name) is getattr(deltas, name) for name in old_names)


def test_the_public_function_compose_is_not_shadowed_by_a_subpackage():
    import avalanche_tmc
    import avalanche_tmc.composition  # noqa: F401  (a subpackage import sets attributes on avalanche_tmc)
    from avalanche_tmc.composition.deltas import compose

    assert avalanche_tmc.compose is compose and callable(avalanche_tmc.compose)


def test_an_unknown_name_of_an_old_path_says_where_the_module_went():
    module = importlib.import_module("avalanche_tmc.losses")
    with pytest.raises(AttributeError, match="has no attribute 'nothing'.*avalanche_tmc.composition.losses"):
        module.nothing  # noqa: B018


def test_a_shim_for_an_unlisted_module_is_refused():
    with pytest.raises(KeyError, match="MOVED_MODULES"):
        moved_module_getattr("avalanche_tmc.never_existed")


def test_files_record_a_moved_class_under_its_old_path():
    from torch import nn

    from avalanche_tmc.composition.deltas import DeltaComposition
    from avalanche_tmc.composition.learner import ComposableLearner

    assert recorded_class_path(DeltaComposition) == "avalanche_tmc.composition.DeltaComposition"  # RECORDED_AS
    assert recorded_class_path(ComposableLearner) == "avalanche_tmc.additive.ComposableLearner"
    assert recorded_class_path(nn.Linear) == "torch.nn.modules.linear.Linear"
    assert recorded_class_path(int) == "builtins.int"
