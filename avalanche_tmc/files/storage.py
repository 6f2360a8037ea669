"""Component files on disk: safetensors written atomically, read without executing anything.

A **component file** holds what its experience contributes to a composition (see
:class:`~avalanche_tmc.files.component.Component`): the tensors (``δ_t``, or the
experience's statistics ``gram``, ``cross``, ``target_gram``, ``count``, ``class_sum``,
``class_count``, see :mod:`avalanche_tmc.composition.statistics`) and, as JSON metadata
entries, its weight, members, base (:mod:`~avalanche_tmc.files.bases`) and training
settings, with one integrity hash over them and the tensors and an optional signature
(:mod:`~avalanche_tmc.files.signing`). A composition file holds ``S = Σ w_t δ_t``, ``W``
and its members in the same way.

Files are read with ``safetensors`` (a JSON header and raw tensor bytes); no pickle,
nothing in a file is ever executed. The header is checked before any tensor is read
(:mod:`~avalanche_tmc.files.header`); a file that breaks any rule, or holds NaN/inf, is
refused with :class:`~avalanche_tmc.files.component.ComponentFileError`. Files are
written atomically, exclusively when not overwriting (:mod:`~avalanche_tmc.files.filesystem`).
A new field gets a ``format_version`` bump if old readers would misread it.
"""

import json
import math
import os
from collections import OrderedDict
from typing import List, Sequence, Union

import torch

from ..composition.statistics import STAT_KEYS
from .component import FORMAT, FORMAT_VERSION, Component, _clean, _clean_tensors, _refuse, content_sha256
from .filesystem import write_atomically
from .header import _check_members, _finite_positive, _json_field, _read_verified
from .signing import hmac_signature, metadata_sha256, resolve_key

__all__ = ["save_component", "load_component", "component_paths", "load_components"]


def save_component(component: Component, path: str, *, overwrite: bool = True,
                   key: Union[None, bytes, str] = None) -> str:
    """Write ``component`` (or a composition) to ``path``; returns ``path``.

    The file is written to a temporary file next to ``path`` and then put in place in one
    step, so a reader never sees half a file. ``overwrite=False`` creates ``path``
    exclusively (a hard link): of several writers exactly one succeeds, the others get
    :class:`~avalanche_tmc.files.component.ComponentExistsError`. Temporary files are
    removed on error, and those left by a killed writer are removed by the next write of
    the same file. With a key (``key``, or ``$AVALANCHE_TMC_KEY_FILE``) the file is signed
    (HMAC-SHA256 of its integrity hash).
    """
    from safetensors.torch import save

    key = resolve_key(key)
    bad = [n for n, t in component.tensors.items() if t.is_floating_point() and not bool(torch.isfinite(t).all())]
    if bad:
        raise ValueError(f"{component.name()} holds NaN or inf (in {bad[:5]}): it is never written.")
    tensors = _clean_tensors(component.tensors)
    metadata = dict(
        format=FORMAT, format_version=str(FORMAT_VERSION), kind=component.kind, payload=component.payload,
        weight=json.dumps(float(component.weight)), members=json.dumps(component.members),
        base=json.dumps(component.base), settings=json.dumps(component.settings, default=str),
        content_sha256=content_sha256(tensors),
    )
    metadata["file_sha256"] = metadata_sha256(metadata)
    if key is not None:
        metadata["hmac_sha256"] = hmac_signature(key, metadata["file_sha256"])
    data = _sorted_metadata(save(dict(tensors), metadata=metadata))
    write_atomically(path, data, overwrite=overwrite)
    return path


def _sorted_metadata(data: bytes) -> bytes:
    """``data`` (a safetensors file) with its metadata entries in name order, so the same
    component gives the same bytes in every process: safetensors writes them in hash-map
    order, which changes from one save to the next. The header keeps its length (padded
    with spaces, as safetensors pads it); if it would not, ``data`` is returned unchanged."""
    size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + size])
    if "__metadata__" in header:
        header = {"__metadata__": dict(sorted(header["__metadata__"].items())),
                  **{k: v for k, v in header.items() if k != "__metadata__"}}
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    if len(text) > size:
        return data
    return data[:8] + text + b" " * (size - len(text)) + data[8 + size:]


def load_component(path: str, *, key: Union[None, bytes, str] = None) -> Component:
    """Read a component or composition file (never executing anything in it).

    Only a regular file is read; its header is checked (well-formed, the size it declares
    is the file's, the tensors' names, shapes and dtypes are those its base lists) before
    its tensors are read, so memory is bounded by what the header declares. One hash
    covers the metadata (weights, members, base, settings) and the tensors. With a key
    (``key``, or ``$AVALANCHE_TMC_KEY_FILE``) the file must carry a valid signature.

    :raises ~avalanche_tmc.files.component.ComponentFileError: see
        :class:`~avalanche_tmc.files.component.ComponentFileError`.
    """
    from safetensors import SafetensorError
    from safetensors.torch import load

    key = resolve_key(key)
    metadata, data = _read_verified(path, key)
    kind, payload = metadata["kind"], metadata["payload"]
    try:
        tensors = load(data)
    except (SafetensorError, ValueError, RuntimeError) as error:
        raise _refuse(path, f"its tensors cannot be read ({_clean(str(error))})") from None
    weight = _json_field(metadata, "weight", path, (int, float))
    members = _json_field(metadata, "members", path, list)
    base = _json_field(metadata, "base", path, dict)
    settings = _json_field(metadata, "settings", path, dict)
    _check_members(members, path)
    try:
        total = math.fsum(m["weight"] for m in members)
    except OverflowError:  # finite weights, each checked: only a crafted file sums beyond float's range
        total = math.inf
    if not math.isfinite(total):
        raise _refuse(path, f"the weights of its {len(members)} members overflow when summed (beyond 1.8e308): a "
                            "tampered or invalid file")
    finite = _finite_positive(weight) or weight == 0  # (an integer beyond float's range is not finite)
    if not finite or (kind == "component" and len(members) != 1) or not math.isclose(
            weight, total, rel_tol=1e-9, abs_tol=1e-12):
        raise _refuse(path, f"its weight {weight} is not the sum of its {len(members)} member(s)' weights or they do "
                            f"not make a {kind}")
    names = [n for n, _ in base["linearized"]] if payload == "delta" else list(STAT_KEYS)
    ordered = OrderedDict((name, tensors[name]) for name in names)
    if content_sha256(ordered) != metadata.get("content_sha256"):
        raise _refuse(path, "its tensors do not match the content hash in its header (corrupted or edited)")
    bad = [n for n, t in ordered.items() if t.is_floating_point() and not bool(torch.isfinite(t).all())]
    if bad:
        raise _refuse(path, f"it holds NaN or inf (in {bad[:5]})")
    if kind == "component" and members[0]["sha256"] != metadata["content_sha256"]:
        raise _refuse(path, "its member entry does not describe its own tensors")
    if payload == "statistics" and kind == "component" and float(ordered["count"]) != weight:
        raise _refuse(path, "its weight is not its sample count")
    return Component(kind, payload, ordered, float(weight), members, base, settings, path=path,
                     signed="hmac_sha256" in metadata, verified=key is not None)


def component_paths(paths: Union[str, Sequence[str]]) -> List[str]:
    """The ``.safetensors`` files of a directory (sorted by name), or the given paths."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out = []
    for path in paths:
        if os.path.isdir(path):
            out += sorted(os.path.join(path, f) for f in os.listdir(path)
                          if f.endswith(".safetensors") and not f.startswith("."))
        else:
            out.append(str(path))
    return out


def load_components(paths: Union[str, Sequence[str]], *, key: Union[None, bytes, str] = None) -> List[Component]:
    """:func:`load_component` on every file (a directory: its ``.safetensors`` files),
    ordered by experience id (compositions after the components, in name order)."""
    loaded = [load_component(p, key=key) for p in component_paths(paths)]
    return sorted(loaded, key=lambda c: (c.kind != "component", c.experience if c.kind == "component" else 0))
