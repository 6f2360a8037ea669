"""Bytes to and from the file system, safely: regular files only, bounded reads, atomic
and exclusive writes, and a check that an output folder can be written.

A file is written to a temporary file next to its path and put in place in one step, so a
reader never sees half a file (:func:`write_atomically` for bytes in memory,
:func:`atomic_path` for a writer that wants a path, such as ``savefig`` or a CSV writer);
without overwriting, of several writers exactly one succeeds
(:class:`~avalanche_tmc.files.component.ComponentExistsError` for the others). Temporary
files are removed on error, and those left by a killed writer are removed by the next
write of the same file. Only regular files are read (a FIFO, a device or a directory is
refused without blocking). :func:`check_writable` finds an unusable output folder before
any slow work (the command line and the benchmark runner both call it).
"""

import contextlib
import errno
import os
import secrets
import socket
import stat
import tempfile
from pathlib import Path
from typing import BinaryIO, Iterator, Optional, Tuple, Union

from .component import ComponentExistsError, ComponentFileError, _refuse, _shown

__all__ = ["write_atomically", "atomic_path", "check_writable", "read_regular_file", "same_file"]

PathLike = Union[str, "os.PathLike[str]"]


def same_file(a: PathLike, b: PathLike) -> bool:
    """Whether ``a`` and ``b`` name one file: by another path, a symlink or a hard link (the
    real paths compared when one cannot be looked at). The check an output that must not
    replace an input makes (the command line's ``compose`` and ``forget``, the offline tools)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def check_writable(directory: PathLike, *, create: bool = True) -> None:
    """Write (and remove) a temporary file in ``directory``, so an output folder that cannot
    be used is found before any training, not after. ``create``: make ``directory`` (and its
    parents) if needed; else a missing ``directory`` is probed through its parent, which must
    exist (``FileNotFoundError`` naming it), and nothing is created. Raises the ``OSError``
    that says why (callers turn it into their own refusal)."""
    if create:
        os.makedirs(directory, exist_ok=True)
    elif not os.path.isdir(directory):
        parent = os.path.dirname(os.path.abspath(directory))
        if os.path.lexists(directory) or not os.path.isdir(parent):
            missing = parent if not os.path.lexists(directory) else os.fspath(directory)
            raise FileNotFoundError(errno.ENOENT, "no such folder", missing)
        directory = parent
    with tempfile.TemporaryFile(dir=directory):
        pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


def _remove_stale_temporaries(directory: str, base: str) -> None:
    """Remove ``.<base>.<host>.<pid>.*.tmp`` left by a writer of this host that died (killed)."""
    host = socket.gethostname()
    prefix = f".{base}."
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        if not (name.startswith(prefix) and name.endswith(".tmp")):
            continue
        parts = name[len(prefix):-len(".tmp")].rsplit(".", 2)
        pid = parts[1] if len(parts) == 3 and parts[0] == host and parts[1].isascii() else ""
        if pid.isdigit() and not _alive(int(pid)):
            try:
                os.remove(os.path.join(directory, name))
            except OSError:
                pass


def _link_exclusively(tmp: str, path: str, data: bytes) -> None:
    """Put the complete file ``tmp`` at ``path`` unless ``path`` exists, in one step (a hard
    link); where the file system has no hard links, create ``path`` exclusively and write it."""
    exists = ComponentExistsError(f"{_shown(path)} exists (another process may have written it meanwhile); nothing was "
                                  "written. Pass overwrite=True (--overwrite) to replace it.")
    try:
        os.link(tmp, path)
        return
    except FileExistsError:
        raise exists from None
    except OSError:  # no hard links here (some network or FUSE file systems)
        pass
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        raise exists from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    except BaseException:
        os.remove(path)
        raise


def _open_temporary(path: str, mode: Optional[int]) -> Tuple[str, int]:
    """(name, open descriptor) of a new temporary file next to ``path``, named
    ``.<base>.<host>.<pid>.<random>.tmp``: the directory is created if needed and the
    temporaries of dead writers of the same file are removed first. Permissions: ``mode``
    exactly, or None for an ordinary new file (0o644 less the umask)."""
    directory, base = os.path.split(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    _remove_stale_temporaries(directory, base)
    tmp = os.path.join(directory, f".{base}.{socket.gethostname()}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    if mode is not None:
        try:
            os.fchmod(fd, mode)
        except BaseException:
            os.close(fd)
            os.remove(tmp)
            raise
    return tmp, fd


@contextlib.contextmanager
def atomic_path(path: PathLike, *, mode: Optional[int] = None) -> Iterator[Path]:
    """Yield a temporary path next to ``path`` to write the file to; when the block
    succeeds the file is flushed to disk and renamed over ``path`` (``os.replace``), so
    a kill or an error never leaves a half-written file (the temporary is removed; a
    killed writer's by the next write of the same file). The directory is created if
    needed. ``mode``: the file's permissions exactly (e.g. those of the file it
    replaces); None: an ordinary new file's (0o644 less the umask)."""
    tmp, fd = _open_temporary(os.fspath(path), mode)
    os.close(fd)
    try:
        yield Path(tmp)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    finally:
        if os.path.lexists(tmp):
            os.remove(tmp)


@contextlib.contextmanager
def _naming(path: PathLike) -> Iterator[None]:
    """An ``OSError`` of the block names ``path`` (a write's own error, such as a full disk
    or the file-size limit, names no file; one of the temporary file names that instead)."""
    try:
        yield
    except OSError as error:
        if error.errno is not None and (error.filename is None
                                        or os.path.basename(os.fspath(error.filename)).endswith(".tmp")):
            error.filename = os.fspath(path)
        raise


def write_atomically(path: str, data: bytes, *, overwrite: bool = True) -> None:
    """Write ``data`` to ``path`` through a temporary file put in place in one step
    (:func:`atomic_path`); ``overwrite=False`` creates ``path`` exclusively
    (:class:`ComponentExistsError` if it exists, also when another process created it
    meanwhile). The directory is created if needed; temporaries of dead writers of the
    same file are removed first. An ``OSError`` (a full disk, the file-size limit) names ``path``."""
    with _naming(path):
        _write_atomically(path, data, overwrite)


def _write_atomically(path: str, data: bytes, overwrite: bool) -> None:
    if overwrite:
        with atomic_path(path) as tmp, open(tmp, "wb") as f:
            f.write(data)
        return
    tmp, fd = _open_temporary(path, None)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        _link_exclusively(tmp, path, data)
    finally:
        if os.path.lexists(tmp):
            os.remove(tmp)


def read_regular_file(path: str) -> Tuple[BinaryIO, int]:
    """(file object, size) of a regular file; anything else (a FIFO, a device, a directory)
    is refused without blocking."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as error:
        raise ComponentFileError(f"{_shown(path)}: cannot be read ({_shown(error.strerror or error)}).") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise _refuse(path, "it is not a regular file (a FIFO, a device or a directory)")
    return os.fdopen(fd, "rb"), info.st_size


def _read_exactly(f: BinaryIO, size: int, path: str) -> bytes:
    """``size`` bytes of ``f``; refused if the file no longer has them (it changed meanwhile)."""
    data = f.read(size)
    if len(data) != size:
        raise _refuse(path, "the file changed size while being read")
    return data
