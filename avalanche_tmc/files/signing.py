"""Integrity and authenticity of a file: one hash over its metadata, an optional HMAC.

One hash (``file_sha256``) covers every metadata entry of a file (weights, members,
experience ids, base, settings) and, through ``content_sha256``, its tensors. With a
shared key (``key=``, ``$AVALANCHE_TMC_KEY_FILE``, the command line's ``--key-file``)
files are signed with HMAC-SHA256 of that hash, and a reader holding the key refuses
unsigned or wrongly signed files: that defends against tampering in transit or at rest
and files from outside the federation, not against a key holder that trains a poisoned
``δ`` on purpose.
"""

import hashlib
import hmac
import json
import os
import stat
import warnings
from typing import Mapping, Optional, Set, Union

from .component import ComponentFileError, _shown

__all__ = ["KEY_ENVIRONMENT", "read_key_file", "resolve_key", "metadata_sha256", "hmac_signature"]

KEY_ENVIRONMENT = "AVALANCHE_TMC_KEY_FILE"
"""The environment variable naming a key file: used when no ``key`` argument is given."""

_MIN_KEY = 16


_MAX_KEY = 1 << 16
_warned_readable: Set[str] = set()


def read_key_file(path: str) -> bytes:
    """The shared key held in file ``path`` (its bytes, a trailing newline removed; 16 bytes
    to 64 KiB). Raises :class:`ComponentFileError` when it cannot be used: unreadable, too
    short, or larger than 64 KiB (refused, never cut: a key read in part would not match
    the files signed with all of it), or not a regular file (a FIFO, a device or a directory
    is refused without blocking). Warns, once per file, when other users can read it."""
    try:  # as component files are read: regular files only (a FIFO or a device never blocks), bounded
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            raise ComponentFileError(f"key file {_shown(path)}: not a regular file (a FIFO, a device or a "
                                     "directory); give the file that holds the key.")
        with os.fdopen(fd, "rb") as f:
            key = f.read(_MAX_KEY + 3).rstrip(b"\r\n")
    except OSError as error:
        raise ComponentFileError(f"key file {_shown(path)}: cannot be read ({_shown(error.strerror or error)}).") \
            from None
    if len(key) > _MAX_KEY:
        raise ComponentFileError(f"key file {_shown(path)}: larger than {_MAX_KEY // 1024} KiB, so not a key file "
                                 "(a key is 16 bytes to 64 KiB; e.g. python -c \"import secrets; "
                                 "print(secrets.token_hex(32))\" > key).")
    if len(key) < _MIN_KEY:
        raise ComponentFileError(f"key file {_shown(path)}: the key has {len(key)} bytes; use at least {_MIN_KEY} "
                                 "random bytes (e.g. python -c \"import secrets; print(secrets.token_hex(32))\" "
                                 "> key).")
    if stat.S_ISREG(mode) and mode & 0o077 and os.path.realpath(path) not in _warned_readable:
        _warned_readable.add(os.path.realpath(path))
        warnings.warn(f"key file {_shown(path)} can be read by other users (mode {stat.S_IMODE(mode):03o}): anyone "
                      f"who reads it can sign files as the federation. Run: chmod 600 {_shown(path)}", stacklevel=2)
    return key


def resolve_key(key: Union[None, bytes, str] = None) -> Optional[bytes]:
    """The key to sign and check files with: ``key`` (bytes, or text encoded as UTF-8), else
    the file named by ``$AVALANCHE_TMC_KEY_FILE``, else None (files are not signed, and
    signatures are not required)."""
    if key is None:
        path = os.environ.get(KEY_ENVIRONMENT)
        return read_key_file(path) if path else None
    key = key.encode() if isinstance(key, str) else bytes(key)
    if len(key) < _MIN_KEY:
        raise ValueError(f"A signing key needs at least {_MIN_KEY} bytes, got {len(key)}.")
    return key


_SIGNED_FIELDS = ("file_sha256", "hmac_sha256")


def metadata_sha256(metadata: Mapping[str, str]) -> str:
    """The integrity hash: every metadata entry (the tensors' content hash among them), in
    key order, except the hash and the signature themselves."""
    covered = {k: v for k, v in metadata.items() if k not in _SIGNED_FIELDS}
    return hashlib.sha256(json.dumps(covered, sort_keys=True, ensure_ascii=True).encode()).hexdigest()


def hmac_signature(key: bytes, file_sha256: str) -> str:
    """HMAC-SHA256 of a file's integrity hash with the shared key."""
    return hmac.new(key, file_sha256.encode(), hashlib.sha256).hexdigest()
