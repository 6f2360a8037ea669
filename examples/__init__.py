"""Examples of the library alone (``python -m examples.<name>``)."""

import avalanche_tmc_torchvision_fallback  # noqa: F401  (first: lets torchvision import on a CPU-only torch)
