"""Fixtures and markers shared by the tests (the helpers themselves live in tests/helpers.py)."""

import pytest
import torch

from tests.helpers import TinyResNet, TinyTransformer, randomize_batchnorm


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: end-to-end runs on real data (minutes)")


@pytest.fixture
def tiny_resnet():
    torch.manual_seed(0)
    return randomize_batchnorm(TinyResNet())


@pytest.fixture
def tiny_transformer():
    torch.manual_seed(0)
    return TinyTransformer()
