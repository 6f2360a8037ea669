"""Fixtures shared by the training tests."""

import pytest

from tests.helpers import digits_benchmark, digits_splits


@pytest.fixture(scope="module")
def digits3():
    """Three class-incremental experiences of scikit-learn's digits (no pre-training split)."""
    _, train, test = digits_splits(seed=0, pretrain_per_class=0)
    return digits_benchmark(train, test, n_experiences=3)
