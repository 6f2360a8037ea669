"""Sufficient-statistics composition against ridge on the union of the data (float64; the
library's on the tests' ``device``, the references on the CPU)."""

import pytest
import torch

from avalanche_tmc.composition.statistics import (
    RandomReLUFeatures,
    StatisticsComposition,
    class_means,
    gcv_ridge_lambda,
    head_statistics,
    ridge_head,
)

C, D = 6, 10


def tasks(seed=0, device="cpu"):
    gen = torch.Generator().manual_seed(seed)
    out = []
    for t in range(3):
        y = torch.arange(2 * t, 2 * t + 2).repeat(15)
        x = torch.randn(len(y), D, generator=gen, dtype=torch.float64) + y.unsqueeze(1).double() * 0.3
        out.append((x.to(device), y.to(device)))
    return out


def ridge_on_union(data, lam, beta):
    x = torch.cat([d[0] for d in data]).cpu()
    y = beta * torch.nn.functional.one_hot(torch.cat([d[1] for d in data]).cpu(), C).double()
    return torch.linalg.solve(x.T @ x + lam * torch.eye(D, dtype=torch.float64), x.T @ y), x, y


def test_summed_statistics_give_the_ridge_head_of_the_union(device):
    data = tasks(device=device)
    comp = StatisticsComposition()
    for t, (x, y) in enumerate(data):
        comp.add(t, head_statistics(x, y, C, beta=25.0))
    w, _ = ridge_head(comp.summed(), lam=0.7)
    expected, _, _ = ridge_on_union(data, 0.7, 25.0)
    assert w.device == data[0][0].device
    torch.testing.assert_close(w.cpu(), expected, rtol=1e-10, atol=1e-10)


def test_forgetting_equals_never_adding_and_order_does_not_matter(device):
    data = tasks(1, device)
    full, without, reversed_order = StatisticsComposition(), StatisticsComposition(), StatisticsComposition()
    for t, (x, y) in enumerate(data):
        full.add(t, head_statistics(x, y, C))
        if t != 1:
            without.add(t, head_statistics(x, y, C))
    for t, (x, y) in reversed(list(enumerate(data))):
        reversed_order.add(t, head_statistics(x, y, C))
    full.forget(1)
    for key in full.summed():
        torch.testing.assert_close(full.summed()[key], without.summed()[key], rtol=1e-12, atol=1e-10)
    full.forget(0)
    full.forget(2)
    full.add(0, head_statistics(*data[0], C))
    full.add(1, head_statistics(*data[1], C))
    full.add(2, head_statistics(*data[2], C))
    for key in full.summed():
        torch.testing.assert_close(full.summed()[key], reversed_order.summed()[key], rtol=1e-12, atol=1e-10)


def test_gcv_matches_a_direct_computation_on_the_data(device):
    data = tasks(2, device)
    stats = StatisticsComposition()
    for t, (x, y) in enumerate(data):
        stats.add(t, head_statistics(x, y, C, beta=5.0))
    best, scores = gcv_ridge_lambda(stats.summed())
    assert best in scores
    for lam, score in list(scores.items())[::3]:
        w, x, y = ridge_on_union(data, lam, 5.0)
        rss = ((y - x @ w) ** 2).sum()
        hat = x @ torch.linalg.solve(x.T @ x + lam * torch.eye(D, dtype=torch.float64), x.T)
        n = len(x)
        direct = float(rss) / (n * (1 - float(torch.trace(hat)) / n) ** 2)
        assert score == pytest.approx(direct, rel=1e-8)


def test_gcv_never_picks_an_interpolating_lambda_with_more_features_than_samples(device):
    gen = torch.Generator().manual_seed(5)
    y = torch.arange(C).repeat(5).to(device)  # 30 samples
    x = torch.relu(torch.randn(len(y), 200, generator=gen, dtype=torch.float64)).to(device)  # 200 features
    stats = head_statistics(x, y, C)
    lam, scores = gcv_ridge_lambda(stats)
    evals = torch.linalg.eigvalsh(stats["gram"]).clamp(min=0)
    df = float((evals / (evals + lam)).sum())
    assert df <= 0.9 * len(y)
    assert any(v == float("inf") for v in scores.values())  # the tiny penalties were excluded


def test_class_means_and_random_features(device):
    x, y = tasks(3, device)[0]
    stats = head_statistics(x, y, C)
    means = class_means(stats)
    torch.testing.assert_close(means[0], x[y == 0].mean(0))
    assert torch.count_nonzero(means[5]) == 0
    proj_a, proj_b = RandomReLUFeatures(D, 50, seed=4).to(device), RandomReLUFeatures(D, 50, seed=4).to(device)
    torch.testing.assert_close(proj_a(x), proj_b(x))
    assert (proj_a(x) >= 0).all() and proj_a(x).shape == (len(x), 50)


def test_bad_inputs(device):
    x, y = tasks(device=device)[0]
    with pytest.raises(ValueError, match="Targets"):
        head_statistics(x, y + 10, C)
    comp = StatisticsComposition(keep_components=False)
    comp.add("a", head_statistics(x, y, C))
    with pytest.raises(ValueError, match="pass its statistics"):
        comp.forget("a")
    with pytest.raises(ValueError, match="Incompatible"):
        comp.add("b", head_statistics(x[:, :4], y, C))


def test_the_jitter_fallback_stays_on_the_grams_device(monkeypatch):
    """Tensors the library creates live on their partner's device (checked on the ``meta``
    device, where any CPU tensor beside it is an error, so no GPU is needed)."""
    from avalanche_tmc.composition import statistics

    real, calls = torch.linalg.eigh, []

    def eigh_failing_once(gram):
        calls.append(gram.device)
        if len(calls) == 1:
            raise torch.linalg.LinAlgError("did not converge")
        return real(gram)

    monkeypatch.setattr(torch.linalg, "eigh", eigh_failing_once)
    evals, evecs = statistics._eigh(torch.zeros(4, 4, device="meta"), scale=1.0)
    assert calls == [torch.device("meta")] * 2 and evals.device.type == evecs.device.type == "meta"
