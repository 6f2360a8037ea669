"""Adapting a feature network once before it is frozen (``avalanche_tmc.training.adaptation``):
deterministic for a seed, never touching the given network, training only what it is told
to, and the selection of a candidate on a held-out part of the adaptation data only. The
strategy built on it is tested in ``strategies/test_adapt_then_compose.py``. On the tests'
``device``."""

import copy
from dataclasses import replace

import pytest
import torch

from avalanche_tmc import Adaptation, adapt_features, select_adaptation
from avalanche_tmc.training.adaptation import stratified_holdout
from tests.helpers import seeded_resnet


def test_adaptation_is_deterministic_for_a_seed(digits3, device):
    data = digits3.train_stream[0].dataset
    x = torch.stack([data[i][0] for i in range(8)]).to(device)
    for how in ("fine-tune", "tangent"):
        a = adapt_features(seeded_resnet(), data, Adaptation(how=how, lr=1e-2, epochs=1, seed=3), device)
        b = adapt_features(seeded_resnet(), data, Adaptation(how=how, lr=1e-2, epochs=1, seed=3), device)
        c = adapt_features(seeded_resnet(), data, Adaptation(how=how, lr=1e-2, epochs=1, seed=4), device)
        assert torch.equal(a(x), b(x)) and not torch.equal(a(x), c(x))


def test_adaptation_never_modifies_the_given_network(digits3, device):
    net = seeded_resnet().to(device)
    before = copy.deepcopy(net.state_dict())
    adapt_features(net, digits3.train_stream[0].dataset, Adaptation(lr=0.1, epochs=1), device)
    assert all(torch.equal(before[k], v) for k, v in net.state_dict().items())


def test_train_from_adapts_only_the_later_parameters(digits3, device):
    net = seeded_resnet().to(device)
    features = adapt_features(net, digits3.train_stream[0].dataset, Adaptation(lr=0.1, epochs=1, train_from="block"),
                              device)
    adapted = dict(features.named_parameters())
    for name, value in net.named_parameters():
        if name.startswith("stem."):
            assert torch.equal(adapted[name], value)
        elif name.startswith("block.") and value.dim() > 1:
            assert not torch.equal(adapted[name], value)
    with pytest.raises(ValueError, match="names no module"):
        adapt_features(net, digits3.train_stream[0].dataset, Adaptation(train_from="nowhere"))


def test_selection_looks_only_at_a_held_out_part_of_the_adaptation_data(digits3, device):
    data = digits3.train_stream[0].dataset
    kept, held = stratified_holdout([int(data[i][1]) for i in range(len(data))], 0.25, seed=0)
    assert not set(kept) & set(held) and sorted(kept + held) == list(range(len(data)))
    seen = []
    real = adapt_features

    def recording(net, subset, adaptation, device="cpu"):
        seen.append(list(subset.indices))
        return real(net, subset, adaptation, device)

    import avalanche_tmc.training.adaptation as module

    module.adapt_features, saved = recording, module.adapt_features
    try:
        candidates = [Adaptation(how="none"), Adaptation(lr=0.05, epochs=2), Adaptation(lr=1e30, epochs=1)]
        best, scores = select_adaptation(seeded_resnet(), data, candidates, val_fraction=0.25, seed=0, device=device)
    finally:
        module.adapt_features = saved
    assert all(indices == kept for indices in seen)  # adapted on the kept part only
    assert [c for c, _ in scores] == candidates and scores[2][1] == 0.0  # the diverged candidate scores 0
    assert best is max(scores, key=lambda item: item[1])[0]


def test_bad_adaptations_are_refused_with_advice():
    with pytest.raises(ValueError, match="how must be one of"):
        Adaptation(how="magic")
    with pytest.raises(ValueError, match="positive finite lr"):
        Adaptation(lr=-1.0)


def test_candidates_that_differ_only_in_the_layer_share_one_fine_tuning(digits3, monkeypatch, device):
    import avalanche_tmc.training.adaptation as module

    data = digits3.train_stream[0].dataset
    trained = Adaptation(lr=0.05, epochs=1, batch_size=16)
    candidates = [trained, replace(trained, layer="stem"), replace(trained, layer="block"), Adaptation(how="none")]
    alone = [select_adaptation(seeded_resnet(), data, [c], seed=0, projection_dim=64, device=device)[1][0]
             for c in candidates]
    calls = []
    real = module.fine_tune
    monkeypatch.setattr(module, "fine_tune", lambda *a, **k: calls.append(1) or real(*a, **k))
    best, scores = select_adaptation(seeded_resnet(), data, candidates, seed=0, projection_dim=64, device=device)
    assert len(calls) == 1  # one fine-tuning read at three layers
    assert scores == alone  # the same scores as each candidate selected on its own
    assert best is max(scores, key=lambda item: item[1])[0]


def test_a_tangent_adaptation_is_read_at_the_heads_input_only():
    with pytest.raises(ValueError, match="head's input only"):
        Adaptation(how="tangent", layer="block")
    assert "pooled block" in Adaptation(how="none", layer="block").describe()


@pytest.mark.parametrize("how", ["fine-tune", "tangent"])
def test_adapting_only_the_head_leaves_the_features_as_they_are(digits3, how, device):
    from avalanche_tmc import penultimate

    data = digits3.train_stream[0].dataset
    x = torch.stack([data[i][0] for i in range(8)]).to(device)
    features = adapt_features(seeded_resnet(), data, Adaptation(how=how, lr=1e-2, epochs=1, train_from="fc"), device)
    torch.testing.assert_close(features(x), penultimate(seeded_resnet()).to(device)(x), rtol=0, atol=0)


@pytest.mark.parametrize("layer", [None, "block"])
def test_features_that_need_no_training_are_returned_on_the_device_asked_for(digits3, layer):
    """Issue 23: ``how="none"`` returned the features where the given network was (the CPU)
    although ``device`` said CUDA; checked on the ``meta`` device, so no GPU is needed."""
    net = seeded_resnet()
    features = adapt_features(net, digits3.train_stream[0].dataset, Adaptation(how="none", layer=layer), "meta")
    assert {t.device.type for t in features.state_dict().values()} == {"meta"}
    assert {t.device.type for t in net.state_dict().values()} == {"cpu"}  # the given network is not moved
