"""Delta algebra, composition against the ensemble it must equal, exact forgetting (on the
tests' ``device``)."""

import pytest
import torch

from avalanche_tmc import (
    DeltaComposition,
    TangentModel,
    add_deltas,
    compose,
    logit_ensemble,
    scale_delta,
    subtract_deltas,
    weighted_sum,
)
from tests.helpers import TinyResNet, random_delta, randomize_batchnorm, to_device


@pytest.fixture
def tm(device):
    torch.manual_seed(0)
    return TangentModel(randomize_batchnorm(TinyResNet()), num_classes=4).double().to(device)


def delta_of(tm, seed=0):
    """A random δ of ``tm``, on its device."""
    return to_device(random_delta(tm, seed=seed), next(tm.parameters()).device)


def test_algebra(tm):
    a, b = delta_of(tm, seed=1), delta_of(tm, seed=2)
    for n in a:
        torch.testing.assert_close(add_deltas(a, b)[n], a[n] + b[n])
        torch.testing.assert_close(subtract_deltas(a, b)[n], a[n] - b[n])
        torch.testing.assert_close(scale_delta(a, -2.0)[n], -2.0 * a[n])
        torch.testing.assert_close(weighted_sum([a, b], [0.25, 3.0])[n], 0.25 * a[n] + 3.0 * b[n])


def test_incompatible_deltas_are_refused(tm, device):
    a = delta_of(tm, seed=1)
    other = TangentModel(TinyResNet(width=6), num_classes=4).double().to(device)
    with pytest.raises(ValueError, match="shapes differ"):
        add_deltas(a, delta_of(other))
    with pytest.raises(ValueError, match="names differ"):
        compose([a, {"x": torch.zeros(1)}])


def test_composed_model_equals_the_weighted_logit_ensemble(tm, device):
    x = torch.randn(5, 1, 8, 8, dtype=torch.float64).to(device)
    deltas = [delta_of(tm, seed=s) for s in range(4)]
    weights = [1.0, 2.0, 0.5, 3.0]
    with torch.no_grad():
        members = [tm.forward_with(x, d) for d in deltas]
        composed = tm.forward_with(x, compose(deltas, weights))
    torch.testing.assert_close(composed, logit_ensemble(members, weights), rtol=1e-10, atol=1e-10)


def test_running_mean_matches_the_paper_recursion(tm):
    deltas = [delta_of(tm, seed=s) for s in range(5)]
    composition = DeltaComposition()
    running = None
    for t, d in enumerate(deltas, start=1):
        composition.add(t, d)
        # h_t = λ(t,1) h̃_t + λ(t,2) h_{t-1}, λ(t,1) = 1/t, λ(t,2) = (t-1)/t
        running = d if running is None else weighted_sum([d, running], [1 / t, (t - 1) / t])
        for n in d:
            torch.testing.assert_close(composition.composed()[n], running[n])


@pytest.mark.parametrize("keep", [True, False])
def test_forgetting_equals_composing_the_remaining_tasks(tm, keep):
    deltas = {t: delta_of(tm, seed=10 + t) for t in range(5)}
    sizes = {0: 100, 1: 300, 2: 50, 3: 120, 4: 80}
    composition = DeltaComposition(keep_components=keep)
    for t, d in deltas.items():
        composition.add(t, d, weight=sizes[t])
    composition.forget(2, None if keep else deltas[2])
    composition.forget(0, None if keep else deltas[0])
    remaining = [1, 3, 4]
    expected = compose([deltas[t] for t in remaining], [sizes[t] for t in remaining])
    for n in expected:
        torch.testing.assert_close(composition.composed()[n], expected[n], rtol=1e-12, atol=1e-12)
    assert composition.keys == remaining


def test_order_does_not_matter_and_forgetting_everything_gives_the_base(tm):
    deltas = [delta_of(tm, seed=s) for s in range(3)]
    forward, backward = DeltaComposition(), DeltaComposition()
    for i, d in enumerate(deltas):
        forward.add(i, d)
    for i, d in reversed(list(enumerate(deltas))):
        backward.add(i, d)
    for n in deltas[0]:
        torch.testing.assert_close(forward.composed()[n], backward.composed()[n])
    for i in range(3):
        forward.forget(i)
    assert all(torch.count_nonzero(v) == 0 for v in forward.composed().values())


def test_composition_errors(tm):
    composition = DeltaComposition(keep_components=False)
    composition.add("a", delta_of(tm))
    with pytest.raises(KeyError, match="already"):
        composition.add("a", delta_of(tm))
    with pytest.raises(ValueError, match="pass its delta"):
        composition.forget("a")
    with pytest.raises(RuntimeError, match="not stored"):
        composition.components
    with pytest.raises(ValueError, match="positive"):
        composition.add("b", delta_of(tm), weight=0)
