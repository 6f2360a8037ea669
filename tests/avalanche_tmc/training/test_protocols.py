"""Strategies reach component files through the registered component store only (issue 32:
``training/`` imports neither ``files/`` nor ``distributed.py``): what a strategy's
``component_dir`` writes and its ``load_components`` reads go through whichever store is
registered, the files package registers its own, and without one the strategy says what
to do."""

from collections import OrderedDict
from types import SimpleNamespace

import pytest
import torch

from avalanche_tmc.files.learners import ComponentFiles
from avalanche_tmc.training import protocols
from tests.helpers import small_benchmark, tmc, train_seeded


class RecordingStore:
    """A store that keeps what it is given in memory and gives it back."""

    def __init__(self):
        self.written = {}

    def write_component(self, strategy, key, tensors, weight, classes, path, *, overwrite):
        self.written[key] = dict(tensors={n: t.detach().clone() for n, t in tensors.items()}, weight=weight,
                                 classes=classes, path=path, overwrite=overwrite)

    def read_components(self, strategy, paths, learned, *, key=None):
        return [SimpleNamespace(experience=k, tensors=OrderedDict(w["tensors"]), weight=w["weight"],
                                classes={int(t): sorted(c) for t, c in w["classes"].items()})
                for k, w in sorted(self.written.items()) if w["path"] in paths]


def test_without_a_registered_store_the_component_files_are_used(monkeypatch, tmp_path):
    """Nothing registers a store at import (issue 49): the first write finds the default,
    the component files, and the strategy's components reach the disk."""
    monkeypatch.setattr(protocols, "_STORES", [])
    assert isinstance(protocols.component_store(), ComponentFiles)
    monkeypatch.setattr(protocols, "_STORES", [])
    train_seeded(tmc(component_dir=str(tmp_path)), small_benchmark(n_experiences=2).train_stream)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["experience-0.safetensors", "experience-1.safetensors"]
    assert isinstance(protocols._STORES[0], ComponentFiles)


def test_a_strategy_writes_and_reads_its_components_through_the_registered_store(monkeypatch, tmp_path):
    store = RecordingStore()
    monkeypatch.setattr(protocols, "_STORES", [])
    protocols.register_component_store(store)
    bm = small_benchmark(n_experiences=2)
    trained = train_seeded(tmc(component_dir=str(tmp_path)), bm.train_stream)
    assert sorted(store.written) == [0, 1]
    for key, written in store.written.items():  # what the strategy composed, as it composed it
        assert written["path"] == str(tmp_path / f"experience-{key}.safetensors") and not written["overwrite"]
        assert all(torch.equal(written["tensors"][n], t) for n, t in trained.components[key].items())
        assert written["weight"] == trained.learned().weights[key]
    assert not list(tmp_path.iterdir())  # nothing reached the disk: the strategy knows no files
    rebuilt = tmc()
    assert rebuilt.load_components([w["path"] for w in store.written.values()]) == [0, 1]
    for name, value in trained.composed_delta.items():
        assert torch.allclose(rebuilt.composed_delta[name], value, rtol=1e-6, atol=1e-7), name


def test_a_store_must_implement_the_protocol():
    with pytest.raises(TypeError, match="does not implement ComponentStore"):
        protocols.register_component_store(object())


@pytest.mark.integration
@pytest.mark.parametrize("module", ["avalanche_tmc", "avalanche_tmc.training.strategies.tangent"])
def test_a_strategy_imported_either_way_comes_with_the_component_files(module):
    """In a fresh process, ``TMCStrategy`` imported from the package (the documented import)
    or from its own module finds the component files, and the import alone registered no
    store (issue 49) and added, of ours, only the package's one filter of qpsolvers' message
    (torch, numpy and Avalanche add their own)."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import warnings\nfilters = list(warnings.filters)\n"
            f"from {module} import TMCStrategy\n"
            "from avalanche_tmc.training import protocols\n"
            "ours = [f for f in warnings.filters if f not in filters and getattr(f[3], 'pattern', '') == 'qpsolvers']\n"
            "assert len(ours) == 1 and ours[0][1].pattern == 'no QP solver found', ours  # the package's one filter\n"
            "assert protocols._STORES == [], protocols._STORES\n"
            "print(type(protocols.component_store()).__name__)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parents[3])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ComponentFiles"
