"""Benchmark runner for avalanche-tmc: offline datasets (:mod:`benchmarks.datasets`) and
ImageNet backbones (:mod:`benchmarks.backbones`)."""

import warnings

import avalanche_tmc_torchvision_fallback  # noqa: F401  (first: lets torchvision import on a CPU-only torch)

# Known noise of avalanche-lib 0.6.0: an optional QP solver it never uses here, and the
# replay buffer's own deprecation notice printed at every experience.
warnings.filterwarnings("ignore", message="no QP solver found")
warnings.filterwarnings("ignore", category=DeprecationWarning, module="avalanche")
