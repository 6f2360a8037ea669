"""Install hints and the missing-package error, shared by the dataset loaders and the
backbones: every "this needs package X" message names the exact install command."""

import importlib.metadata
import importlib.util
from pathlib import Path

__all__ = ["PIP", "BENCHMARK_EXTRAS", "MissingPackageError", "require", "package_dir", "package_version"]

# Run from the checkout (the runner is not installed with the library): the constraints file
# keeps pip from replacing the CPU torch with a CUDA build. ``make`` users' .venv/bin/pip works too.
PIP = "python -m pip install -c constraints.txt"
BENCHMARK_EXTRAS = "python -m pip install -c constraints.txt '.[benchmarks]'"


class MissingPackageError(ImportError):
    """An optional package a dataset or backbone needs is not installed (message: the install command)."""


def require(module: str, install: str, what: str) -> None:
    """Raise MissingPackageError naming ``install`` if ``module`` is not importable."""
    if importlib.util.find_spec(module) is None:
        raise MissingPackageError(f"{what} needs the Python package `{module}`: run `{install}` in the checkout "
                                  f"(or `{BENCHMARK_EXTRAS}` for everything the runner uses)")


def package_dir(module: str, install: str) -> Path:
    """Folder of an installed package, found without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise MissingPackageError(f"Python package `{module}` is not installed: run `{install}`")
    return Path(list(spec.submodule_search_locations)[0])


def package_version(dist: str) -> str:
    """Installed version of distribution ``dist`` ('absent' if it is not installed)."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "absent"
