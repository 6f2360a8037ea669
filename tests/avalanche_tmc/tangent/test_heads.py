"""find_head / replace_head: the classification layer found by tracing and replaced by a seeded one."""

import pytest
import torch
from torch import nn

from avalanche_tmc import TangentModel, find_head, replace_head
from tests.helpers import TinyResNet


def test_new_head_is_seeded_and_sized():
    a = TangentModel(TinyResNet(num_classes=3), num_classes=7, head_seed=11)
    b = TangentModel(TinyResNet(num_classes=3), num_classes=7, head_seed=11)
    assert a.model.fc.out_features == 7
    torch.testing.assert_close(a.model.fc.weight, b.model.fc.weight)
    assert set(a.delta_shapes()) == {n for n, _ in a.model.named_parameters()}


def test_model_without_linear_head_needs_an_explicit_head_only_when_one_is_used():
    with pytest.raises(ValueError, match="head="):
        TangentModel(nn.Sequential(nn.Conv2d(1, 2, 3)), num_classes=3)
    with pytest.raises(ValueError, match="head="):
        TangentModel(nn.Sequential(nn.Conv2d(1, 2, 3)), linearize="head")
    features = TangentModel(nn.Sequential(nn.Conv2d(1, 2, 3), nn.Flatten()))
    assert features(torch.randn(1, 1, 4, 4)).shape == (1, 8)


def test_find_head_walks_back_through_shape_and_scalar_operations():
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Linear(4, 6)
            self.classifier = nn.Sequential(nn.Dropout(0.1), nn.Linear(6, 3))

        def forward(self, x):
            return self.classifier(torch.relu(self.body(x))).flatten(1) * 2.0

    net = Scaled()
    assert find_head(net) == "classifier.1"
    with pytest.raises(ValueError, match="does not produce the model's output"):
        replace_head(net, 5, head="body")
    replace_head(net, 5, seed=3)
    assert net(torch.randn(2, 4)).shape == (2, 5)
    with torch.random.fork_rng():
        torch.manual_seed(3)
        expected = nn.Linear(6, 5)
    torch.testing.assert_close(net.classifier[1].weight, expected.weight)


@pytest.mark.parametrize("training", [True, False])
def test_finding_and_replacing_the_head_leave_every_buffer_and_the_mode_alone(training):
    """torch.fx runs each forward's Python while tracing: in training mode BatchNorm would
    count a batch, changing the base point (and its hash) without any data seen."""
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(36, 5))
    net.train()(torch.randn(2, 3, 5, 5))  # running statistics and a batch count that is not 0
    net.train(training)
    before = {n: b.clone() for n, b in net.named_buffers()}
    assert find_head(net) == "4"
    replace_head(net, 7)
    assert net.training is training
    TangentModel(net)  # (it traces the network too)
    assert all(torch.equal(before[n], b) for n, b in net.named_buffers())
