"""Choosing learning rates and epochs on a validation split: the grid and its edges
(:mod:`.grid`) and the tuning run over the runner (:mod:`.run`)."""
