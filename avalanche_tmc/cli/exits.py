"""The command line's exit codes, its two errors, and the mapping from an error to its code."""

import errno
import sys
from typing import Optional, Tuple

__all__ = ["EXIT_OK", "EXIT_ERROR", "EXIT_USAGE", "EXIT_BAD_FILE", "EXIT_INCOMPATIBLE", "EXIT_FACTORY",
           "EXIT_TRAINING", "EXIT_PIPE", "EXIT_INTERRUPTED", "EXIT_CODES", "FactoryError", "UsageError", "exit_code",
           "describe"]

EXIT_OK = 0
"""Success."""
EXIT_ERROR = 1
"""An unexpected error (a bug: the traceback is printed; please report it)."""
EXIT_USAGE = 2
"""A bad command line: unknown command or option, a missing argument, a value out of its
range, an experience id the data does not have, an ``--out`` that cannot be written or that
is one of the input files (``compose``, ``forget``: the same file by any path); an output or log
file that could not be written after all (a full disk, the file-size limit, a read-only folder:
any ``OSError``, named with its file and what to do)."""
EXIT_BAD_FILE = 3
"""A file that cannot be used: missing, truncated, not a component file, corrupted or edited."""
EXIT_INCOMPATIBLE = 4
"""Files that do not combine: another base model, head size or linearized set, an
experience twice, the same content under two experience ids, files trained with different
``--weighting`` (``compose`` without ``--mixed-weighting``), forgetting a file that is not
in the composition; or an output file that exists (without ``--overwrite``), also one that
another process created while this one worked: of two writers exactly one succeeds."""
EXIT_FACTORY = 5
"""The model or data factory cannot be imported, fails, rejects an ``--option``, or calls
``sys.exit`` (at import or when called)."""
EXIT_TRAINING = 6
"""Training failed: it diverged, or a rank of a parallel (torchrun) run failed; or the
process group could not be set up (an incomplete launcher environment)."""
EXIT_PIPE = 141
"""The output pipe was closed by the reader (``| head``): exits quietly (128 + SIGPIPE)."""
EXIT_INTERRUPTED = 130
"""Interrupted (Ctrl-C): 128 + SIGINT."""

EXIT_CODES = """exit codes:
  0  success
  1  unexpected error (a bug; the traceback is printed)
  2  bad command line (unknown option, missing argument, a value out of range, unknown experience
     id, an --out that cannot be written or that is one of the input files); a file that could
     not be written (disk full, file-size limit, read-only folder, a foreign log file)
  3  unusable file (missing, truncated, not an avalanche-tmc file, corrupted or edited)
  4  files that do not combine (other base model, head size or linearized set; an experience
     twice; the same content under two ids; different --weighting without --mixed-weighting;
     forgetting a file that is not in the composition); or an --out that exists, also one created
     by another process meanwhile (without --overwrite)
  5  the model or data factory cannot be imported, fails, rejects an --option or calls sys.exit
  6  training failed (diverged, or a rank of a torchrun run failed) or the torchrun set-up failed
     (e.g. WORLD_SIZE set without torchrun)
141  the output pipe was closed (e.g. '| head'): nothing more is printed"""
"""The exit codes as every ``--help`` lists them."""


class FactoryError(RuntimeError):
    """The model or data factory could not be imported or called."""


class UsageError(ValueError):
    """A command line that parses but cannot be carried out (exit code 2)."""


def _training_errors() -> Tuple[type, ...]:
    """``DivergenceError`` (raised by every learner whose training diverges: tangent,
    training-free head, adaptation) and ``ParallelTrainingError``, from their modules if a command imported
    them (an error of a module never imported cannot occur, and importing them would cost
    compose, forget and inspect Avalanche's start-up of several seconds)."""
    return tuple(getattr(sys.modules[module], name) for module, name in (
        ("avalanche_tmc.training.divergence", "DivergenceError"),
        ("avalanche_tmc.distributed_setup", "ParallelTrainingError")) if module in sys.modules)


def exit_code(error: BaseException) -> Optional[int]:
    """The documented exit code of ``error``, or None for an unexpected one (a bug)."""
    from ..files import ComponentExistsError, ComponentFileError, IncompatibleComponentsError

    failures = ((UsageError, EXIT_USAGE), (ComponentFileError, EXIT_BAD_FILE),
                ((IncompatibleComponentsError, ComponentExistsError), EXIT_INCOMPATIBLE),
                (FactoryError, EXIT_FACTORY), (_training_errors(), EXIT_TRAINING), (OSError, EXIT_USAGE))
    return next((code for kinds, code in failures if isinstance(error, kinds)), None)


_ADVICE = {errno.ENOSPC: "the disk is full: free space, or write elsewhere",
           errno.EDQUOT: "the disk quota is used up: free space, or write elsewhere",
           errno.EFBIG: "the file would exceed the file-size limit (ulimit -f): raise it, or write elsewhere",
           errno.EROFS: "the file system is read-only: write elsewhere",
           errno.EACCES: "permission denied: write elsewhere, or fix the folder's permissions",
           errno.EPERM: "not permitted: write elsewhere, or fix the folder's permissions",
           errno.ENOENT: "a folder on the path does not exist: create it, or write elsewhere",
           errno.ENOTDIR: "a part of the path is a file, not a folder: write elsewhere",
           errno.EISDIR: "it is a folder: name a file"}


def describe(error: BaseException) -> str:
    """The one line printed for a documented ``error``: its message; for an ``OSError``
    (raised while writing an output or a log: a full disk, the file-size limit, a read-only
    folder) the file, the system's reason and what to do."""
    if not isinstance(error, OSError) or exit_code(error) != EXIT_USAGE:
        return " ".join(str(error).split("\n"))
    from ..files.component import _shown

    names = [_shown(n) for n in (error.filename, error.filename2) if n is not None]
    reason = error.strerror or str(error)
    advice = _ADVICE.get(error.errno or 0, "check the path and the free space, or write elsewhere")
    return f"{' -> '.join(names) or 'a file'} could not be written or read ({reason}): {advice}."
