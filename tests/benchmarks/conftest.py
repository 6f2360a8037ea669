"""Fixtures the runner's tests share: a small generated Caltech-style folder and a file of
random ResNet-18 weights (what a paper preset reads; nothing is downloaded)."""

import pytest

from tests.helpers import random_resnet18_weights, small_caltech_folder


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A generated Caltech-256-style folder: 5 classes of 7 JPEGs."""
    return small_caltech_folder(tmp_path_factory.mktemp("caltech"))


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    """A state-dict file of a ResNet-18 with seeded random weights."""
    return random_resnet18_weights(tmp_path_factory.mktemp("weights") / "resnet18-random.pth")
