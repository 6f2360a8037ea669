"""Disk and memory cache of decoded dataset tensors, and where data are looked for."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Callable, Dict, Optional

import torch

__all__ = ["CACHE_VERSION", "cache_dir", "default_data_root", "digest", "cached_tensors"]

CACHE_VERSION = "1"


def cache_dir() -> Path:
    """Root of the on-disk caches: ``$AVALANCHE_TMC_CACHE`` or ``~/.cache/avalanche_tmc``."""
    default = Path.home() / ".cache" / "avalanche_tmc"
    return Path(os.environ.get("AVALANCHE_TMC_CACHE", default)).expanduser()


def default_data_root() -> Path:
    """Where the folder datasets are looked for: ``$AVALANCHE_TMC_DATA`` or ``<cache>/data``."""
    return Path(os.environ.get("AVALANCHE_TMC_DATA", cache_dir() / "data")).expanduser()


_MEMORY_CACHE: Dict[str, Dict[str, Any]] = {}


def digest(*parts: Any) -> str:
    """Short stable hash of ``parts`` (used in cache keys)."""
    return hashlib.sha1(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:12]


def cached_tensors(key: str, build: Callable[[], Dict[str, Any]], cache: bool = True) -> Dict[str, Any]:
    """Return ``build()``, memoised in memory and in ``<cache>/tensors/<key>.pt``.

    ``build`` must return a dict of tensors / lists of strings (loadable with
    ``weights_only=True``). With ``cache=False`` neither cache is read nor written.
    """
    if not cache:
        return build()
    if key in _MEMORY_CACHE:
        return _MEMORY_CACHE[key]
    path = cache_dir() / "tensors" / f"{key}.pt"
    value: Optional[Dict[str, Any]] = None
    if path.is_file():
        try:
            value = torch.load(path, map_location="cpu", weights_only=True)
        except Exception:  # a truncated or stale file: rebuild it
            value = None
    if value is None:
        value = build()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        torch.save(value, tmp)
        tmp.replace(path)
    _MEMORY_CACHE[key] = value
    return value
