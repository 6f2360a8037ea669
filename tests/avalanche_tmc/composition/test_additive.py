"""The one additive composition (issue 21): δ composition, statistics composition, component
files and the parallel sum are the same class and agree with independent computations;
forgetting a member needs that very member back; the total weight stays finite. On the
tests' ``device``."""

import ast
from collections import OrderedDict
from pathlib import Path

import pytest
import torch

from avalanche_tmc import DeltaComposition, TangentModel, TMCStrategy, TrainingFreeStrategy, compose
from avalanche_tmc.composition.additive import AdditiveComposition, tensors_sha256
from avalanche_tmc.composition.statistics import StatisticsComposition, head_statistics
from avalanche_tmc.training.protocols import ComposableLearner
from tests.helpers import NUM_CLASSES, TinyResNet, random_delta, to_device

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def tm(device):
    torch.manual_seed(0)
    return TangentModel(TinyResNet(), num_classes=NUM_CLASSES).to(device)


def delta_of(tm, seed, device):
    """A random δ of ``tm`` on ``device``."""
    return to_device(random_delta(tm, seed=seed), device)


def test_every_composition_is_the_additive_class():
    assert issubclass(DeltaComposition, AdditiveComposition) and issubclass(StatisticsComposition, AdditiveComposition)
    assert issubclass(TMCStrategy, ComposableLearner) and issubclass(TrainingFreeStrategy, ComposableLearner)
    protocol = [n for n, v in vars(ComposableLearner).items() if callable(v) and not n.startswith("_")]
    assert {"learned", "replace_learned", "installed", "learned_classes", "base_network"} <= set(protocol)
    for cls in (TMCStrategy, TrainingFreeStrategy):
        for name in protocol:
            if name != "check_independent":  # a no-op unless components depend on each other
                assert getattr(cls, name) is not getattr(ComposableLearner, name), (cls.__name__, name)


def test_weighted_sum_add_forget_merge_against_a_direct_computation(tm, device):
    deltas = [delta_of(tm, s, device) for s in range(3)]
    weights = [0.5, 2.0, 3.0]
    composition = DeltaComposition(keep_components=False)
    for key, (d, w) in enumerate(zip(deltas, weights)):
        composition.add(key, d, w)
    for name in deltas[0]:
        expected = sum(w * d[name].double() for d, w in zip(deltas, weights)) / sum(weights)
        torch.testing.assert_close(composition.composed()[name].double(), expected, rtol=1e-5, atol=1e-7)
    composition.forget(1, deltas[1])
    for name in deltas[0]:
        expected = (0.5 * deltas[0][name].double() + 3.0 * deltas[2][name].double()) / 3.5
        torch.testing.assert_close(composition.composed()[name].double(), expected, rtol=1e-5, atol=1e-6)
    # merge: two members from their sum (another process, a file) equal adding them one by one
    merged = DeltaComposition(keep_components=False)
    merged.add(0, deltas[0], 0.5)
    other = DeltaComposition(keep_components=False)
    other.add(1, deltas[1], 2.0)
    other.add(2, deltas[2], 3.0)
    merged.merge(other.weights, other.summed(), checksums=other.checksums)
    one_by_one = DeltaComposition(keep_components=False)
    for key, (d, w) in enumerate(zip(deltas, weights)):
        one_by_one.add(key, d, w)
    assert merged.keys == [0, 1, 2] and merged.total_weight == 5.5
    for name, value in one_by_one.composed().items():
        torch.testing.assert_close(merged.composed()[name], value, rtol=1e-6, atol=1e-7)
    merged.forget(1, deltas[1])  # a merged member is forgotten like any other (its checksum travelled)
    assert merged.keys == [0, 2]


def test_statistics_are_summed_unscaled_with_their_count_as_weight(device):
    x, y = torch.randn(10, 5).to(device), (torch.arange(10) % 3).to(device)
    a, b = head_statistics(x[:4], y[:4], 3), head_statistics(x[4:], y[4:], 3)
    composition = StatisticsComposition()
    composition.add(0, a)
    composition.add(1, b)
    whole = head_statistics(x, y, 3)
    for key, value in whole.items():
        torch.testing.assert_close(composition.summed()[key], value)
    assert composition.weights == {0: 4.0, 1: 6.0}


def test_forget_without_kept_components_needs_the_very_member(tm, device):
    """Issue 21: with keep_components=False, forget(2, delta=δ_0) was accepted."""
    deltas = [delta_of(tm, s, device) for s in range(3)]
    composition = DeltaComposition(keep_components=False)
    for key, d in enumerate(deltas):
        composition.add(key, d)
    before = composition.composed()
    with pytest.raises(ValueError, match="checksum differs"):
        composition.forget(2, deltas[0])
    assert composition.keys == [0, 1, 2]
    assert all(torch.equal(before[n], composition.composed()[n]) for n in before)
    as_float64 = OrderedDict((n, t.double()) for n, t in deltas[2].items())
    with pytest.raises(ValueError, match="checksum differs"):
        composition.forget(2, as_float64)  # not the bytes that were added
    composition.forget(2, deltas[2])
    assert composition.keys == [0, 1]
    assert composition.checksums == {0: tensors_sha256(deltas[0]), 1: tensors_sha256(deltas[1])}


def test_total_weight_never_overflows(tm, device):
    """Issue 21: two weights of 1e308 gave W = inf and a zero δ."""
    a, b = ({n: t.double() for n, t in delta_of(tm, s, device).items()} for s in (1, 2))  # w·δ fits in float64
    composition = DeltaComposition()
    composition.add(0, a, 1e308)
    with pytest.raises(ValueError, match="infinite|not finite"):
        composition.add(1, b, 1e308)
    assert composition.keys == [0] and composition.total_weight == 1e308
    for name, value in a.items():
        torch.testing.assert_close(composition.composed()[name], value)
    with pytest.raises(ValueError, match="infinite"):
        composition.merge({1: 1e308}, b, components={1: b})
    assert composition.keys == [0]


def test_snapshot_and_restore_are_exact(tm, device):
    composition = DeltaComposition(keep_components=False)
    composition.add(0, delta_of(tm, 1, device))
    state = composition.snapshot()
    composition.add(1, delta_of(tm, 2, device))
    composition.restore(state)
    assert composition.keys == [0] and composition.checksums.keys() == {0}
    assert isinstance(composition.empty_like(), DeltaComposition) and len(composition.empty_like()) == 0


def _imports(path: Path):
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_no_caller_guesses_the_strategy_type():
    """Files and processes act on strategies through ComposableLearner only (no private
    fields, no strategy types); the import rules themselves are tests/test_dependencies.py's."""
    library = ROOT / "avalanche_tmc"
    callers = [library / "distributed.py", library / "distributed_setup.py", *sorted((library / "files").glob("*.py"))]
    assert len(callers) > 5
    for path in callers:
        text = path.read_text()
        assert "tangent_plugin" not in text and "isinstance(strategy, TrainingFree" not in text, path.name
        assert "._sum" not in text and "._keys" not in text and "._components" not in text, path.name
    assert "training_free" not in _imports(library / "distributed.py")
    assert "composition" in _imports(library / "distributed.py")


@pytest.mark.parametrize("weights", [[1e308, 1e308], [float("nan"), 1.0], [float("inf"), 1.0], [0.0, 0.0]])
def test_ensemble_and_compose_weights_must_sum_to_a_positive_finite_number(weights):
    from avalanche_tmc.composition.ensemble import log_softmax_ensemble, logit_ensemble

    logits = [torch.randn(2, 3), torch.randn(2, 3)]
    for ensemble in (logit_ensemble, log_softmax_ensemble):
        with pytest.raises(ValueError, match="finite"):
            ensemble(logits, weights)
    deltas = [{"w": torch.randn(3, dtype=torch.float64)}, {"w": torch.randn(3, dtype=torch.float64)}]
    with pytest.raises(ValueError, match="finite"):
        compose(deltas, weights)
