"""Keep the working directory off ``sys.path`` for the command line (frozen standard-library
modules only, ``os`` and ``sys``, so that it runs before anything a planted file could
replace: the package's ``__init__`` calls it first under ``python -m avalanche_tmc``)."""

import os
import sys

_done = False


def drop_working_directory() -> None:
    """Remove the working directory that ``python -m`` puts first on ``sys.path`` (once per
    process), so that nothing the command imports later (scikit-learn, safetensors, a
    factory's dependencies) can be replaced by a file of the same name there.
    ``PYTHONPATH`` entries stay; ``python -P`` already leaves it out."""
    global _done
    if not _done and sys.path and not getattr(sys.flags, "safe_path", False) and sys.path[0] in ("", os.getcwd()):
        del sys.path[0]
    _done = True


def running_as_main(package: str) -> bool:
    """True while ``python -m package`` (or ``-m package.submodule``) is locating its module,
    i.e. while the package is imported on the way to its ``__main__``: ``sys.argv[0]`` is
    then ``"-m"`` and the module name is the original argument just before the script's
    arguments. False when the package's own folder is the working directory's checkout (the
    working directory then holds the package itself, and its modules are the package's)."""
    argv, original = sys.argv, getattr(sys, "orig_argv", None)
    if not argv or argv[0] != "-m" or not original or len(original) < len(argv):
        return False
    name = original[-len(argv)]
    if name.startswith("-"):  # `-mNAME` or combined flags such as `-umNAME`
        name = name.partition("m")[2]
    if name != package and not name.startswith(package + "."):
        return False
    here = os.path.dirname(os.path.dirname(os.path.abspath(sys.modules[package].__file__ or "")))
    return here != os.getcwd()
