"""The old paths of the training glue (``avalanche_tmc.plugin``, ``.safety``, ``.strategies``,
``.analytic``, ``.adaptation``, ``.checkpoint``, ``.metrics``) give the same objects as their
new modules, with a DeprecationWarning; what files and checkpoints record does not change."""

import hashlib
import importlib
import pickle

import pytest

from avalanche_tmc._compat import recorded_class_path

MOVES = [
    ("avalanche_tmc.plugin", "TangentPlugin", "avalanche_tmc.training.plugins.tangent"),
    ("avalanche_tmc.plugin", "CompositionPlugin", "avalanche_tmc.training.plugins.composition"),
    ("avalanche_tmc.plugin", "TaskMaskPlugin", "avalanche_tmc.training.plugins.task_mask"),
    ("avalanche_tmc.plugin", "experience_task_classes", "avalanche_tmc.training.plugins.task_mask"),
    ("avalanche_tmc.plugin", "DivergenceError", "avalanche_tmc.training.divergence"),
    ("avalanche_tmc.safety", "check_new_experience_ids", "avalanche_tmc.training.mixins"),
    ("avalanche_tmc.safety", "check_forget", "avalanche_tmc.training.forgetting"),
    ("avalanche_tmc.strategies", "TMCStrategy", "avalanche_tmc.training.strategies.tangent"),
    ("avalanche_tmc.strategies", "DEFAULT_LR", "avalanche_tmc.training.strategies.tangent"),
    ("avalanche_tmc.analytic", "AnalyticClassifier", "avalanche_tmc.models.analytic"),
    ("avalanche_tmc.analytic", "penultimate", "avalanche_tmc.models.analytic"),
    ("avalanche_tmc.analytic", "AnalyticHeadStrategy", "avalanche_tmc.training.strategies.analytic"),
    ("avalanche_tmc.adaptation", "fine_tune", "avalanche_tmc.training.adaptation"),
    ("avalanche_tmc.adaptation", "AdaptThenComposeStrategy", "avalanche_tmc.training.strategies.adapt_then_compose"),
    ("avalanche_tmc.checkpoint", "save_learned", "avalanche_tmc.training.checkpoint"),
    ("avalanche_tmc.metrics", "loss_metrics", "avalanche_tmc.training.metrics"),
    ("avalanche_tmc.metrics", "NamedEpochLoss", "avalanche_tmc.training.metrics"),
]


@pytest.mark.parametrize("old, name, new", MOVES)
def test_an_old_path_gives_the_object_of_its_new_module_with_a_warning(old, name, new):
    with pytest.warns(DeprecationWarning, match=rf"{old}\.{name} moved to {new}\.{name}.*0\.3\.0"):
        value = getattr(importlib.import_module(old), name)
    assert value is getattr(importlib.import_module(new), name)


def test_the_public_names_come_from_the_new_modules():
    import avalanche_tmc

    assert avalanche_tmc.TangentPlugin.__module__ == "avalanche_tmc.training.plugins.tangent"
    assert avalanche_tmc.AnalyticClassifier.__module__ == "avalanche_tmc.models.analytic"
    assert avalanche_tmc.DivergenceError.__module__ == "avalanche_tmc.training.divergence"


def test_a_class_pickled_under_its_old_path_loads(recwarn):
    from avalanche_tmc.training.metrics import NamedEpochLoss

    # what a checkpoint written before the move holds: the class by its old module path
    old = pickle.dumps(NamedEpochLoss, protocol=0).replace(b"avalanche_tmc.training.metrics", b"avalanche_tmc.metrics")
    assert b"avalanche_tmc.metrics" in old
    assert pickle.loads(old) is NamedEpochLoss


def test_files_and_checkpoints_record_the_moved_classes_under_their_old_paths():
    from avalanche_tmc.models.analytic import LayerFeatures
    from avalanche_tmc.training.adaptation import TangentFeatures
    from avalanche_tmc.training.checkpoint import checkpoint_identity
    from avalanche_tmc.training.plugins.tangent import TangentPlugin
    from tests.helpers import TinyResNet

    assert recorded_class_path(LayerFeatures) == "avalanche_tmc.analytic.LayerFeatures"
    assert recorded_class_path(TangentFeatures) == "avalanche_tmc.adaptation.TangentFeatures"
    assert recorded_class_path(TangentPlugin) == "avalanche_tmc.plugin.TangentPlugin"

    class Strategy:  # not composable: the identity hashes the model's layout
        model = LayerFeatures(TinyResNet(), "block")

    net = Strategy.model
    layout = "\n".join(f"{n}:" + ("avalanche_tmc.analytic.LayerFeatures" if m is net
                                  else f"{type(m).__module__}.{type(m).__qualname__}") for n, m in net.named_modules())
    layout += "\n" + "\n".join(f"{n}:{tuple(t.shape)}" for n, t in net.state_dict().items())
    assert checkpoint_identity(Strategy())["architecture"] == hashlib.sha256(layout.encode()).hexdigest()
