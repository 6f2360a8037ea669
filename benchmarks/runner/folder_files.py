"""The files the runner reads back from its output folder, read strictly: regular files only
(a FIFO or a device is refused without blocking: a FIFO ``settings.json`` hung the runner),
no symbolic link followed where the runner writes (a symlinked ``OUT/.lock`` had its target
truncated), and the JSON files checked for the shape the runner wrote (a progress file or
run record of another shape, a row whose accuracy is NaN or outside [0, 1]). Every refusal
is a :class:`~benchmarks.runner.refusals.Refusal`: one line naming the file and what to
do, exit 2.
"""

from __future__ import annotations

import errno
import json
import math
import os
import stat
from typing import Any, Dict, List, Optional

from avalanche_tmc.files.filesystem import atomic_path
from benchmarks.runner.refusals import Refusal

__all__ = ["existing_folder", "read_regular", "read_json", "write_json", "write_bytes", "open_lock", "check_rows",
           "check_trials"]

Rows = List[Dict[str, Any]]


def existing_folder(path: str) -> str:
    """``path`` or its nearest folder that exists (where a missing ``path`` would be made)."""
    path = os.path.abspath(path)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def read_regular(path: str, advice: str) -> Optional[bytes]:
    """The bytes of the regular file ``path``, or None when there is none; anything else
    there (a FIFO, a device, a folder) is refused without blocking, ``advice`` saying what
    to do."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        return None
    except OSError as error:
        raise Refusal(f"{path}: cannot be read ({error.strerror or error}): {advice}.") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # before fdopen, which refuses a folder naming only the descriptor
        os.close(fd)
        raise Refusal(f"{path}: not a regular file (a FIFO, a device or a folder), not one the runner wrote: "
                      f"{advice}.")
    with os.fdopen(fd, "rb") as f:
        return f.read()


def read_json(path: str, advice: str) -> Optional[Any]:
    """The JSON value of the regular file ``path`` (:func:`read_regular`), or None when there
    is none; a file that is not JSON is refused with ``advice``."""
    data = read_regular(path, advice)
    if data is None:
        return None
    try:
        return json.loads(data.decode("utf-8"))
    except ValueError as error:  # (UnicodeDecodeError too)
        raise Refusal(f"{path}: not a JSON file the runner wrote ({error}): {advice}.") from None


def write_json(path: str, value: Any) -> None:
    """Write ``value`` as JSON to ``path`` atomically (a symlink there is replaced, never followed)."""
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=1, sort_keys=True,
                  default=lambda o: o.item() if hasattr(o, "item") else str(o))  # numpy / torch scalars
        f.write("\n")


def write_bytes(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        f.write(data)


def open_lock(path: str) -> int:
    """A read-write descriptor of the lock file ``path``, created if missing; a symbolic link
    there (whose target the lock's pid would overwrite) or anything but a regular file is
    refused, nothing created or truncated."""
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as error:
        if error.errno != errno.ELOOP:
            raise
        raise Refusal(f"{path} is a symbolic link (to {os.readlink(path)}), which the runner did not create; it "
                      "would overwrite its target: remove it, or choose another --out.") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise Refusal(f"{path} is not a regular file (a FIFO or a device), not the runner's lock: remove it, or "
                      "choose another --out.")
    return fd


def _fraction(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        and 0.0 <= value <= 1.0


def check_rows(path: str, rows: Any, advice: str) -> Rows:
    """``rows`` if it is a list of result rows (objects whose ``accuracy`` is a number in
    [0, 1]) as the runner writes; else a refusal naming ``path`` and the first bad row."""
    if not isinstance(rows, list):
        raise Refusal(f"{path}: its rows are {type(rows).__name__}, not a list of result rows (edited or not the "
                      f"runner's): {advice}.")
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or not _fraction(row.get("accuracy")):
            what = "not an object" if not isinstance(row, dict) else \
                f"its accuracy {row.get('accuracy')!r} is not a number in [0, 1]"
            raise Refusal(f"{path}: row {i + 1} is not a result row ({what}; NaN, edited or not the runner's): "
                          f"{advice}.")
    return rows


def check_trials(path: str, trials: Any, advice: str) -> Rows:
    """``trials`` if it is a list of tuning trials (objects whose ``validation_accuracy``,
    when present, is a number in [0, 1]); else a refusal naming ``path``."""
    bad = next((i for i, t in enumerate(trials) if not isinstance(t, dict)
                or ("validation_accuracy" in t and not _fraction(t["validation_accuracy"])))
               if isinstance(trials, list) else 0, None)
    if bad is not None:
        raise Refusal(f"{path}: " + (f"tuning trial {bad + 1} is not a trial" if isinstance(trials, list) else
                                     "its trials are not a list") + f" (NaN, edited or not the runner's): {advice}.")
    return trials
