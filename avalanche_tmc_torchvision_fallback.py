"""Let torchvision import when its compiled operators cannot load.

Why this exists: PyPI's ``torchvision==0.28.0`` wheel is a CUDA build. Installed next to
a CPU-only ``torch==2.13.0`` its ``_C.so`` cannot load (it links ``libtorch_cuda.so``),
and ``import torchvision`` -- hence ``import avalanche`` and ``import timm`` -- dies in
``torchvision/_meta_registrations.py`` with
``RuntimeError: operator torchvision::nms does not exist``.

What it does: :func:`install` puts a hook on ``sys.meta_path`` that runs once, just before
torchvision is first imported. The hook tries to load torchvision's own ``_C`` library;
only if that fails does it declare the two operators the import needs
(``torchvision::nms`` and ``torchvision::qnms``, whose kernels raise a clear error). On a
normal CPU or CUDA install the library loads and the hook does nothing else.

Importing this module installs the hook (:func:`install`, idempotent), and imports
neither torch nor torchvision, so it is cheap to load from a ``.pth`` file at interpreter
start (``make`` writes one into ``.venv``, the wheel ships one). Without that file, a
package that may import torchvision imports this module first, in its ``__init__``:
``avalanche_tmc`` (the one place in the library), and in a checkout ``benchmarks``,
``baselines``, ``examples`` and ``tests``. Their modules then import in the usual order.
"""

import importlib.abc
import importlib.util
import os
import sys

_STATE = {"applied": False, "fallback": False}


def _load_compiled_ops(torch, package_dir: str) -> bool:
    """Try torchvision's own compiled ops; True if they loaded."""
    for name in os.listdir(package_dir):
        if name.startswith("_C") and name.endswith((".so", ".pyd")):
            try:
                torch.ops.load_library(os.path.join(package_dir, name))
                return True
            except (OSError, RuntimeError):
                return False
    return False


def _declare_fallback_ops(torch) -> None:
    """Declare the operators whose fake kernels torchvision registers at import time.

    Their kernels raise: detection ops (``torchvision.ops.nms`` ...) need the compiled
    library anyway and torchvision itself refuses them with its own message.
    """

    def _unavailable(dets, scores, iou_threshold):
        raise RuntimeError(
            "torchvision's compiled ops could not load (a CUDA torchvision wheel next to a "
            "CPU torch). Models and transforms work; detection ops need a matching build."
        )

    lib = torch.library.Library("torchvision", "DEF")
    for op in ("nms", "qnms"):
        lib.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        lib.impl(op, _unavailable, "CompositeExplicitAutograd")
    _STATE["library"] = lib  # a Library's definitions live as long as the object


def apply() -> bool:
    """Make ``import torchvision`` work; return True if the fallback had to be declared.

    Safe to call many times; does nothing if torchvision is not installed, is already
    imported, or its compiled ops load.
    """
    if _STATE["applied"]:
        return _STATE["fallback"]
    _STATE["applied"] = True
    if "torchvision" in sys.modules:
        return False
    spec = importlib.util.find_spec("torchvision")
    if spec is None or spec.origin is None:
        return False
    import torch

    if not _load_compiled_ops(torch, os.path.dirname(spec.origin)):
        _declare_fallback_ops(torch)
        _STATE["fallback"] = True
    return _STATE["fallback"]


class _TorchvisionImportHook(importlib.abc.MetaPathFinder):
    """Runs :func:`apply` just before the first ``import torchvision``."""

    def find_spec(self, fullname, path=None, target=None):  # noqa: D401 - importlib API
        if fullname == "torchvision":
            sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _TorchvisionImportHook)]
            apply()
        return None  # let the normal finders import it


def install() -> None:
    """Arrange for :func:`apply` to run before torchvision is first imported."""
    if "torchvision" in sys.modules or _STATE["applied"]:
        return
    if not any(isinstance(f, _TorchvisionImportHook) for f in sys.meta_path):
        sys.meta_path.insert(0, _TorchvisionImportHook())


install()  # on import: see the module docstring
