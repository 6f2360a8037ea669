"""Choosing learning rates and epochs on a validation split: the grid, its edges and the
search (:mod:`.grid`), below the runner; the tuning run, which trains the trials with the
runner, is the runner's (:mod:`benchmarks.runner.tuning`)."""
