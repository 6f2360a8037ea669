"""Deprecated: moved to avalanche_tmc.composition.statistics (this path goes away in avalanche-tmc 0.3.0)."""
from avalanche_tmc._compat import moved_module_getattr

__getattr__ = moved_module_getattr(__name__)
