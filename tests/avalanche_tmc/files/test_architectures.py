"""Files name a network's classes by registered names, not module paths (issue 32): every
``nn.Module`` class of the library has one, a moved class keeps its files' hashes, and a
name or a class is registered once."""

import hashlib
import importlib
import inspect
import pkgutil

import pytest
from torch import nn

import avalanche_tmc
import avalanche_tmc.files as cf
from avalanche_tmc.files import architectures


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
    assert {"TangentModel", "LayerFeatures", "AnalyticClassifier", "TangentFeatures"} <= {c.__name__ for c in classes}
    for cls in classes:
        assert cf.architecture_name(cls) == f"avalanche-tmc:{cls.__name__}", cls
        assert cf.ARCHITECTURES[cf.architecture_name(cls)] is cls
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
