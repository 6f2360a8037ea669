"""How the runner says no: one line on stderr and exit code 2, before any data is prepared.

:class:`Refusal` is what the runner raises for a run it will not start (a bad option value,
options that do not go together, a missing dataset, package or weights file, more jobs
than cores). :func:`command_line` runs a ``main`` and turns a refusal, and the loaders'
own errors for missing inputs, into that one line; anything else is a bug and keeps its
traceback. A ``Refusal`` is a ``SystemExit``: code that calls ``main`` in-process (tests,
notebooks) can catch it as one, and its ``str`` is the message.
"""

import sys
from typing import Callable, Optional, Sequence

__all__ = ["EXIT_REFUSED", "Refusal", "refusal_message", "is_refusal", "command_line"]

EXIT_REFUSED = 2
"""The exit code of every refusal (argparse's for a bad command line)."""


class Refusal(SystemExit):
    """A run the runner will not start; the message says what to do instead."""

    def __init__(self, message: str) -> None:
        super().__init__(EXIT_REFUSED)
        self.message = message

    def __str__(self) -> str:
        return self.message


def _refused_kinds() -> tuple:
    """The loaders' errors for inputs that are missing here (not bugs)."""
    from avalanche_tmc.factories import DatasetNotFoundError, WeightsNotFoundError  # the runner raises these too
    from benchmarks.datasets.base import CorruptImageError, TooFewImagesError
    from benchmarks.datasets.packages import MissingPackageError
    from benchmarks.tuning.grid import TuningEdgeError  # a tuning choice left on its grid's edge: widen the grid

    return (DatasetNotFoundError, WeightsNotFoundError, MissingPackageError, TuningEdgeError, TooFewImagesError,
            CorruptImageError)


def _os_error_message(error: OSError) -> str:
    """One line for an ``OSError`` of the runner's reads and writes (a full disk, the
    file-size limit, a read-only folder): the file, the system's reason, what to do."""
    import errno

    advice = {errno.ENOSPC: "the disk is full: free space, or choose another --out",
              errno.EDQUOT: "the disk quota is used up: free space, or choose another --out",
              errno.EFBIG: "the file would exceed the file-size limit (ulimit -f): raise it, or choose another --out",
              errno.EROFS: "the file system is read-only: choose another --out",
              errno.EACCES: "permission denied: choose another --out, or fix the folder's permissions"}
    names = " -> ".join(str(n) for n in (error.filename, error.filename2) if n is not None) or "a file"
    otherwise = "check the path and the free space, then run again: finished method groups are kept"
    return f"{names}: {error.strerror or error} ({advice.get(error.errno or 0, otherwise)})."


def is_refusal(error: BaseException) -> bool:
    """Whether ``error`` is a :class:`Refusal` or one of the loaders' errors for inputs
    missing or unusable here (a missing dataset, package or weights file, a corrupt image)."""
    return isinstance(error, Refusal) or isinstance(error, _refused_kinds())


def refusal_message(error: BaseException) -> Optional[str]:
    """The one line for ``error`` if it is a refusal (its text with the lines joined), else
    None. An error re-raised by a DataLoader worker carries the worker's traceback in its
    text: its last line, the error's own message, is kept."""
    if is_refusal(error):
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        if "Original Traceback (most recent call last):" in lines:
            own = lines[-1]
            return own.split(": ", 1)[1] if own.startswith(type(error).__module__) and ": " in own else own
        return " ".join(lines)
    if isinstance(error, OSError):
        return _os_error_message(error)
    return None


def command_line(main: Callable[[Optional[Sequence[str]]], object], prog: str,
                 argv: Optional[Sequence[str]] = None) -> int:
    """Run ``main(argv)``; a refusal prints ``<prog>: error: <message>`` on stderr and
    returns :data:`EXIT_REFUSED`, success returns 0 (argparse's own exits pass through)."""
    try:
        main(argv)
    except Refusal as error:
        print(f"{prog}: error: {refusal_message(error)}", file=sys.stderr)
        return EXIT_REFUSED
    except Exception as error:  # noqa: BLE001  (only the refusal kinds are caught; the rest re-raised)
        message = refusal_message(error)
        if message is None:
            raise
        print(f"{prog}: error: {message}", file=sys.stderr)
        return EXIT_REFUSED
    return 0
