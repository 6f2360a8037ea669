"""Frozen-trunk split and feature caching reproduce the whole network exactly."""

import pytest
import torch
import torchvision
from torch.utils.data import TensorDataset

from benchmarks.networks.trunk import cache_features, split_backbone
from tests.helpers import TinyTransformer


@pytest.mark.parametrize("start_at", ["layer3", "layer4", "fc", "avgpool"])
def test_resnet_split_reproduces_the_model(start_at):
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=7).eval()
    x = torch.randn(3, 3, 32, 32)
    trunk, top = split_backbone(model, start_at, x)
    torch.testing.assert_close(top(trunk(x)), model(x))
    assert all(not p.requires_grad for p in trunk.parameters())


def test_split_inside_a_sequential_child():
    torch.manual_seed(0)
    model = torchvision.models.mobilenet_v3_small(num_classes=5).eval()
    x = torch.randn(2, 3, 32, 32)
    trunk, top = split_backbone(model, "features.9", x)
    torch.testing.assert_close(top(trunk(x)), model(x))


def test_non_chain_models_are_refused_with_advice():
    with pytest.raises(ValueError, match="freeze-until none"):
        split_backbone(TinyTransformer(), "norm1", torch.randn(2, 1, 8, 8))
    with pytest.raises(ValueError, match="not a child"):
        split_backbone(torchvision.models.resnet18(), "nothing", torch.randn(2, 3, 32, 32))


def test_cached_features_keep_targets_and_domains():
    model = torchvision.models.resnet18(num_classes=4).eval()
    x, y = torch.randn(10, 3, 32, 32), torch.arange(10) % 4
    data = TensorDataset(x, y)
    data.domains = torch.arange(10) % 2
    trunk, top = split_backbone(model, "layer4", x[:2])
    cached = cache_features(trunk, data, batch_size=4)
    assert torch.equal(cached.targets, y) and torch.equal(cached.domains, data.domains)
    torch.testing.assert_close(top(cached.tensors[0]), model(x))
