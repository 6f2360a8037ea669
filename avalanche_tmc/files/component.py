"""The component record: what one component or composition file holds, the constants and
errors of the format, and what ``avalanche-tmc inspect`` prints of a file.

A **component** is what one experience contributes to a composition (``δ_t`` or the
experience's head statistics, its weight ``w_t``, its experience id and classes, how it
was trained, the base it belongs to); a **composition** is their weighted sum ``S``, the
total weight ``W`` and the list of its members. Both are a :class:`Component`.
"""

import numbers
import os
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

from torch import Tensor

from ..composition.additive import tensors_sha256

__all__ = [
    "FORMAT", "FORMAT_VERSION", "ComponentFileError", "IncompatibleComponentsError", "ComponentExistsError",
    "Component", "content_sha256", "describe",
]

FORMAT = "avalanche-tmc"
"""The ``format`` entry of every file this module writes."""

FORMAT_VERSION = 3
"""The format of component, composition and learned-state files. Files of another version
are refused: a newer one (an older reader cannot know what changed), and an older one
with a message saying what to do (version 2 named the network's classes by module paths
that have since moved; version 3 by registered names, :mod:`~avalanche_tmc.files.architectures`)."""

PAYLOADS = ("delta", "statistics")
KINDS = ("component", "composition")


class ComponentFileError(ValueError):
    """A file that is not a readable component or composition file: missing, truncated,
    not safetensors, not written by avalanche-tmc, a newer format, content not matching
    its hash, or NaN/inf inside."""


class IncompatibleComponentsError(ValueError):
    """Components that cannot be combined: another base model, head size, linearized set
    or kind; an experience twice; forgetting a file that is not a member."""


class ComponentExistsError(FileExistsError):
    """The output file exists (or another process created it meanwhile) and overwriting
    was not asked for: nothing was written."""


def _shown(path: Any) -> str:
    """A file name as messages print it: every control character (a terminal escape
    sequence in a crafted name) escaped as ``\\xNN``. The one helper for every file name an
    error or a message of the component files, the checkpoints or the command line prints."""
    return _clean(os.fspath(path) if isinstance(path, os.PathLike) else str(path))


def _refuse(path: str, why: str) -> ComponentFileError:
    """The error for a file that cannot be used, saying which file, why, and that nothing was loaded."""
    return ComponentFileError(f"{_shown(path)}: not a usable avalanche-tmc component file: {why}. Nothing was loaded.")


def content_sha256(tensors: Mapping[str, Tensor]) -> str:
    """SHA-256 of a file's tensors (what its header records)."""
    return tensors_sha256(tensors)


@dataclass
class Component:
    """A component or a composition, as held in one file.

    :ivar kind: ``"component"`` (one experience) or ``"composition"`` (a weighted sum).
    :ivar payload: ``"delta"`` (tangent) or ``"statistics"`` (training-free heads).
    :ivar tensors: ``δ_t`` or the statistics (component); ``S`` or the summed statistics
        (composition).
    :ivar weight: ``w_t`` (component) or ``W = Σ w_t`` (composition).
    :ivar members: one entry per experience: ``experience``, ``weight``, ``classes``
        (task label -> classes), ``sha256`` (content hash of its component).
    :ivar settings: how it was trained (component) or ``{}`` (composition).
    :ivar base: the base it belongs to (see :mod:`avalanche_tmc.files.bases`).
    :ivar path: the file it was read from, if any.
    :ivar signed: the file carries a signature (HMAC), checked or not.
    :ivar verified: its signature was checked against a key (and matched); without a key a
        signature is only present, never verified.
    """

    kind: str
    payload: str
    tensors: "OrderedDict[str, Tensor]"
    weight: float
    members: List[Dict[str, Any]]
    base: Dict[str, Any]
    settings: Dict[str, Any] = field(default_factory=dict)
    path: Optional[str] = None
    signed: bool = False
    verified: bool = False

    @property
    def signature(self) -> str:
        """``"verified"`` (checked against a key), ``"present, not verified"`` (no key was
        given: anyone could have written it) or ``"absent"``."""
        return "verified" if self.verified else "present, not verified" if self.signed else "absent"

    @property
    def experience(self) -> Optional[int]:
        """The experience id of a component (``None`` for a composition)."""
        return self.members[0]["experience"] if self.kind == "component" else None

    @property
    def experiences(self) -> List[Any]:
        """The experience ids of every member."""
        return [m["experience"] for m in self.members]

    @property
    def classes(self) -> Dict[int, List[int]]:
        """Task label -> classes, over every member."""
        out: Dict[int, set] = {}
        for member in self.members:
            for task, classes in member["classes"].items():
                out.setdefault(int(task), set()).update(classes)
        return {task: sorted(classes) for task, classes in sorted(out.items())}

    @property
    def sha256(self) -> str:
        """Hash of the tensors (names, dtypes, shapes, bytes): the file's identity."""
        return content_sha256(self.tensors)

    def name(self) -> str:
        """How messages refer to it: its file, or its experience."""
        if self.path is not None:
            return _shown(os.path.basename(self.path))
        return f"component of experience {self.experience}" if self.kind == "component" else "composition"


# ---------------------------------------------------------------------------- making one


def _classes_json(classes: Optional[Mapping]) -> Dict[str, List[int]]:
    if classes is None:
        return {}
    return {str(int(task)): sorted(int(c) for c in values) for task, values in classes.items()}


def _clean_tensors(tensors: Mapping[str, Tensor]) -> "OrderedDict[str, Tensor]":
    """The tensors as a file holds them: detached, on the CPU, contiguous, copied."""
    return OrderedDict((name, t.detach().to("cpu").contiguous().clone()) for name, t in tensors.items())


def _experience_id(experience: Any) -> int:
    if isinstance(experience, bool) or not isinstance(experience, numbers.Integral):
        raise ValueError(f"An experience id is an integer (an index into the training stream), got {experience!r}.")
    return int(experience)


def _component(payload: str, tensors: Mapping[str, Tensor], weight: float, base: Dict[str, Any], experience: Any,
               classes: Optional[Mapping], settings: Optional[Mapping]) -> Component:
    """A component record of one experience (its tensors copied, its member entry made)."""
    experience = _experience_id(experience)
    tensors = _clean_tensors(tensors)
    member = dict(experience=experience, weight=float(weight), classes=_classes_json(classes),
                  sha256=content_sha256(tensors))
    return Component("component", payload, tensors, float(weight), [member], base, dict(settings or {}))


# ---------------------------------------------------------------------------- printing


def _clean(value: Any) -> Any:
    """``value`` with every control character of its strings (terminal escape sequences)
    shown as a ``\\xNN`` escape: what a file says is printed, never interpreted."""
    if isinstance(value, str):
        return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in value)
    if isinstance(value, dict):
        return {_clean(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def describe(component: Component) -> Dict[str, Any]:
    """What ``avalanche-tmc inspect`` prints: kind, payload, weight, members, settings,
    base, tensor count and size, and its signature: ``signature`` is ``"verified"``,
    ``"present, not verified"`` (read without a key) or ``"absent"``, and ``signed`` is
    true only for a verified one; every string sanitized."""
    return _clean(dict(
        file=component.path, kind=component.kind, payload=component.payload, weight=component.weight,
        experiences=component.experiences, classes={str(t): c for t, c in component.classes.items()},
        members=component.members, settings=component.settings, base=component.base,
        tensors=len(component.tensors), values=int(sum(t.numel() for t in component.tensors.values())),
        bytes=int(sum(t.numel() * t.element_size() for t in component.tensors.values())),
        sha256=component.sha256, signed=component.verified, signature=component.signature,
    ))
