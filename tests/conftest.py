"""Fixtures and markers shared by the tests (the helpers themselves live in tests/helpers.py).

The device the tests run on: ``--device`` (cpu, cuda, cuda:N), else
``$AVALANCHE_TMC_TEST_DEVICE``, else cpu; the tests that train, compose or exchange take it
from the ``device`` fixture. The two-process tests' backend: ``--dist-backend``, else
``$AVALANCHE_TMC_TEST_DIST_BACKEND``, else gloo on CPU and NCCL on CUDA with a GPU per process
(``dist_backend`` fixture). Asking for what this machine cannot do is a usage error, never a
silent CPU run."""

import os

import pytest
import torch

from benchmarks.networks.arithmetic import runner_arithmetic
from tests.helpers import (
    BACKEND_VARIABLE,
    DEVICE_VARIABLE,
    TinyResNet,
    TinyTransformer,
    prepare_device,
    randomize_batchnorm,
    resolve_backend,
    resolve_device,
)

# The suite computes as the runner does: the CPU arithmetic pinned to AVX2 before any test
# runs an operation (AVALANCHE_TMC_ARITHMETIC=native leaves the CPU's own, to see the
# fingerprint test of tests/benchmarks/test_arithmetic.py fail on an AVX-512 machine).
ARITHMETIC = runner_arithmetic()

_DEVICE = pytest.StashKey[torch.device]()
_BACKEND = pytest.StashKey[str]()


def pytest_addoption(parser):
    group = parser.getgroup("avalanche-tmc")
    group.addoption("--device", default=None,
                    help=f"device of the strategy, composition, statistics, component-file and distributed tests: "
                         f"cpu, cuda or cuda:N (default: ${DEVICE_VARIABLE}, else cpu)")
    group.addoption("--dist-backend", default=None,
                    help=f"torch.distributed backend of the two-process tests: gloo or nccl (default: "
                         f"${BACKEND_VARIABLE}, else gloo on CPU, NCCL on CUDA with a GPU per process)")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: end-to-end runs on real data (minutes)")
    name = config.getoption("--device") or os.environ.get(DEVICE_VARIABLE) or "cpu"
    backend = config.getoption("--dist-backend") or os.environ.get(BACKEND_VARIABLE) or None
    try:
        device = resolve_device(name)
    except ValueError as error:
        raise pytest.UsageError(f"--device / ${DEVICE_VARIABLE}: {error}") from None
    try:
        backend = resolve_backend(backend, device)
    except ValueError as error:
        raise pytest.UsageError(f"--dist-backend / ${BACKEND_VARIABLE}: {error}") from None
    prepare_device(device)
    config.stash[_DEVICE], config.stash[_BACKEND] = device, backend


def pytest_report_header(config):
    return (f"avalanche-tmc tests on device {config.stash[_DEVICE]}, distributed backend {config.stash[_BACKEND]}; "
            f"{ARITHMETIC.describe()}")


@pytest.fixture(scope="session")
def device(pytestconfig) -> torch.device:
    """The device the tests run on (``torch.device``)."""
    return pytestconfig.stash[_DEVICE]


@pytest.fixture(scope="session")
def dist_backend(pytestconfig) -> str:
    """The ``torch.distributed`` backend of the two-process tests: gloo or nccl."""
    return pytestconfig.stash[_BACKEND]


@pytest.fixture
def tiny_resnet():
    torch.manual_seed(0)
    return randomize_batchnorm(TinyResNet())


@pytest.fixture
def tiny_transformer():
    torch.manual_seed(0)
    return TinyTransformer()
