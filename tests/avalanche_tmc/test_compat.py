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
    with pytest.warns(DeprecationWarning, match="avalanche_tmc.composition.DeltaComposition moved to "
                                                "avalanche_tmc.compose.deltas.DeltaComposition"):
        from avalanche_tmc.composition import DeltaComposition
    from avalanche_tmc.compose.deltas import DeltaComposition as new
    assert DeltaComposition is new


def test_an_unknown_name_of_an_old_path_says_where_the_module_went():
    module = importlib.import_module("avalanche_tmc.losses")
    with pytest.raises(AttributeError, match="has no attribute 'nothing'.*avalanche_tmc.compose.losses"):
        module.nothing  # noqa: B018


def test_a_shim_for_an_unlisted_module_is_refused():
    with pytest.raises(KeyError, match="MOVED_MODULES"):
        moved_module_getattr("avalanche_tmc.never_existed")


def test_files_record_a_moved_class_under_its_old_path():
    from torch import nn

    from avalanche_tmc.compose.deltas import DeltaComposition
    from avalanche_tmc.compose.learner import ComposableLearner

    assert recorded_class_path(DeltaComposition) == "avalanche_tmc.composition.DeltaComposition"
    assert recorded_class_path(ComposableLearner) == "avalanche_tmc.additive.ComposableLearner"
    assert recorded_class_path(nn.Linear) == "torch.nn.modules.linear.Linear"
    assert recorded_class_path(int) == "builtins.int"
