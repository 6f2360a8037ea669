"""Files and strategies: components written as they are learned, strategies built from
files equal to the trained ones, a composition installed into a fresh strategy (on the
tests' ``device``: what a strategy reads from files lives where it learns)."""

import os

import pytest
import torch

import avalanche_tmc.files as cf
from avalanche_tmc import (
    TangentModel,
    TMCSeqStrategy,
    TMCStrategy,
    TrainingFreeClassifier,
    TrainingFreeStrategy,
    penultimate,
)
from tests.avalanche_tmc.files.common import base_net, craft, equal, same_net, set_entry, tmc, train
from tests.helpers import NUM_CLASSES, quiet_evaluator


def on(device, tensors) -> bool:
    """Whether every tensor lives on ``device`` (its type: ``cuda`` is ``cuda:0``)."""
    return {t.device.type for t in tensors.values()} == {device.type}


def test_tmc_writes_each_component_as_it_is_composed(bm, tmp_path, device):
    strategy = tmc(component_dir=str(tmp_path), device=device)
    train(strategy, bm.train_stream[:1])
    assert os.listdir(tmp_path) == ["experience-0.safetensors"]
    component = cf.load_component(str(tmp_path / "experience-0.safetensors"))
    assert equal(component.tensors, strategy.components[0])
    assert component.experience == 0 and component.weight == 1.0
    assert component.classes == {0: sorted(bm.train_stream[0].classes_in_this_experience)}
    assert component.settings["lr"] == 1e-2 and component.settings["mode"] == "tmc"
    with pytest.raises(ValueError, match="TMC-Seq"):
        tmc(strategy=TMCSeqStrategy, component_dir=str(tmp_path))


def test_a_strategy_built_from_files_equals_the_trained_one(trained, bm, device):
    strategy, directory = trained
    rebuilt = TMCStrategy.from_components(directory, model=TangentModel(base_net(), num_classes=NUM_CLASSES), lr=1e-2,
                                          weighting="samples", evaluator=quiet_evaluator(), device=device)
    assert rebuilt.tangent_plugin.composition.keys == [0, 1, 2, 3]
    assert on(device, rebuilt.composed_delta) and all(on(device, c) for c in rebuilt.components.values())
    assert equal(rebuilt.composed_delta, strategy.composed_delta)
    assert dict(rebuilt.tangent_plugin.task_classes) == dict(strategy.tangent_plugin.task_classes)
    key = "Top1_Acc_Stream/eval_phase/test_stream/Task000"
    assert rebuilt.eval(bm.test_stream)[key] == strategy.eval(bm.test_stream)[key]
    rebuilt.forget(1)  # and forgets like the original
    strategy_copy = TMCStrategy.from_components(directory, model=TangentModel(base_net(), num_classes=NUM_CLASSES),
                                                lr=1e-2, weighting="samples", evaluator=quiet_evaluator(),
                                                device=device)
    strategy_copy.forget(1)
    assert equal(rebuilt.composed_delta, strategy_copy.composed_delta)
    with pytest.raises(cf.IncompatibleComponentsError, match="already learned"):
        rebuilt.load_components(os.path.join(directory, "experience-0.safetensors"))


def test_a_composition_file_installs_into_a_fresh_strategy(trained, bm, device):
    strategy, directory = trained
    composition = cf.compose_components(cf.load_components(directory))
    fresh = tmc(weighting="samples", device=device)
    cf.install_composition(fresh, composition)
    assert fresh.learned().keys == [0, 1, 2, 3] and equal(fresh.composed_delta, strategy.composed_delta)
    assert on(device, fresh.composed_delta) and on(device, fresh.learned().summed())
    assert dict(fresh.tangent_plugin.task_classes) == dict(strategy.tangent_plugin.task_classes)
    key = "Top1_Acc_Stream/eval_phase/test_stream/Task000"
    assert fresh.eval(bm.test_stream)[key] == strategy.eval(bm.test_stream)[key]
    head = TrainingFreeStrategy(model=TrainingFreeClassifier(penultimate(base_net()), NUM_CLASSES),
                                evaluator=quiet_evaluator())
    with pytest.raises(cf.IncompatibleComponentsError):
        cf.install_composition(head, composition)


def test_loading_a_learned_component_under_another_id_is_refused(bm, tmp_path, device):
    """Issue 30, case 5: a strategy that trained experience 0 accepted a file holding the same δ under id 5
    (counted twice), while compose_components refused the same files: one rule for both."""
    directory = tmp_path / "run"
    for keep in (True, False):
        strategy = train(tmc(component_dir=str(directory / str(keep)), keep_components=keep, device=device),
                         bm.train_stream[:1])
        original = str(directory / str(keep) / "experience-0.safetensors")
        relabelled = craft(original, tmp_path / "experience-5.safetensors", set_entry(["members", 0, "experience"], 5),
                           rehash=True)
        with pytest.raises(cf.IncompatibleComponentsError, match="same content"):
            cf.compose_components([cf.load_component(original), cf.load_component(relabelled)])
        before = {n: t.clone() for n, t in strategy.composed_delta.items()}
        with pytest.raises(cf.IncompatibleComponentsError, match="same content"):
            strategy.load_components(relabelled)
        assert strategy.learned().keys == [0] and equal(strategy.composed_delta, before)


def test_files_whose_sum_overflows_are_all_refused_before_any_is_installed(model, tmp_path, device):
    """Issue 30, case 20: two finite files whose sum overflows raised after installing the first."""
    huge = {n: torch.full_like(t, 3e38) for n, t in model.delta.items()}
    paths = [cf.save_component(cf.tangent_component(model, {n: t * f for n, t in huge.items()}, e),
                               str(tmp_path / f"experience-{e}.safetensors")) for e, f in ((0, 1.0), (1, 0.999))]
    strategy = tmc(base=same_net(), device=device)
    with pytest.raises(cf.IncompatibleComponentsError, match="not finite"):
        strategy.load_components(paths)
    assert len(strategy.learned()) == 0 and not strategy.learned_classes()
    strategy.load_components(paths[0])  # each alone is fine; the second then overflows the sum: refused too
    with pytest.raises(cf.IncompatibleComponentsError, match="not finite"):
        strategy.load_components(paths[1])
    assert strategy.learned().keys == [0]


def test_component_dir_never_replaces_another_runs_file(bm, tmp_path, device):
    """Issue 30, case 15: component_dir silently replaced another run's experience-0.safetensors (the command
    line refuses with exit 4). Exclusive by default, as the command line; overwrite_components=True replaces."""
    first = train(tmc(component_dir=str(tmp_path), device=device), bm.train_stream[:1])
    theirs = (tmp_path / "experience-0.safetensors").read_bytes()
    second = tmc(component_dir=str(tmp_path), weighting="samples", device=device)
    with pytest.raises(cf.ComponentExistsError, match="exists"):
        train(second, bm.train_stream[:1])
    assert (tmp_path / "experience-0.safetensors").read_bytes() == theirs and len(second.learned()) == 0
    train(first, bm.train_stream[1:2])  # the run that wrote the files goes on writing there
    first.forget(1)
    train(first, bm.train_stream[1:2])
    train(tmc(component_dir=str(tmp_path), overwrite_components=True, weighting="samples", device=device),
          bm.train_stream[:1])
    assert (tmp_path / "experience-0.safetensors").read_bytes() != theirs
