"""Ensembles and task masks against plain NumPy computations of the same formulas (the
library's on the tests' ``device``)."""

import numpy as np
import pytest
import torch

from avalanche_tmc.composition.ensemble import (
    class_mask,
    log_softmax_ensemble,
    logit_ensemble,
    mask_logits,
    nll_of_log_probs,
)


def _members(count=3, batch=5, classes=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, classes, generator=g, dtype=torch.float64) * 3 for _ in range(count)]


def _on(device, tensors):
    return [t.to(device) for t in tensors]


def _softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_logit_ensemble_is_the_normalised_weighted_sum(device):
    members = _members()
    weights = [1.0, 2.0, 5.0]
    expected = sum(w * m.numpy() for w, m in zip(weights, members)) / sum(weights)
    np.testing.assert_allclose(logit_ensemble(_on(device, members), weights).cpu().numpy(), expected, rtol=1e-12)
    np.testing.assert_allclose(logit_ensemble(_on(device, members)).cpu().numpy(),
                               np.mean([m.numpy() for m in members], 0), rtol=1e-12)


def test_log_softmax_ensemble_is_the_log_of_the_mean_softmax(device):
    members = _members()
    weights = [3.0, 1.0, 0.0]  # a zero weight drops a member
    probs = sum(w * _softmax(m.numpy()) for w, m in zip(weights, members)) / sum(weights)
    np.testing.assert_allclose(log_softmax_ensemble(_on(device, members), weights).exp().cpu().numpy(), probs,
                               rtol=1e-12)


def test_masked_classes_get_no_probability_and_the_rest_renormalises(device):
    members = _members(batch=2)
    mask = torch.tensor([[True, True, False, False], [False, False, True, True]])
    out = log_softmax_ensemble(_on(device, members), mask=mask.to(device)).exp().cpu().numpy()
    assert np.all(out[~mask.numpy()] == 0)
    np.testing.assert_allclose(out.sum(axis=1), 1.0, rtol=1e-12)
    # each member is the softmax over the task's classes only
    expected = np.mean([_softmax(np.where(mask.numpy(), m.numpy(), -np.inf)) for m in members], axis=0)
    np.testing.assert_allclose(out, expected, rtol=1e-12)
    assert mask_logits(members[0], None) is members[0]


def test_class_mask_marks_each_samples_task_classes(device):
    labels = torch.tensor([0, 1, 0, 2], device=device)
    mask = class_mask(labels, {0: [0, 1], 1: {3}, 2: range(2, 4)}, num_classes=4)
    expected = np.array([[1, 1, 0, 0], [0, 0, 0, 1], [1, 1, 0, 0], [0, 0, 1, 1]], dtype=bool)
    assert mask.device == labels.device
    np.testing.assert_array_equal(mask.cpu().numpy(), expected)
    with pytest.raises(KeyError, match="Task label 5 has no known classes"):
        class_mask(torch.tensor([5], device=device), {0: [0]}, num_classes=4)


def test_nll_of_log_probs_is_the_mean_negative_log_likelihood(device):
    log_probs = log_softmax_ensemble(_on(device, _members(batch=3)))
    targets = torch.tensor([0, 3, 1], device=device)
    expected = -np.mean([log_probs[i, t].item() for i, t in enumerate(targets.tolist())])
    assert nll_of_log_probs(log_probs, targets).item() == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("weights, message", [
    ([], "at least one member"), ([1.0, 2.0], "3 members but 2 weights"), ([1.0, -1.0, 1.0], "non-negative"),
    ([0.0, 0.0, 0.0], "positive finite sum"), ([1.0, float("nan"), 1.0], "non-negative and finite"),
])
def test_bad_weights_are_refused(weights, message):
    members = _members() if weights else []
    with pytest.raises(ValueError, match=message):
        logit_ensemble(members, weights or None)
