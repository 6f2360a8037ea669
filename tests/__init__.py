"""The test suite; its tree mirrors the packages (tests/avalanche_tmc, tests/baselines, ...)."""

import avalanche_tmc_torchvision_fallback  # noqa: F401  (first: lets torchvision import on a CPU-only torch)
