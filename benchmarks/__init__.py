"""Benchmark runner for avalanche-tmc: offline datasets (:mod:`benchmarks.datasets`) and
ImageNet backbones (:mod:`benchmarks.backbones`)."""
