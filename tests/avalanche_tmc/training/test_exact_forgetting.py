"""Forgetting is exact or refused (issue 21; ``avalanche_tmc.training.exact_forgetting``): inexact
forgetting after replay or distillation is refused unless asked for, and forgetting is
complete (replay buffers purged, component files removed, checksums compared). On the
tests' ``device``."""

import os
import warnings

import pytest
import torch

from avalanche_tmc import TangentModel, TMCStrategy, TrainingFreeClassifier, TrainingFreeStrategy, penultimate
from avalanche_tmc import files as cf
from avalanche_tmc.distributed import train_parallel
from tests.helpers import NUM_CLASSES, TinyResNet, learned_of, quiet_evaluator, small_benchmark, tmc, train_seeded

warnings.filterwarnings("ignore", message="No loggers specified")


def training_free(**kwargs) -> TrainingFreeStrategy:
    torch.manual_seed(0)
    model = TrainingFreeClassifier(penultimate(TinyResNet(num_classes=3)), NUM_CLASSES)
    return TrainingFreeStrategy(model=model, ridge_lambda=1.0, train_mb_size=8, evaluator=quiet_evaluator(), **kwargs)


@pytest.fixture(scope="module")
def bm():
    return small_benchmark(n_experiences=4)


def test_forgotten_experiences_are_purged_from_the_replay_buffer(bm, device):
    """Issue 21: after forget(1) and forget(0) the buffer still held their samples and train(2) replayed them."""
    from avalanche.training.plugins import ReplayPlugin

    replay = ReplayPlugin(mem_size=8)
    strategy = train_seeded(tmc(plugins=[replay], device=device), bm.train_stream[:2])
    assert len(replay.storage_policy.buffer) == 8
    strategy.forget(1)
    assert 0 < len(replay.storage_policy.buffer) < 8
    strategy.forget(0)
    assert len(replay.storage_policy.buffer) == 0
    train_seeded(strategy, bm.train_stream[2:3])
    alone = train_seeded(tmc(device=device), bm.train_stream[2:3])  # never saw experiences 0 and 1, no replay
    for name, value in alone.components[2].items():
        assert torch.allclose(strategy.components[2][name], value, rtol=1e-5, atol=1e-7), name


def test_a_replay_buffer_that_cannot_be_purged_refuses_forgetting(bm, device):
    from avalanche.training.plugins import ReplayPlugin
    from avalanche.training.storage_policy import ClassBalancedBuffer

    replay = ReplayPlugin(mem_size=8, storage_policy=ClassBalancedBuffer(max_size=8))
    strategy = train_seeded(tmc(plugins=[replay], device=device), bm.train_stream[:2])
    with pytest.raises(ValueError, match="cannot be purged.*inexact=True"):
        strategy.forget(1)
    assert strategy.tangent_plugin.composition.keys == [0, 1]
    strategy.forget(1, inexact=True)
    assert strategy.tangent_plugin.composition.keys == [0]


@pytest.mark.parametrize("learner", ["tmc", "training_free"])
def test_forgetting_after_distillation_is_refused_unless_inexact(bm, learner, device):
    """Issue 21: with LwFPlugin, forget(0) was accepted although later components were distilled from it."""
    from avalanche.training.plugins import LwFPlugin

    plugins = [LwFPlugin()]
    strategy = (tmc if learner == "tmc" else training_free)(plugins=plugins, device=device)
    train_seeded(strategy, bm.train_stream[:2])
    with pytest.raises(ValueError, match=r"Cannot forget experience 0 exactly.*LwFPlugin"):
        strategy.forget(0)
    with pytest.raises(ValueError, match="distil"):
        strategy.forget(1)  # the teacher of the next experience still knows it
    assert learned_of(strategy).keys == [0, 1]
    strategy.forget(1, inexact=True)
    assert learned_of(strategy).keys == [0]


def test_forget_with_component_dir_removes_the_file(bm, tmp_path, device):
    """Issue 21: the forgotten component's file stayed and from_components brought it back."""
    strategy = train_seeded(tmc(component_dir=str(tmp_path), device=device), bm.train_stream[:2])
    strategy.forget(1)
    assert sorted(os.listdir(tmp_path)) == ["experience-0.safetensors"]
    torch.manual_seed(0)
    rebuilt = TMCStrategy.from_components(str(tmp_path), model=TangentModel(TinyResNet(num_classes=3),
                                                                            num_classes=NUM_CLASSES),
                                          evaluator=quiet_evaluator(), device=device)
    assert rebuilt.tangent_plugin.composition.keys == [0]


@pytest.mark.parametrize("trained_by", ["train", "train_parallel"])
def test_forget_with_a_delta_of_another_experience_is_refused(bm, tmp_path, trained_by, device):
    """Issue 21: keep_components=False, forget(2, delta=δ_0) was accepted. Members merged by
    train_parallel keep their checksums too."""
    strategy = tmc(keep_components=False, component_dir=str(tmp_path), device=device)
    if trained_by == "train":
        train_seeded(strategy, bm.train_stream[:3])
    else:
        train_parallel(strategy, bm.train_stream[:3], seed=100)
    files = {c.experience: c for c in cf.load_components(str(tmp_path))}
    assert strategy.learned().keys == [0, 1, 2] and set(files) == {0, 1, 2}
    with pytest.raises(ValueError, match="checksum differs"):
        strategy.forget(2, files[0].tensors)
    strategy.forget(2, files[2].tensors)
    expected = cf.composed_delta(cf.compose_components([files[0], files[1]]))
    for name, value in expected.items():
        assert torch.allclose(strategy.composed_delta[name].cpu(), value, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("learner", ["tmc", "training_free"])
def test_forget_is_refused_when_later_experiences_replayed_it(learner, device):
    from avalanche.training.plugins import ReplayPlugin

    bm = small_benchmark(n_experiences=4)
    replay = ReplayPlugin(mem_size=8)
    strategy = (tmc if learner == "tmc" else training_free)(plugins=[replay], device=device)
    for exp in bm.train_stream:
        strategy.train(exp)
    keys = lambda: strategy.tangent_plugin.composition.keys if learner == "tmc" else strategy.statistics.keys  # noqa
    with pytest.raises(ValueError, match=r"Cannot forget experience 0 exactly.*\[1, 2, 3\].*ReplayPlugin.*"
                                         r"forget\(3\), forget\(2\), forget\(1\), then forget\(0\)"):
        strategy.forget(0)
    assert keys() == [0, 1, 2, 3]
    strategy.forget(3)  # the most recent one is exact
    with pytest.raises(ValueError, match=r"experiences \[1, 2\]"):
        strategy.forget(0)
    strategy.forget(2)
    strategy.forget(1)
    strategy.forget(0)
    assert keys() == []


def test_forget_without_replay_is_unchanged(device):
    bm = small_benchmark(n_experiences=4)
    strategy = tmc(device=device)
    for exp in bm.train_stream:
        strategy.train(exp)
    strategy.forget(0)
    assert strategy.tangent_plugin.composition.keys == [1, 2, 3]


@pytest.mark.parametrize("learner", ["tmc", "training_free"])
def test_forget_with_a_nearly_equal_component_is_refused(bm, learner, device):
    """Issue 30, case 6: forget(0, delta=δ0·(1+9e-6)) passed an allclose check and subtracted the given δ,
    not the kept one. Only the kept component, bit for bit (same dtype and values), is accepted."""
    strategy = train_seeded((tmc if learner == "tmc" else training_free)(device=device), bm.train_stream[:2])
    kept = learned_of(strategy).components[0]
    before = {n: t.clone() for n, t in learned_of(strategy).summed().items()}
    near = {n: t * (1 + 9e-6) for n, t in kept.items()}
    other_dtype = {n: t.float() if t.dtype == torch.float64 else t.double() for n, t in kept.items()}
    for wrong in (near, other_dtype):
        with pytest.raises(ValueError, match="differ"):
            strategy.forget(0, wrong)
        assert learned_of(strategy).keys == [0, 1]
        assert all(torch.equal(t, before[n]) for n, t in learned_of(strategy).summed().items())
    strategy.forget(0, {n: t.clone() for n, t in kept.items()})  # bit for bit the kept one: accepted
    assert learned_of(strategy).keys == [1]
