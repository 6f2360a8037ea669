"""Avalanche loggers chosen by name, for the command line and the benchmark runner.

``make_loggers(["text", "csv"], log_dir)`` gives Avalanche's ``TextLogger`` (stdout), the
``CSVLogger`` of :mod:`avalanche_tmc.training.metrics` (which also reads the named losses),
``TensorboardLogger`` and ``WandBLogger`` (offline unless ``WANDB_MODE`` says otherwise),
each writing under ``log_dir``. A logger whose package is not installed is refused with
the command that installs it, before anything is trained.

**Resuming keeps the logs.** Avalanche's ``CSVLogger`` opens its files with ``"w"``: a
process that resumes a run and builds its loggers again truncates ``training_results.csv``
and ``eval_results.csv``, header and rows. :class:`AppendingCSVLogger` (what
``make_loggers(..., resume=True)`` uses) appends instead, writing the header only to a new
or empty file, so a resumed run's files hold the header once and every row. One writer at
a time: every row is appended whole under an exclusive ``fcntl.flock`` on the file, and a
logger that opens a file (checking its header, dropping a row cut by a crash) holds that
lock too, so a row another process is appending is never cut away::

    from avalanche_tmc.loggers import AppendingCSVLogger

    evaluator = EvaluationPlugin(accuracy_metrics(epoch=True, experience=True), loss_metrics(epoch=True),
                                 loggers=[AppendingCSVLogger("logs/csv")])

TensorBoard adds an event file per process (its folder keeps the earlier ones); a WandB run
resumed in another process starts a new run.
"""

import contextlib
import fcntl
import functools
import importlib.util
import os
import uuid
from typing import IO, TYPE_CHECKING, Any, Iterator, List, Optional, Sequence

if TYPE_CHECKING:  # for the annotations only: the command line imports this module for --help
    from avalanche.logging import BaseLogger, WandBLogger

__all__ = [  # noqa: F822  (AppendingCSVLogger: made on first use, see __getattr__)
    "LOGGERS", "AppendingCSVLogger", "MissingLoggerPackage", "check_loggers", "make_loggers"]

LOGGERS = ("text", "csv", "tensorboard", "wandb")
_PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb"}


class MissingLoggerPackage(ValueError):
    """A requested logger needs a package that is not installed (the message says which)."""


def check_loggers(names: Sequence[str]) -> List[str]:
    """The distinct logger ``names`` in order, after checking each is known and its package
    installed (:class:`MissingLoggerPackage` / ``ValueError`` otherwise)."""
    names = list(dict.fromkeys(names))
    unknown = [n for n in names if n not in LOGGERS]
    if unknown:
        raise ValueError(f"Unknown logger(s) {unknown}; choose from {', '.join(LOGGERS)}.")
    for name in names:
        package = _PACKAGES.get(name)
        if package is not None and importlib.util.find_spec(package) is None:
            raise MissingLoggerPackage(f"--logger {name} needs the {package} package, which is not installed: "
                                       f"pip install {package}")
    return names


def make_loggers(names: Sequence[str], log_dir: str, run_name: str = "avalanche-tmc",
                 text_stream: Optional[IO[str]] = None, *, resume: bool = False) -> List["BaseLogger"]:
    """Avalanche loggers for ``names`` (see :data:`LOGGERS`): text to ``text_stream``
    (stdout; ``None`` there drops the text logger, e.g. on a rank that does not print),
    files under ``log_dir`` (``csv/``, ``tensorboard/``, ``wandb/``). ``resume=True``
    (a process that goes on with a run) appends to the CSV files already there
    (:class:`AppendingCSVLogger`); otherwise they are started afresh, as Avalanche does."""
    loggers = []
    for name in check_loggers(names):
        if name == "text":
            if text_stream is not None:
                from avalanche.logging import TextLogger

                loggers.append(TextLogger(text_stream))
        elif name == "csv":
            from .training.metrics import CSVLogger  # Avalanche's, reading the named losses

            csv_logger = _appending_csv_logger() if resume else CSVLogger
            loggers.append(csv_logger(log_folder=os.path.join(log_dir, "csv")))
        elif name == "tensorboard":
            from avalanche.logging import TensorboardLogger

            loggers.append(TensorboardLogger(tb_log_dir=os.path.join(log_dir, "tensorboard")))
        else:
            os.environ.setdefault("WANDB_MODE", "offline")
            os.makedirs(log_dir, exist_ok=True)
            loggers.append(_wandb_logger(log_dir, run_name))
    return loggers


def _wandb_logger(log_dir: str, run_name: str) -> "WandBLogger":
    """Avalanche's ``WandBLogger`` for scalar metrics, working with recent wandb: Avalanche
    0.6 calls ``wandb.util.generate_id`` and ``wandb.viz``, which wandb 0.31 no longer has
    (the run id is given here; scalars are logged directly)."""
    from avalanche.logging import WandBLogger

    class ScalarWandBLogger(WandBLogger):
        def log_single_metric(self, name: str, value: Any, x_plot: int) -> None:
            self.step = x_plot
            if isinstance(value, (int, float)):
                self.wandb.log({name: value}, step=self.step)

    return ScalarWandBLogger(project_name="avalanche-tmc", run_name=run_name, dir=log_dir, save_code=False,
                             params={"id": uuid.uuid4().hex[:8]})


# Avalanche 0.6's CSVLogger headers (tests/avalanche_tmc/test_loggers.py compares them with the files it writes)
_HEADERS = {"training_file": ("training_results.csv", "training_exp,epoch,training_accuracy,val_accuracy,"
                                                      "training_loss,val_loss"),
            "eval_file": ("eval_results.csv", "eval_exp,training_exp,eval_accuracy,eval_loss,forgetting")}


@contextlib.contextmanager
def _locked(fd: int) -> Iterator[None]:
    """An exclusive advisory lock (``fcntl.flock``) on the open file ``fd``, waited for."""
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


def _drop_cut_row(fd: int) -> None:
    """Under the lock: a file that does not end with a line end holds a row cut by a
    crashed writer (every writer appends whole rows under the lock): cut it away."""
    end = size = os.fstat(fd).st_size
    if not size or os.pread(fd, 1, size - 1) == b"\n":
        return
    while end > 0:  # back to the last line end
        start = max(0, end - (1 << 16))
        found = os.pread(fd, end - start, start).rfind(b"\n")
        if found >= 0:
            os.ftruncate(fd, start + found + 1)
            return
        end = start
    os.ftruncate(fd, 0)


def _append(fd: int, data: bytes) -> None:
    with _locked(fd):
        _drop_cut_row(fd)  # never glue a row onto a crashed writer's half row
        while data:
            data = data[os.write(fd, data):]


class _LockedAppend:
    """A text file that appends whole lines, each batch under the file's lock: what
    ``print(..., flush=True)`` writes reaches the file at its flush (complete lines only),
    so rows of writers in other processes never interleave or get cut."""

    def __init__(self, path: str):
        self.name = path
        self._fd: Optional[int] = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        self._pending = ""

    @property
    def closed(self) -> bool:
        return self._fd is None

    def write(self, text: str) -> int:
        if self._fd is None:
            raise ValueError(f"I/O operation on closed file {self.name}")
        self._pending += text
        return len(text)

    def flush(self) -> None:
        cut = self._pending.rfind("\n") + 1
        if cut and self._fd is not None:
            lines, self._pending = self._pending[:cut], self._pending[cut:]
            _append(self._fd, lines.encode("utf-8"))

    def close(self) -> None:
        if self._fd is not None:
            self.flush()
            if self._pending:
                _append(self._fd, self._pending.encode("utf-8"))
                self._pending = ""
            os.close(self._fd)
            self._fd = None


def _open_appending(folder: str, name: str, header: str) -> IO[str]:
    """``folder/name`` opened for appending: the header written to a new or empty file (or
    to one holding only the header, whole or cut, without its line end); an existing file
    must begin with it (``ValueError`` otherwise); a row cut by a crash (no final newline)
    is dropped. All of it under the file's lock, which every row
    appended takes too (:class:`_LockedAppend`): a row being written is never cut."""
    path = os.path.join(folder, name)
    with open(path, "a+b") as f, _locked(f.fileno()):
        f.seek(0)
        data = f.read()
        if b"\n" not in data and header.encode("utf-8").startswith(data.rstrip(b"\r")):
            f.truncate(0)  # the header alone, whole or cut, without its line end: written again, whole
            data = b""
        if data:
            first = data.split(b"\n", 1)[0].rstrip(b"\r").decode("utf-8", "replace")
            if first != header:
                raise ValueError(f"{path}: its first line is {first[:80]!r}, not the header of this logger's file "
                                 f"({header!r}); it is not an avalanche CSVLogger file to go on with. Log to another "
                                 "folder, or move the file away.")
            if not data.endswith(b"\n"):
                f.truncate(data.rfind(b"\n") + 1)
        else:
            f.write(header.encode("utf-8") + b"\n")
            f.flush()
    return _LockedAppend(path)  # type: ignore[return-value]


@functools.lru_cache(maxsize=None)
def _appending_csv_logger() -> type:
    """The class :class:`AppendingCSVLogger`, made on first use (this module imports the
    standard library only: the command line reads it for ``--help``)."""
    from avalanche.logging import BaseLogger

    from .training.metrics import CSVLogger

    class AppendingCSVLogger(CSVLogger):
        """Avalanche's ``CSVLogger`` (the named losses of :mod:`avalanche_tmc.training.metrics`
        read too) that appends to ``training_results.csv`` and ``eval_results.csv`` instead of
        truncating them: the header is written to a new or empty file only, so a run resumed
        in a new process (loggers built again) keeps the header once and every earlier row.
        A file that does not begin with the header is refused (``ValueError``); a last row
        cut by a crash is dropped; rows are appended whole under the file's ``flock`` (one
        writer at a time, the check and the drop included). Pickled with a checkpoint, it reopens its files for
        appending when loaded."""

        def __init__(self, log_folder: Optional[str] = None):
            """As Avalanche's ``CSVLogger(log_folder)`` (default ``csvlogs``), appending."""
            BaseLogger.__init__(self)  # Avalanche's CSVLogger.__init__ truncates: its state is set here
            self.log_folder = log_folder if log_folder is not None else "csvlogs"
            os.makedirs(self.log_folder, exist_ok=True)
            self._open_files()
            self.training_exp_id = None
            self.in_train_phase = None
            self.val_acc, self.val_loss = None, None  # nothing measured yet: empty cells (see CSVLogger)

        def _open_files(self) -> None:
            for attribute, (name, header) in _HEADERS.items():
                setattr(self, attribute, _open_appending(self.log_folder, name, header))

        def __getstate__(self) -> dict:
            """The state without the open files (reopened for appending by ``__setstate__``)."""
            return {k: v for k, v in self.__dict__.items() if k not in _HEADERS}

        def __setstate__(self, state: dict) -> None:
            self.__dict__.update(state)
            os.makedirs(self.log_folder, exist_ok=True)
            self._open_files()

    AppendingCSVLogger.__module__ = __name__  # pickled by reference: module.__getattr__ finds it
    AppendingCSVLogger.__qualname__ = "AppendingCSVLogger"
    return AppendingCSVLogger


def __getattr__(name: str) -> Any:
    """``AppendingCSVLogger``, made on first use (the module stays importable without Avalanche loaded)."""
    if name == "AppendingCSVLogger":
        return _appending_csv_logger()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
