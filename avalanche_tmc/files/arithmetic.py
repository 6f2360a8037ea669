"""Composing and forgetting component files: the arithmetic of
:class:`~avalanche_tmc.composition.additive.AdditiveComposition`, applied to
:class:`~avalanche_tmc.files.component.Component` records.

A composition holds the weighted sum ``S = Σ w_t δ_t`` (statistics: their sum), the total
weight ``W`` and its members (experience, weight, classes, content hash of each member's
file): ``δ = S / W``. Forgetting a member subtracts its file exactly as
:class:`~avalanche_tmc.composition.deltas.DeltaComposition` does. Composing component files in
a given order gives bit for bit the sum that ``DeltaComposition`` builds in that order.
Components combine only on the same base (:func:`~avalanche_tmc.files.bases.check_same_base`),
each experience once, no content under two experience ids.
"""

import contextlib
from collections import OrderedDict
from dataclasses import replace
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

import torch

from ..composition.additive import AdditiveComposition
from ..composition.deltas import Delta
from .bases import check_same_base
from .component import Component, IncompatibleComponentsError, _clean

__all__ = ["compose_components", "forget_component", "composed_delta"]


def _check_distinct(components: Sequence[Component], learned: Optional[Mapping[Any, str]] = None,
                    where: str = "this strategy") -> None:
    """Each experience once, and no content under two experience ids: among ``components``
    and, when given, the members already ``learned`` (experience id -> content hash) by
    ``where``. The one rule of :func:`compose_components` and of loading files into a strategy."""
    experiences: Dict[int, str] = {}
    contents: Dict[str, Tuple[str, Any]] = {}
    for experience, sha256 in (learned or {}).items():
        experiences[experience] = where
        contents[sha256] = (where, experience)
    for component in components:
        for member in component.members:
            if member["experience"] in experiences:
                raise IncompatibleComponentsError(
                    f"Experience {member['experience']} is in both {experiences[member['experience']]} and "
                    f"{component.name()}: a composition holds each experience once (forget it from one of them first).")
            experiences[member["experience"]] = component.name()
            if member["sha256"] in contents:
                other, exp = contents[member["sha256"]]
                raise IncompatibleComponentsError(
                    f"{component.name()} (experience {member['experience']}) and {other} (experience {exp}) hold the "
                    "same content: one component relabelled as another experience is refused (it would count twice).")
            contents[member["sha256"]] = (component.name(), member["experience"])


def _merge_members(additive: AdditiveComposition, composition: Component) -> AdditiveComposition:
    """Merge a composition's members into ``additive`` by their sum (each member known by
    its weight and content hash, as a composition that keeps no components holds it)."""
    additive.merge({m["experience"]: m["weight"] for m in composition.members}, composition.tensors,
                   checksums={m["experience"]: m["sha256"] for m in composition.members})
    return additive


def _additive(payload: str) -> AdditiveComposition:
    """An empty composition of ``payload`` keeping the sum only (tangent: ``w_t δ_t``; statistics: as they are)."""
    return AdditiveComposition(keep_components=False, scaled=payload == "delta")


def _as_additive(composition: Component) -> AdditiveComposition:
    """A composition file as the :class:`~avalanche_tmc.composition.additive.AdditiveComposition` it holds."""
    return _merge_members(_additive(composition.payload), composition)


def _from_additive(additive: AdditiveComposition, members: List[Dict[str, Any]], first: Component) -> Component:
    """The composition record of ``additive``'s sum, with ``members``, on ``first``'s base."""
    return Component("composition", first.payload, additive.summed(), additive.total_weight, members,
                     dict(first.base))


def _weighting(component: Component) -> Optional[str]:
    """How a tangent file's weights were chosen (``"mean"``: 1 each, ``"samples"``: sample
    counts, ``"mixed"``: a composition of both, composed on purpose), as its settings record
    it; None when unknown (statistics are always weighted by their sample counts)."""
    weighting = component.settings.get("weighting") if component.payload == "delta" else None
    return None if weighting is None else str(weighting)


def _check_weighting(components: Sequence[Component], mixed_weighting: bool) -> Optional[str]:
    """The weighting the composition records: the one all files share, ``"mixed"`` when
    they differ and ``mixed_weighting`` allows it (refused otherwise), None when unknown."""
    known = [(c, _weighting(c)) for c in components if _weighting(c) is not None]
    kinds = {w for _, w in known}
    if len(kinds) <= 1:
        return next(iter(kinds), None)
    if not mixed_weighting:
        (a, wa), (b, wb) = known[0], next((c, w) for c, w in known if w != known[0][1])
        raise IncompatibleComponentsError(
            f"{a.name()} was trained with weighting {_clean(wa)!r} (weight {a.weight:g}) and {b.name()} with "
            f"{_clean(wb)!r} (weight {b.weight:g}): their weights are not on one scale, so one silo's experiences "
            "would be weighted by sample counts and the other's by 1 each (train_parallel refuses the same). Train "
            "every silo with the same weighting (--weighting), or compose them anyway with mixed_weighting=True "
            "(avalanche-tmc compose --mixed-weighting).")
    return "mixed"


def compose_components(components: Iterable[Component], *, mixed_weighting: bool = False) -> Component:
    """A composition of components and/or compositions, summed in the order given, with
    the :class:`~avalanche_tmc.composition.additive.AdditiveComposition` the strategies use: for
    tangent components ``S ← S + w_t δ_t`` from zeros, in ``δ``'s dtype, so the result is
    bit for bit the sum a :class:`~avalanche_tmc.composition.deltas.DeltaComposition` builds in
    that order; statistics are added as they are. Tangent files trained with different
    weightings (``"mean"`` and ``"samples"``, as their settings record) are refused unless
    ``mixed_weighting=True``; the composition records the weighting (``"mixed"`` then).

    :raises IncompatibleComponentsError: different bases (naming the difference), an
        experience present twice, the same content under two experience ids, different
        weightings (without ``mixed_weighting``).
    """
    components = list(components)
    if not components:
        raise ValueError("Nothing to compose: give at least one component file.")
    first = components[0]
    for component in components:
        check_same_base(first, component)
    _check_distinct(components)
    weighting = _check_weighting(components, mixed_weighting)
    additive = _additive(first.payload)
    for component in components:
        with _numbers_of(component):
            if component.kind == "component":
                additive.add(component.experience, component.tensors, component.weight)
            elif component.members:
                part = _as_additive(component)
                additive.merge(part.weights, component.tensors, checksums=part.checksums)
    settings = {} if weighting is None else dict(weighting=weighting)
    if not len(additive):  # only empty compositions
        return replace(first, members=[], path=None, settings=settings, signed=False, verified=False)
    return replace(_from_additive(additive, [m for c in components for m in c.members], first), settings=settings)


@contextlib.contextmanager
def _numbers_of(component: Component) -> Iterator[None]:
    """Arithmetic that overflows (a sum or a total weight that is no longer finite) is a
    combination that does not work: :class:`IncompatibleComponentsError`, naming the file."""
    try:
        yield
    except IncompatibleComponentsError:
        raise
    except ValueError as error:
        raise IncompatibleComponentsError(f"{component.name()} cannot be combined: {error}") from None


def forget_component(composition: Component, component: Component) -> Component:
    """The composition without ``component`` (exactly: ``S − w δ``, ``W − w``; statistics:
    their difference). ``component`` must be the very file that was composed (its
    content hash and weight are checked).

    :raises IncompatibleComponentsError: another base, or not a member of the composition.
    """
    if composition.kind != "composition":
        raise IncompatibleComponentsError(f"{composition.name()} is a component, not a composition: forget from the "
                                          "composition file (avalanche-tmc compose writes one).")
    if component.kind != "component":
        raise IncompatibleComponentsError(f"{component.name()} is a composition: forget component files one by one.")
    check_same_base(composition, component)
    index = next((i for i, m in enumerate(composition.members) if m["experience"] == component.experience), None)
    if index is None:
        raise IncompatibleComponentsError(
            f"Experience {component.experience} ({component.name()}) is not in {composition.name()} (members: "
            f"experiences {composition.experiences}).")
    member = composition.members[index]
    if member["sha256"] != component.sha256 or member["weight"] != component.weight:
        what = "content hash" if member["sha256"] != component.sha256 else f"weight ({component.weight:g} vs " \
                                                                          f"{member['weight']:g})"
        raise IncompatibleComponentsError(
            f"{component.name()} is not the component composed for experience {component.experience} in "
            f"{composition.name()} (its {what} differs): subtracting it would leave a wrong composition.")
    with _numbers_of(component):
        additive = _as_additive(composition)
        additive.forget(component.experience, component.tensors)
    members = composition.members[:index] + composition.members[index + 1:]
    return replace(_from_additive(additive, members, composition), settings=dict(composition.settings))


def composed_delta(composition: Component) -> Delta:
    """``δ = S / W`` of a tangent composition (a component: its ``δ``); zeros when empty."""
    if composition.payload != "delta":
        raise ValueError(f"{composition.name()} holds head statistics, not a tangent δ.")
    if composition.kind == "component":
        return OrderedDict((n, t.clone()) for n, t in composition.tensors.items())
    if composition.weight <= 0:
        return OrderedDict((n, torch.zeros_like(t)) for n, t in composition.tensors.items())
    delta = OrderedDict((n, t * (1.0 / composition.weight)) for n, t in composition.tensors.items())
    bad = [n for n, t in delta.items() if not bool(torch.isfinite(t).all())]
    if bad:
        raise IncompatibleComponentsError(f"{composition.name()}: δ = S / W is not finite (W = "
                                          f"{composition.weight:g}, in {bad[:5]}): it makes no model.")
    return delta

