"""Files name a network's classes by registered names, not module paths (issue 32): every
``nn.Module`` class of the library has one, written out in a table, a moved or renamed class
keeps its files' hashes, files of pre-release builds that name a class by its earlier name
still load, and a name or a class is registered once."""

import hashlib
import importlib
import inspect
import pkgutil

import pytest
import torch
from torch import nn

import avalanche_tmc
import avalanche_tmc.files as cf
from avalanche_tmc import TrainingFreeClassifier, TrainingFreeStrategy, penultimate
from avalanche_tmc.files import architectures
from avalanche_tmc.files.learned import load_learned, save_learned
from tests.avalanche_tmc.files.common import equal, train_unshuffled
from tests.helpers import NUM_CLASSES, TinyResNet, quiet_evaluator


def _library_module_classes():
    found = set()
    for info in pkgutil.walk_packages(avalanche_tmc.__path__, "avalanche_tmc."):
        if info.name.endswith("__main__") or info.name == "avalanche_tmc.cli":
            continue
        module = importlib.import_module(info.name)
        found.update(c for _, c in inspect.getmembers(module, inspect.isclass)
                     if issubclass(c, nn.Module) and c.__module__.startswith("avalanche_tmc."))
    return found


def test_every_network_class_of_the_library_is_recorded_by_its_registered_name():
    classes = _library_module_classes()
    names = {c.__name__ for c in classes}
    assert {"TangentModel", "LayerFeatures", "TrainingFreeClassifier", "TangentFeatures"} <= names
    for cls in classes:
        assert cf.architecture_name(cls).startswith("avalanche-tmc:"), cls
        assert cf.ARCHITECTURES[cf.architecture_name(cls)] is cls
    # the names are part of the format: written out, never derived from a class's name (a renamed class keeps its
    # name, or its old one moves to EARLIER_NAMES)
    assert sorted(cf.ARCHITECTURES) == [f"avalanche-tmc:{name}" for name in (
        "ChainSegment", "LayerFeatures", "RandomReLUFeatures", "RescaledSquareLoss", "TangentFeatures", "TangentModel",
        "TrainingFreeClassifier")]
    assert cf.architecture_name(nn.Linear) == "torch.nn.modules.linear.Linear"  # others: module.QualName


def test_a_moved_class_keeps_the_structure_hash(monkeypatch):
    from avalanche_tmc import LayerFeatures

    net = LayerFeatures(nn.Sequential(nn.Linear(3, 2)), "0")
    before = cf.structure(net)
    monkeypatch.setattr(LayerFeatures, "__module__", "avalanche_tmc.somewhere.else")  # a move
    assert cf.structure(net) == before
    lines = "\n".join([":avalanche-tmc:LayerFeatures", "model:torch.nn.modules.container.Sequential",
                       "model.0:torch.nn.modules.linear.Linear"])
    assert before["modules_sha256"] == hashlib.sha256(lines.encode()).hexdigest()


class _Holding(nn.Module):
    """Features that hold a TrainingFreeClassifier (never called): its class is part of the
    network's structure, which files record by name."""

    def __init__(self, features: nn.Module):
        super().__init__()
        self.features = features
        self.spare = TrainingFreeClassifier(nn.Identity(), 2)

    def forward(self, x):
        return self.features(x)


def _holding_strategy() -> TrainingFreeStrategy:
    torch.manual_seed(0)
    model = TrainingFreeClassifier(_Holding(penultimate(TinyResNet(num_classes=3))), NUM_CLASSES)
    return TrainingFreeStrategy(model=model, ridge_lambda=1.0, train_mb_size=8, evaluator=quiet_evaluator())


def test_files_of_pre_release_builds_naming_a_renamed_class_still_load(bm, tmp_path, monkeypatch):
    """Pre-release builds recorded TrainingFreeClassifier as ``avalanche-tmc:AnalyticClassifier``
    and TrainingFreeStrategy as ``AnalyticHeadStrategy``: their component and learned-state
    files (written here as they wrote them) still load; files written today use the new names."""
    trained = train_unshuffled(_holding_strategy(), bm.train_stream[:2])
    features = trained.model.features
    with monkeypatch.context() as then:  # a pre-release build
        then.setattr(architectures, "ARCHITECTURES", {
            **{n: c for n, c in cf.ARCHITECTURES.items() if c is not TrainingFreeClassifier},
            "avalanche-tmc:AnalyticClassifier": TrainingFreeClassifier})
        then.setattr(trained, "__class__", type("AnalyticHeadStrategy", (TrainingFreeStrategy,), {}))
        before = cf.structure(features)
        paths = [cf.save_component(c, str(tmp_path / f"experience-{c.experience}.safetensors"))
                 for c in cf.strategy_components(trained)]
        learned = save_learned(trained, str(tmp_path / "learned.safetensors"))
    assert type(trained) is TrainingFreeStrategy
    assert cf.load_component(paths[0]).settings["strategy"] == "AnalyticHeadStrategy"  # as they wrote it
    assert before != cf.structure(features) == cf.structure(features, earlier=False)
    assert before == cf.structure(features, earlier=True)
    assert cf.architecture_name(TrainingFreeClassifier) == "avalanche-tmc:TrainingFreeClassifier"  # written today
    assert {cf.load_component(p).base["modules_sha256"] for p in paths} == {before["modules_sha256"]}
    loaded = _holding_strategy()
    assert loaded.load_components(paths) == [0, 1]
    assert equal(loaded.learned().summed(), trained.learned().summed())
    resumed = _holding_strategy()
    assert load_learned(resumed, learned) == [0, 1]
    assert equal(resumed.learned().summed(), trained.learned().summed())
    # an earlier name is read only: never given again
    with pytest.raises(ValueError, match="earlier name"):
        cf.register_architecture("avalanche-tmc:AnalyticClassifier", _Holding)


def test_a_class_of_yours_is_registered_once_under_one_name(monkeypatch):
    monkeypatch.setattr(architectures, "ARCHITECTURES", dict(architectures.ARCHITECTURES))

    class Mine(nn.Module):
        pass

    class Other(nn.Module):
        pass

    unregistered = cf.structure(nn.Sequential(Mine()))
    assert cf.architecture_name(Mine) == f"{__name__}.{Mine.__qualname__}"
    assert cf.register_architecture("my-lab:Mine", Mine) is Mine
    assert cf.register_architecture("my-lab:Mine", Mine) is Mine  # the same again: nothing changes
    assert cf.architecture_name(Mine) == "my-lab:Mine"
    assert cf.structure(nn.Sequential(Mine())) != unregistered
    with pytest.raises(ValueError, match="already registered for"):
        cf.register_architecture("my-lab:Mine", Other)
    with pytest.raises(ValueError, match="already registered as 'my-lab:Mine'"):
        cf.register_architecture("my-lab:Mine2", Mine)
    with pytest.raises(ValueError, match="line of text"):
        cf.register_architecture("two\nlines", Other)
    with pytest.raises(TypeError, match="nn.Module"):
        cf.register_architecture("my-lab:int", int)
