"""Disk and memory cache of decoded dataset tensors, and where data are looked for."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Sequence

import torch

from benchmarks.networks.arithmetic import arithmetic_key

__all__ = ["CACHE_VERSION", "cache_dir", "default_data_root", "digest", "cached_tensors", "holds_images"]

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


def holds_images(value: Any, image_size: int, keys: Sequence[str]) -> bool:
    """Whether ``value`` is a dict of exactly ``keys`` whose ``*images`` entries are ``uint8``
    tensors of ``image_size`` pixels a side, and whose ``*targets`` are 1-D tensors as long as
    their images (a cache file of another size or shape is not)."""
    if not isinstance(value, dict) or set(value) != set(keys):
        return False
    for name, images in value.items():
        if name.endswith("images"):
            if not isinstance(images, torch.Tensor) or images.dtype != torch.uint8 or images.ndim < 3 \
                    or tuple(images.shape[-2:]) != (image_size, image_size):
                return False
            targets = value.get(name[:-len("images")] + "targets")
            if targets is not None and (not isinstance(targets, torch.Tensor) or targets.shape != images.shape[:1]):
                return False
    return True


def cached_tensors(key: str, build: Callable[[], Dict[str, Any]], cache: bool = True, *,
                   image_size: Optional[int] = None, keys: Sequence[str] = ()) -> Dict[str, Any]:
    """Return ``build()``, memoised in memory and in ``<cache>/tensors/<key>.pt``.

    ``build`` must return a dict of tensors / lists of strings (loadable with
    ``weights_only=True``). With ``cache=False`` neither cache is read nor written. A file
    that cannot be read, or (``image_size`` given) does not hold ``keys`` with images of that
    size (:func:`holds_images`: a file of another size copied over this one's), is stale:
    rebuilt and replaced, never used. Under another arithmetic than the pinned AVX2
    (:func:`~benchmarks.networks.arithmetic.arithmetic_key`) the key names it: resizing
    rounds by instruction set.
    """
    if not cache:
        return build()
    arithmetic = arithmetic_key()  # decoding resizes with torch: another instruction set, another file
    if arithmetic is not None:
        key = f"{key}-{digest(arithmetic)}"
    if key in _MEMORY_CACHE:
        return _MEMORY_CACHE[key]
    path = cache_dir() / "tensors" / f"{key}.pt"
    value: Optional[Dict[str, Any]] = None
    if path.is_file():
        try:
            value = torch.load(path, map_location="cpu", weights_only=True)
        except Exception:  # a truncated or stale file: rebuild it
            value = None
        if value is not None and image_size is not None and not holds_images(value, image_size, keys):
            value = None  # another size or shape: stale
    if value is None:
        value = build()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        torch.save(value, tmp)
        tmp.replace(path)
    _MEMORY_CACHE[key] = value
    return value
