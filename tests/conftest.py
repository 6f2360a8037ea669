"""Tiny models shared by the unit tests."""

import os
import sys

import pytest
import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import avalanche_tmc  # noqa: E402,F401  (lets torchvision import on a CPU-only torch)


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: end-to-end runs on real data (minutes)")


class TinyResNet(nn.Module):
    """Conv + BatchNorm stem, one residual block, max and average pooling, linear head."""

    def __init__(self, in_channels: int = 1, width: int = 4, num_classes: int = 3):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(in_channels, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU())
        self.block = nn.Sequential(
            nn.Conv2d(width, width, 3, padding=1, bias=False),
            nn.BatchNorm2d(width),
            nn.Tanh(),
            nn.Conv2d(width, width, 3, padding=1, bias=False),
            nn.BatchNorm2d(width),
        )
        self.fc = nn.Linear(width, num_classes)

    def forward(self, x):
        h = self.stem(x)
        h = torch.relu(h + self.block(h))
        h = torch.max_pool2d(h, 2)
        return self.fc(h.mean(dim=(2, 3)))


class TinyTransformer(nn.Module):
    """Patch embedding, one pre-norm transformer block (self-attention + GELU MLP), head."""

    def __init__(self, dim: int = 8, heads: int = 2, num_classes: int = 3):
        super().__init__()
        self.heads = heads
        self.patch = nn.Conv2d(1, dim, 4, stride=4)
        self.pos = nn.Parameter(torch.randn(1, 4, dim) * 0.1)
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        tokens = self.patch(x).flatten(2).transpose(1, 2) + self.pos  # (B, 4, dim)
        b, n, d = tokens.shape
        q, k, v = self.qkv(self.norm1(tokens)).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attn = torch.softmax(q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5, dim=-1)
        tokens = tokens + self.proj((attn @ v).transpose(1, 2).reshape(b, n, d))
        tokens = tokens + self.mlp(self.norm2(tokens))
        return self.head(self.norm(tokens).mean(dim=1))


def randomize_batchnorm(model: nn.Module, seed: int = 0) -> nn.Module:
    """Give BatchNorm layers non-trivial running statistics and affine parameters."""
    gen = torch.Generator().manual_seed(seed)
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.running_mean.copy_(torch.randn(module.num_features, generator=gen) * 0.5)
            module.running_var.copy_(torch.rand(module.num_features, generator=gen) + 0.5)
            module.weight.data.copy_(torch.randn(module.num_features, generator=gen) * 0.3 + 1)
            module.bias.data.copy_(torch.randn(module.num_features, generator=gen) * 0.3)
    return model


def random_delta(tangent_model, scale: float = 0.1, seed: int = 0):
    """A random δ with the model's names and shapes."""
    gen = torch.Generator().manual_seed(seed)
    return {
        n: torch.randn(s, generator=gen, dtype=torch.float64).to(p.dtype) * scale
        for (n, s), p in zip(tangent_model.delta_shapes().items(), tangent_model.delta_params)
    }


@pytest.fixture
def tiny_resnet():
    torch.manual_seed(0)
    return randomize_batchnorm(TinyResNet())


@pytest.fixture
def tiny_transformer():
    torch.manual_seed(0)
    return TinyTransformer()
