"""The runner's output folder (``--out``): one run at a time, one set of settings, and a
record of which planned runs are done.

:func:`claim` is what :func:`benchmarks.run.main` holds for the whole invocation:

* **a lock**: an exclusive ``fcntl.flock`` on ``<out>/.lock`` (which holds the owner's
  pid). A second invocation into the same folder is refused with a
  :class:`~benchmarks.runner.refusals.Refusal` (one line naming the other run's pid, exit code 2)
  instead of both writing ``results.csv`` and one's results vanishing. The operating
  system drops the lock when the process ends, however it ends (a kill included), so a
  stale lock never blocks a resume;
* **the settings** of every run the folder holds (``<out>/settings.json``: what decides
  each run's results, :func:`~benchmarks.runner.config.progress_key` with its seeds). An
  invocation whose runs would drop or change a run the folder holds (other settings, or
  fewer runs) is refused naming ``--restart`` (which replaces the folder's results) and
  another ``--out``; the same settings resume, and added runs are added. A folder with a
  ``results.csv`` but no ``settings.json`` (written by an earlier version) is refused the
  same way;
* **finished runs** (``<out>/runs/<hash>.json``: the rows and tuning trials of each run once
  it finished, with its name and settings): a later invocation with the same settings keeps
  them (:meth:`OutputFolder.kept`: no retraining, the same rows) and
  :meth:`OutputFolder.rows` merges ``results.csv``: the rows the folder held stay until
  this invocation has rows of the same key, so an interrupted re-run never leaves fewer
  rows than it found. ``--restart`` removes them and starts over, whole or not at all: until
  its first run finishes, ``settings.json`` says the folder is being replaced
  (``"replacing": true``), so a restart stopped in between (killed, or interrupted after a
  method group) and resumed without ``--restart`` goes on replacing (the old
  ``results.csv``, ``tuning.csv`` and records are never merged with the new rows);
* **the status** (``<out>/status.json``: the planned runs, those finished, those missing,
  and whether the results are complete), written when the folder is claimed, after every
  run and at the end; the report written after each run names the missing runs in
  ``results.md`` (:func:`benchmarks.report.write_report`'s ``missing``), so results of an
  invocation killed after its first run never read as complete.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from benchmarks.runner.config import Options, RunConfig, progress_key
from benchmarks.runner.folder_files import check_rows, check_trials, open_lock, read_json, read_regular
from benchmarks.runner.folder_files import write_bytes as _write_bytes
from benchmarks.runner.folder_files import write_json as _write_json
from benchmarks.runner.refusals import Refusal

__all__ = ["LOCK_FILE", "SETTINGS_FILE", "STATUS_FILE", "RUNS_DIR", "OutputFolder", "claim", "run_settings",
           "planned_settings"]

LOCK_FILE = ".lock"
"""The lock file of an output folder (it holds the pid of the run that holds the lock)."""
SETTINGS_FILE = "settings.json"
"""The settings of every run whose results the folder holds."""
STATUS_FILE = "status.json"
"""Planned, finished and missing runs of the last invocation, and whether it completed."""
RUNS_DIR = "runs"
"""The folder of finished runs' rows and trials (one JSON file a run)."""
FORMAT = 1
Rows = List[Dict[str, Any]]


def run_settings(run: RunConfig, options: Options) -> Dict[str, Any]:
    """Everything that decides ``run``'s results (its progress key without the seed, with
    its seeds), as JSON values."""
    settings = dict(progress_key(run, options, seed=0), seeds=list(run.seeds))
    del settings["seed"]
    return json.loads(json.dumps(settings, sort_keys=True, default=str))


def planned_settings(runs: Sequence[RunConfig], options: Options) -> Dict[str, Dict[str, Any]]:
    """``run name -> settings`` of the runs of one invocation, in order; the name is the
    run's label (``#2``, ``#3``... after it when a label repeats)."""
    planned: Dict[str, Dict[str, Any]] = {}
    for run in runs:
        name, n = run.label, 1
        while name in planned:
            n += 1
            name = f"{run.label}#{n}"
        planned[name] = run_settings(run, options)
    return planned


_SAID = {"folder": "the image folder's content changed (files added, removed or replaced; digest"}
"""Keys whose change is said in words before the values."""


def _differences(old: Dict[str, Any], new: Dict[str, Any], most: int = 4) -> List[str]:
    keys = sorted(set(old) | set(new))
    changed = [f"{_SAID[k]} {old.get(k, '(unset)')!r} -> {new.get(k, '(unset)')!r})" if k in _SAID else
               f"{k} {old.get(k, '(unset)')!r} -> {new.get(k, '(unset)')!r}" for k in keys if old.get(k) != new.get(k)]
    return changed[:most] + ([f"{len(changed) - most} more"] if len(changed) > most else [])


def _first_missing(path: str) -> Optional[str]:
    """The outermost folder of ``path`` (itself included) that does not exist, or None."""
    path, missing = os.path.abspath(path), None
    while not os.path.exists(path):
        missing, path = path, os.path.dirname(path)
    return missing


def _progress_files(out_dir: str) -> List[str]:
    """The finished method groups' files (``progress/``) of ``out_dir``, sorted."""
    try:
        return sorted(os.listdir(os.path.join(out_dir, "progress")))
    except OSError:
        return []


_REDO = "run with --restart to replace the folder's results, or choose another --out"


def _read_json(path: str) -> Optional[Any]:
    return read_json(path, f"restore it or remove it, or {_REDO}")


class OutputFolder:
    """An output folder claimed by this process (see the module docstring): its lock is
    held until :meth:`release`; :meth:`finished` / :attr:`missing` / :meth:`complete`
    keep ``status.json``."""

    def __init__(self, out_dir: str, planned: Dict[str, Dict[str, Any]], restart: bool = False):
        self.out_dir = out_dir
        self.planned = dict(planned)
        self.done: List[str] = []
        self._lock_fd: Optional[int] = None
        self._runs: Dict[str, Tuple[Rows, Rows]] = {}
        self._held: Rows = []
        # --restart (or the resume of a stopped one): the earlier runs' records and results go when this
        # invocation finishes its first run, so a failure before that (undo) leaves the folder exactly as it was
        self._drop_records = restart
        self._created = _first_missing(out_dir)  # the folder this claim makes (None: it existed)
        self._before = {name: read_regular(os.path.join(out_dir, name), f"remove it, or {_REDO}")
                        for name in (SETTINGS_FILE, STATUS_FILE)}
        self._progress_before = _progress_files(out_dir)
        self._lock()
        try:
            self._check_settings(restart)
            self._read_finished(restart)
            self._write_status(complete=False)
        except BaseException:
            self.release()
            raise

    # ------------------------------------------------------------------ the lock
    def _lock(self) -> None:
        os.makedirs(self.out_dir, exist_ok=True)
        path = os.path.join(self.out_dir, LOCK_FILE)
        fd = open_lock(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            if error.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                os.close(fd)
                raise
            owner = os.read(fd, 64).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise Refusal(f"Another run (pid {owner}) is writing into {self.out_dir} (lock {path}): wait for it to "
                          "finish, or choose another --out.") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd = fd

    def release(self) -> None:
        """Give the folder back (closing the lock file drops the lock)."""
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            os.close(fd)

    def undo(self) -> bool:
        """After a failure (a corrupt image found while preparing the data, an interrupt)
        before this invocation finished any run or method group: put the folder back as it
        was (its settings and status restored, or removed; the folder removed if this claim
        made it), so that the failed attempt's settings never refuse the next one ("holds
        results of other settings"). Returns whether it did; call it before :meth:`release`."""
        if self.done or _progress_files(self.out_dir) != self._progress_before:
            return False
        for name, data in self._before.items():
            path = os.path.join(self.out_dir, name)
            with contextlib.suppress(OSError):
                if data is None:
                    os.remove(path)
                else:
                    _write_bytes(path, data)
        if self._created is not None:
            self.release()
            shutil.rmtree(self._created, ignore_errors=True)
        return True

    # ------------------------------------------------------------------ settings
    def _check_settings(self, restart: bool) -> None:
        path = os.path.join(self.out_dir, SETTINGS_FILE)
        held = _read_json(path)
        results = os.path.join(self.out_dir, "results.csv")
        if restart or held is None and not os.path.exists(results):
            self._write_settings(replacing=restart)
            return
        if held is None:
            raise Refusal(f"{self.out_dir} holds a results.csv without {SETTINGS_FILE} (written by an earlier version "
                          "or by hand): this run would replace it. Use --restart to replace its results, or choose "
                          "another --out.")
        runs = held.get("runs") if isinstance(held, dict) else None
        if not isinstance(runs, dict):
            raise Refusal(f"{path} is not a settings file of this version: use --restart to replace the folder's "
                          "results, or choose another --out.")
        conflicts = []
        for name, settings in runs.items():
            if name not in self.planned:
                conflicts.append(f"its run {name} is not in this invocation")
            elif self.planned[name] != settings:
                conflicts.append(f"run {name}: " + ", ".join(_differences(settings, self.planned[name])))
        if conflicts:
            raise Refusal(f"{self.out_dir} holds results of other settings, which this run would drop ("
                          + "; ".join(conflicts[:3]) + (f"; {len(conflicts) - 3} more" if len(conflicts) > 3 else "")
                          + "). Use --restart to replace them, or choose another --out.")
        if held.get("replacing") is True:  # a --restart stopped before its first run finished: go on with it
            self._drop_records = True
        if list(runs) != list(self.planned):  # runs added: the folder now holds them too
            self._write_settings(replacing=self._drop_records)

    def _write_settings(self, replacing: bool) -> None:
        """Write ``settings.json`` (``replacing``: a --restart has not finished its first run yet)."""
        settings = dict(format=FORMAT, runs=self.planned, **({"replacing": True} if replacing else {}))
        _write_json(os.path.join(self.out_dir, SETTINGS_FILE), settings)

    # ------------------------------------------------------------------ finished runs
    def _record_path(self, name: str) -> str:
        key = json.dumps([name, self.planned[name]], sort_keys=True)
        return os.path.join(self.out_dir, RUNS_DIR, hashlib.sha256(key.encode()).hexdigest()[:16] + ".json")

    def _read_finished(self, restart: bool) -> None:
        """Load the runs an earlier invocation finished with these settings and the rows
        ``results.csv`` holds (``restart``: remove both)."""
        results = os.path.join(self.out_dir, "results.csv")
        if restart or self._drop_records:
            return  # nothing earlier is kept; the records and results are removed at the first finished run
        for name, settings in self.planned.items():
            path, advice = self._record_path(name), "remove it to train that run again, or run with --restart"
            record = read_json(path, advice)
            if record is None:
                continue
            if not isinstance(record, dict) or record.get("name") != name or record.get("settings") != settings:
                raise Refusal(f"{path} is not the record of run {name} with these settings (edited or copied): "
                              f"{advice}.")
            self._runs[name] = (check_rows(path, record.get("rows"), advice),
                                check_trials(path, record.get("trials"), advice))
        if os.path.exists(results):
            from benchmarks.results.files import ReportFileError, read_csv

            try:
                self._held = read_csv(results)
            except ReportFileError as error:
                raise Refusal(f"{error} This run would merge its results into it: restore it, or run with --restart "
                              "to replace it.") from None

    def kept(self, name: str) -> Optional[Tuple[Rows, Rows]]:
        """``(rows, trials)`` of planned run ``name`` if an earlier invocation finished it
        with the same settings (it need not train again), else None."""
        return self._runs.get(name)

    def rows(self) -> Rows:
        """What ``results.csv`` holds now: the rows of every finished run (kept or new), in
        planned order, then those the file held before whose key no finished run has."""
        from benchmarks.results.files import row_key

        rows = [row for name in self.planned if name in self._runs for row in self._runs[name][0]]
        keys = {row_key(row) for row in rows}
        return rows + [row for row in self._held if row_key(row) not in keys]

    def trials(self) -> Rows:
        """The tuning trials of every finished run, in planned order."""
        return [trial for name in self.planned if name in self._runs for trial in self._runs[name][1]]

    # ------------------------------------------------------------------ status
    @property
    def missing(self) -> List[str]:
        """The planned runs not finished yet, in order."""
        return [name for name in self.planned if name not in self.done]

    def finished(self, name: str, rows: Optional[Rows] = None, trials: Optional[Rows] = None) -> None:
        """Record that run ``name`` (a key of the planned runs) is finished, with its result
        rows and tuning trials (kept for a later invocation: :meth:`kept`)."""
        if name not in self.planned:
            raise KeyError(f"{name!r} is not a planned run ({list(self.planned)})")
        if self._drop_records:  # the replaced run's files go, then the folder is this run's (whole)
            shutil.rmtree(os.path.join(self.out_dir, RUNS_DIR), ignore_errors=True)
            for old in ("results.csv", "tuning.csv"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(self.out_dir, old))
        if rows is not None:
            self._runs[name] = (list(rows), list(trials or []))
            _write_json(self._record_path(name), dict(format=FORMAT, name=name, settings=self.planned[name],
                                                      rows=self._runs[name][0], trials=self._runs[name][1]))
        if self._drop_records:
            self._write_settings(replacing=False)
            self._drop_records = False
        if name not in self.done:
            self.done.append(name)
        self._write_status(complete=False)

    def complete(self) -> None:
        """Record that every planned run is finished and the report written."""
        if self.missing:
            raise ValueError(f"runs {self.missing} are not finished")
        self._write_status(complete=True)

    def _write_status(self, complete: bool) -> None:
        _write_json(os.path.join(self.out_dir, STATUS_FILE),
                    dict(format=FORMAT, complete=complete, planned=list(self.planned), finished=list(self.done),
                         missing=self.missing))


@contextlib.contextmanager
def claim(out_dir: str, runs: Sequence[RunConfig], options: Options) -> Iterator[OutputFolder]:
    """Hold ``out_dir`` for the runs ``runs`` for the ``with`` block: lock it, check (or, with
    ``options.restart``, replace) its settings, start its status (see the module
    docstring); the lock is given back however the block ends. Refusals are
    :class:`~benchmarks.runner.refusals.Refusal` (exit code 2)."""
    folder = OutputFolder(out_dir, planned_settings(runs, options), restart=options.restart)
    try:
        yield folder
    except BaseException:
        folder.undo()  # nothing finished: the folder as it was
        raise
    finally:
        folder.release()
