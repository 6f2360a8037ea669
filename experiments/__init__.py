"""One-off studies built on the benchmark runner (not part of the comparison table):
``python -m experiments.<name>``. They call the runner's functions with explicit
parameters; nothing in ``benchmarks`` or the library imports them."""
