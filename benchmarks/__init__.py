"""Benchmark runner for avalanche-tmc: offline datasets (:mod:`benchmarks.datasets`) and
ImageNet backbones (:mod:`benchmarks.backbones`)."""

import avalanche_tmc_torchvision_fallback  # noqa: F401  (first: lets torchvision import on a CPU-only torch)
