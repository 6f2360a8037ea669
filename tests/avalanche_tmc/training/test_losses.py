"""RescaledSquareLoss against mse_loss and a by-hand loop (on the tests' ``device``)."""

import pytest
import torch
import torch.nn.functional as F

from avalanche_tmc import RescaledSquareLoss


def test_alpha_beta_one_is_mse_against_one_hot(device):
    logits = torch.randn(7, 5).to(device)
    targets = torch.randint(0, 5, (7,)).to(device)
    expected = F.mse_loss(logits, F.one_hot(targets, 5).float())
    torch.testing.assert_close(RescaledSquareLoss(alpha=1.0, beta=1.0)(logits, targets), expected)


def test_matches_the_formula_by_hand(device):
    torch.manual_seed(0)
    logits = (torch.randn(6, 4, dtype=torch.float64) * 10).to(device)
    targets = torch.tensor([0, 3, 1, 1, 2, 0], device=device)
    alpha, beta = 2.5, 25.0
    total = 0.0
    for row, y in zip(logits.tolist(), targets.tolist()):
        k = len(row)
        total += (alpha * (row[y] - beta) ** 2 + sum(v * v for i, v in enumerate(row) if i != y)) / k
    expected = total / len(targets)
    got = RescaledSquareLoss(alpha=alpha, beta=beta)(logits, targets)
    assert got.item() == pytest.approx(expected, rel=1e-12)


def test_masked_classes_are_left_out(device):
    logits = torch.tensor([[3.0, float("-inf"), 1.0, float("-inf")]], device=device)
    targets = torch.tensor([2], device=device)
    expected = ((3.0 - 0) ** 2 + (1.0 - 5.0) ** 2) / 2
    assert RescaledSquareLoss(beta=5.0)(logits, targets).item() == pytest.approx(expected)


def test_gradient_and_bad_shapes(device):
    logits = torch.randn(3, 4).to(device).requires_grad_()
    RescaledSquareLoss()(logits, torch.tensor([0, 1, 2], device=device)).backward()
    assert torch.isfinite(logits.grad).all()
    with pytest.raises(ValueError, match="targets"):
        RescaledSquareLoss()(torch.randn(3, 4), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="logits"):
        RescaledSquareLoss()(torch.randn(3), torch.tensor([0, 1, 2]))
