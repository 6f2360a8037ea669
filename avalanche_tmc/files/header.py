"""A file's header, read and checked before any of its tensors is.

A component file is safetensors: an 8-byte length, a JSON header, the raw tensor bytes.
The header is read from a regular file only, bounded, and checked: well-formed JSON,
declaring exactly the file's size, tensors that tile the data section, the format and
version this library writes, the integrity hash (and the signature, with a key), member
entries of integer experience ids and positive finite weights, and tensors of the names,
shapes and dtypes its base lists. Anything else is refused with
:class:`~avalanche_tmc.files.component.ComponentFileError` before a tensor is read, so
memory is bounded by what the header declares.
"""

import hmac
import json
import math
import re
import struct
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

from .component import FORMAT, FORMAT_VERSION, KINDS, PAYLOADS, _clean, _refuse
from .filesystem import _read_exactly, read_regular_file
from .signing import hmac_signature, metadata_sha256

__all__: List[str] = []  # the format's checks; storage.load_component is what reads a file

_MAX_HEADER = 64 * 1024 * 1024  # safetensors' own limit is 100 MB


def _json(text: Union[str, bytes], path: str, what: str) -> Any:
    try:
        return json.loads(text)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise _refuse(path, f"{what} is not JSON (or nested too deeply)") from None


_DTYPES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}
_TORCH_DTYPES = {"float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16"}


def _layout(header: Mapping[str, Any], path: str) -> Dict[str, Any]:
    """``name -> (dtype, shape)`` of a safetensors header, checked to be
    well-formed and to tile the data section exactly (returned under ``"__size__"``)."""
    layout, ends = {}, []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(entry, dict) or not isinstance(entry.get("dtype"), str) or entry["dtype"] not in _DTYPES:
            raise _refuse(path, f"tensor {_clean(name)!r} has no known dtype")
        shape, offsets = entry.get("shape"), entry.get("data_offsets")
        if not (isinstance(shape, list) and all(type(s) is int and s >= 0 for s in shape)
                and isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)):
            raise _refuse(path, f"tensor {_clean(name)!r} has a malformed shape or offsets")
        numel = math.prod(shape)
        if offsets[0] < 0 or offsets[1] - offsets[0] != numel * _DTYPES[entry["dtype"]]:
            raise _refuse(path, f"tensor {_clean(name)!r}'s offsets do not fit its shape and dtype")
        layout[name] = (entry["dtype"], shape)
        ends.append(tuple(offsets))
    ends.sort()
    position = 0
    for begin, end in ends:
        if begin != position:
            raise _refuse(path, "its tensors overlap or leave gaps")
        position = end
    layout["__size__"] = position
    return layout


def _json_field(metadata: Mapping[str, str], key: str, path: str, kind: Union[type, Tuple[type, ...]]) -> Any:
    if key not in metadata:
        raise _refuse(path, f"its metadata lacks {key!r}")
    value = _json(metadata[key], path, f"its metadata entry {key!r}")
    if not isinstance(value, kind) or isinstance(value, bool):
        raise _refuse(path, f"its metadata entry {key!r} is a {type(value).__name__}")
    return value


def _is_int(value: Any) -> bool:
    return type(value) is int


def _finite_positive(value: Any) -> bool:
    """A positive number whose float is finite (an integer beyond float's range, 10**400, is not)."""
    if type(value) not in (int, float):
        return False
    try:
        return math.isfinite(float(value)) and value > 0
    except OverflowError:
        return False


CLASS_ID_MAX = 2 ** 31 - 1
"""The largest class id a file may list (beyond it no head or mask could hold it)."""


def _class_id(value: Any) -> bool:
    return _is_int(value) and 0 <= value <= CLASS_ID_MAX


def _check_members(members: List[Any], path: str) -> None:
    seen = set()
    for member in members:
        if not isinstance(member, dict) or not {"experience", "weight", "classes", "sha256"} <= set(member):
            raise _refuse(path, "a member entry lacks experience, weight, classes or sha256")
        if not _is_int(member["experience"]):
            raise _refuse(path, f"experience id {_clean(repr(member['experience']))} is not an integer")
        if member["experience"] in seen:
            raise _refuse(path, f"experience {member['experience']} is listed twice")
        seen.add(member["experience"])
        if not _finite_positive(member["weight"]):
            raise _refuse(path, f"experience {member['experience']} has weight {_clean(repr(member['weight']))}")
        if not isinstance(member["sha256"], str) or len(member["sha256"]) != 64:
            raise _refuse(path, "a member's sha256 is not a SHA-256")
        classes = member["classes"]
        if not isinstance(classes, dict) or not all(
                isinstance(t, str) and re.fullmatch(r"-?[0-9]{1,9}", t) and isinstance(c, list)
                and all(_class_id(x) for x in c)
                for t, c in classes.items()):
            raise _refuse(path, f"a member's classes are not task label -> list of integers in 0..{CLASS_ID_MAX}")


def _check_base(base: Dict[str, Any], payload: str, path: str) -> None:
    if base.get("head_size") is not None and not _is_int(base["head_size"]):
        raise _refuse(path, "its base's head size is not an integer")
    if payload == "delta":
        linearized = base.get("linearized")
        if not (isinstance(linearized, list) and all(
                isinstance(e, list) and len(e) == 2 and isinstance(e[0], str) and isinstance(e[1], list)
                and all(_is_int(s) and s >= 0 for s in e[1]) for e in linearized)) or not isinstance(base.get("dtype"),
                                                                                                    str):
            raise _refuse(path, "its base does not list the linearized parameters (name, shape) and dtype")
    elif not _is_int(base.get("head_size")):
        raise _refuse(path, "its base does not give the number of classes")


def _expected_layout(base: Mapping[str, Any], payload: str, layout: Mapping[str, Any], path: str) -> None:
    """Check the tensors' names, shapes and dtypes against what the base declares."""
    found = {n: v for n, v in layout.items() if n != "__size__"}
    if payload == "delta":
        expected = {name: list(shape) for name, shape in base["linearized"]}
        dtypes = {_TORCH_DTYPES.get(d) for d in base["dtype"].split(",")}
    else:
        width = found.get("gram", (None, []))[1]
        d, c = (width[0] if len(width) == 2 else -1), base["head_size"]
        expected = dict(gram=[d, d], cross=[d, c], target_gram=[c, c], count=[], class_sum=[c, d], class_count=[c])
        dtypes = {found.get("gram", ("F64",))[0]} & {"F64", "F32"}
    if set(found) != set(expected):
        raise _refuse(path, "its tensors are not the ones its base lists")
    wrong = [f"{_clean(n)}: {found[n][1]} {found[n][0]} (base: {expected[n]})" for n in expected
             if found[n][1] != expected[n] or found[n][0] not in dtypes]
    if wrong:
        raise _refuse(path, f"tensors do not have the shape or dtype of its base ({'; '.join(wrong[:3])})")


def _read_verified(path: str, key: Optional[bytes]) -> Tuple[Dict[str, str], bytes]:
    """(header metadata, tensor bytes) of a file, bounded and checked before its tensors are read."""
    f, size = read_regular_file(path)
    with f:
        if size < 8:
            raise _refuse(path, f"the file has {size} bytes, too short for a safetensors header (truncated?)")
        (length,) = struct.unpack("<Q", _read_exactly(f, 8, path))
        if length > min(_MAX_HEADER, size - 8):
            raise _refuse(path, f"its header claims {length} bytes but the file has {size - 8} after the length "
                                "(truncated, or not a safetensors file)")
        raw = _read_exactly(f, length, path)
        header = _json(raw, path, "its header")
        if not isinstance(header, dict) or not isinstance(header.get("__metadata__"), dict):
            raise _refuse(path, "it has no metadata (a safetensors file not written by avalanche-tmc)")
        metadata = header["__metadata__"]
        if not all(isinstance(v, str) for v in metadata.values()):
            raise _refuse(path, "its metadata entries are not strings")
        layout = _layout(header, path)
        if 8 + length + layout["__size__"] != size:
            raise _refuse(path, f"its header declares {8 + length + layout['__size__']} bytes but the file has {size} "
                                "(truncated or padded)")
        _check_metadata(metadata, path, key)
        payload = metadata["payload"]
        base = _json_field(metadata, "base", path, dict)
        _check_base(base, payload, path)
        _expected_layout(base, payload, layout, path)
        data = struct.pack("<Q", length) + raw + _read_exactly(f, layout["__size__"], path)
    return metadata, data


def _check_metadata(metadata: Mapping[str, str], path: str, key: Optional[bytes]) -> None:
    if metadata.get("format") != FORMAT:
        raise _refuse(path, f"its format is {_clean(repr(metadata.get('format')))}, not {FORMAT!r}")
    version = metadata.get("format_version", "")
    if not re.fullmatch(r"[0-9]{1,6}", version):
        raise _refuse(path, "its format_version is not a number")
    if int(version) > FORMAT_VERSION:
        raise _refuse(path, f"it is format version {int(version)}; this avalanche-tmc reads up to {FORMAT_VERSION} "
                            "(upgrade avalanche-tmc)")
    if int(version) == 2:
        raise _refuse(path, "it is format version 2, written before files named the network's classes by registered "
                            "names (version 2 recorded module paths that have since moved, so its base cannot be "
                            f"checked); this avalanche-tmc reads format version {FORMAT_VERSION}. Write the component "
                            "again with this version: train its experience again (avalanche-tmc train-component, or "
                            "a strategy's component_dir) and compose the new files")
    if int(version) < FORMAT_VERSION:
        raise _refuse(path, f"it is format version {int(version)}, written before files carried an integrity hash "
                            "over their metadata; write it again with this avalanche-tmc")
    if metadata.get("kind") not in KINDS or metadata.get("payload") not in PAYLOADS:
        raise _refuse(path, f"unknown kind {_clean(repr(metadata.get('kind')))} or payload "
                            f"{_clean(repr(metadata.get('payload')))}")
    if metadata.get("file_sha256") != metadata_sha256(metadata):
        raise _refuse(path, "its metadata do not match the integrity hash in its header (corrupted or edited)")
    signature = metadata.get("hmac_sha256")
    if key is not None:
        if signature is None:
            raise _refuse(path, "it is not signed, and a key was given: only files signed with that key are accepted")
        if not hmac.compare_digest(str(signature), hmac_signature(key, metadata["file_sha256"])):
            raise _refuse(path, "its signature does not match the key (signed with another key, or edited)")


