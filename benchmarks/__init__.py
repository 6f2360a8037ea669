"""Benchmark runner for avalanche-tmc. At the root only the commands users type:
``python -m benchmarks.run`` (:mod:`benchmarks.run`) and ``python -m benchmarks.report``
(:mod:`benchmarks.report`); the sub-packages say what they hold (docs/layout.md):
``datasets``, ``networks``, ``protocol``, ``methods``, ``runner``, ``tuning``, ``results`` and
``tools`` (which use the runner and are never used by it)."""

import avalanche_tmc_torchvision_fallback  # noqa: F401  (first: lets torchvision import on a CPU-only torch)
