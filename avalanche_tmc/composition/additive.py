"""One additive composition: a weighted sum of per-experience contributions that can be
added, forgotten exactly, merged from elsewhere, snapshotted and restored. Torch only.

What it is for: every place where "what an experience contributes" is summed. TMC's
tangent components (``S = Σ w_i δ_i``, ``W = Σ w_i``, the model is ``δ = S / W``:
:class:`~avalanche_tmc.composition.deltas.DeltaComposition`), the training-free heads' sufficient
statistics (``S = Σ stats_i``, already sums over samples, weight = sample count:
:class:`~avalanche_tmc.composition.statistics.StatisticsComposition`), composition files
(:mod:`~avalanche_tmc.files`) and the sums exchanged by
:mod:`~avalanche_tmc.distributed` are all this class, so they agree bit for bit when the
contributions are added in the same order.

A contribution is a mapping name -> tensor. ``scaled=True`` adds ``w_i · x_i`` (tangent
components), ``scaled=False`` adds ``x_i`` itself (statistics). A composition that keeps
no copy of its members (O(1) memory) keeps each one's checksum (:func:`tensors_sha256` of
its tensors as added), so a contribution handed back to :meth:`AdditiveComposition.forget`
must be the very one that was added.
"""

import copy
import hashlib
import math
from collections import OrderedDict
from typing import Any, Dict, Hashable, Iterable, List, Mapping, Optional, Tuple

import torch
from torch import Tensor

__all__ = ["Tensors", "tensors_sha256", "AdditiveComposition"]

Tensors = "OrderedDict[str, Tensor]"


def tensors_sha256(tensors: Mapping[str, Tensor]) -> str:
    """SHA-256 of named tensors (names, shapes, dtypes and values, in name order)."""
    digest = hashlib.sha256()
    for name in sorted(tensors):
        tensor = tensors[name].detach().to("cpu").contiguous()
        digest.update(f"{name}:{tuple(tensor.shape)}:{tensor.dtype}".encode())
        digest.update(tensor.view(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    return digest.hexdigest()


def _positive_weight(weight: Any, key: Hashable) -> float:
    if isinstance(weight, bool):
        raise ValueError(f"Component weight must be a positive finite number, got {weight!r} (for {key!r}).")
    try:
        value = float(weight)
    except (TypeError, ValueError):
        value = float("nan")
    if not 0 < value < math.inf:
        raise ValueError(f"Component weight must be a positive finite number, got {weight!r} (for {key!r}).")
    return value


class AdditiveComposition:
    """``S = Σ_i c_i x_i`` and ``W = Σ_i w_i`` over named members, with ``c_i = w_i``
    (``scaled=True``) or 1 (``scaled=False``).

    :param keep_components: keep every member's tensors (O(T) memory) so that
        :meth:`forget` needs nothing else; ``False`` keeps the sum only and
        :meth:`forget` needs the member's tensors back (checked against its checksum).
    :param scaled: whether a member's weight multiplies its tensors in the sum.

    Subclasses name the contribution in messages (:attr:`noun`) and may check
    contributions (:meth:`_checked`, :meth:`_check_finite`, :meth:`_check_compatible`).
    """

    noun = "component"
    argument = "tensors"  # what forget() takes, in messages

    def __init__(self, keep_components: bool = True, scaled: bool = True):
        self.keep_components = keep_components
        self.scaled = scaled
        self._sum: Optional[Dict[str, Tensor]] = None
        self._total_weight = 0.0
        self._weights: "OrderedDict[Hashable, float]" = OrderedDict()
        self._components: "OrderedDict[Hashable, Dict[str, Tensor]]" = OrderedDict()
        self._checksums: "OrderedDict[Hashable, str]" = OrderedDict()
        self._template: Optional[Dict[str, Tensor]] = None

    # ------------------------------------------------------------------ reading
    def __len__(self) -> int:
        return len(self._weights)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._weights

    @property
    def keys(self) -> List[Hashable]:
        """Keys of the members, in the order added."""
        return list(self._weights)

    @property
    def weights(self) -> Dict[Hashable, float]:
        """Key -> weight ``w_i`` of every member."""
        return dict(self._weights)

    @property
    def total_weight(self) -> float:
        """``W = Σ w_i`` (0 when empty)."""
        return self._total_weight

    @property
    def checksums(self) -> Dict[Hashable, str]:
        """Key -> :func:`tensors_sha256` of the member's tensors as added (computed when
        asked for a kept member: only a composition that keeps no members stores them)."""
        return {key: self._checksums[key] if key in self._checksums else tensors_sha256(self._components[key])
                for key in self._weights}

    @property
    def components(self) -> "OrderedDict[Hashable, Dict[str, Tensor]]":
        """Key -> the member's tensors (only when ``keep_components=True``)."""
        if not self.keep_components:
            raise RuntimeError(
                "This composition keeps only the running sum (keep_components=False); "
                "individual components are not stored."
            )
        return OrderedDict(self._components)

    def iter_components(self) -> Iterable[Tuple[Hashable, float, Dict[str, Tensor]]]:
        """``(key, weight, tensors)`` for every kept member."""
        for key, tensors in self.components.items():
            yield key, self._weights[key], tensors

    def summed(self) -> "OrderedDict[str, Tensor]":
        """``S``; zeros once every member is forgotten. Raises when it never had a member."""
        if self._sum is None:
            raise RuntimeError("The composition is empty and has never seen a component.")
        return OrderedDict(self._sum)

    def mean(self) -> "OrderedDict[str, Tensor]":
        """``S / W``; all zeros when empty."""
        if self._template is None:
            raise RuntimeError("The composition is empty and has never seen a component.")
        if not self._weights:
            return OrderedDict((n, torch.zeros_like(t)) for n, t in self._template.items())
        return OrderedDict((n, t * (1.0 / self._total_weight)) for n, t in self._sum.items())

    # ------------------------------------------------------------------ checks (subclasses refine)
    def _checked(self, key: Hashable, tensors: Mapping[str, Tensor]) -> "OrderedDict[str, Tensor]":
        """The contribution as stored: detached, in its own order."""
        return OrderedDict((n, t.detach()) for n, t in tensors.items())

    def _check_compatible(self, tensors: Mapping[str, Tensor]) -> None:
        template = self._template
        if template is None:
            return
        if template.keys() != tensors.keys():
            raise ValueError(f"Incompatible {self.noun}s: names differ ({sorted(set(template) ^ set(tensors))[:5]}).")
        wrong = [n for n in template if template[n].shape != tensors[n].shape]
        if wrong:
            raise ValueError(f"Incompatible {self.noun}s: shapes differ in {wrong[:5]}.")

    def _check_finite(self, tensors: Mapping[str, Tensor], what: str) -> None:
        bad = [n for n, t in tensors.items() if not bool(torch.isfinite(t).all())]
        if bad:
            raise ValueError(f"The {what} is not finite (NaN or inf in {bad[:5]}): it is never composed.")

    # ------------------------------------------------------------------ changing
    def _accumulate(self, tensors: Mapping[str, Tensor], factor: float) -> Dict[str, Tensor]:
        if self._sum is None:
            # zeros of each member's shape, dtype and device, stored as one element each
            # (an expanded view): a full copy would put one more network-sized tensor in
            # every pickled checkpoint and in memory
            self._template = OrderedDict(
                (n, torch.zeros((), dtype=t.dtype, device=t.device).expand(t.shape)) for n, t in tensors.items())
            base: Mapping[str, Tensor] = self._template
        else:
            base = self._sum
        return OrderedDict((n, base[n] + factor * tensors[n].to(base[n])) for n in base)

    def add(self, key: Hashable, tensors: Mapping[str, Tensor], weight: float = 1.0) -> None:
        """Add a member under ``key`` (new) with weight ``w`` (> 0, finite); a member or a
        sum holding NaN/inf, or a total weight that overflows, is refused and nothing changes."""
        if key in self._weights:
            raise KeyError(f"A {self.noun} with key {key!r} is already in the composition; forget it first.")
        weight = _positive_weight(weight, key)
        tensors = self._checked(key, tensors)
        self._check_compatible(tensors)
        self._check_finite(tensors, f"{self.noun} {key!r}")
        total = self._total_weight + weight
        if not math.isfinite(total):
            raise ValueError(f"Adding {key!r} (weight {weight:g}) makes the total weight infinite: the composed "
                             "model would be zero. Use smaller weights.")
        template = self._template
        new_sum = self._accumulate(tensors, weight if self.scaled else 1.0)
        try:
            self._check_finite(new_sum, f"running sum after adding {key!r} (weight {weight:g})")
        except ValueError:
            self._template = template
            raise
        self._sum, self._total_weight = new_sum, total
        self._weights[key] = weight
        if self.keep_components:
            self._components[key] = OrderedDict((n, t.clone()) for n, t in tensors.items())
        else:
            self._checksums[key] = tensors_sha256(tensors)

    def merge(self, weights: Mapping[Hashable, float], total: Mapping[str, Tensor],
              components: Optional[Mapping[Hashable, Mapping[str, Tensor]]] = None,
              checksums: Optional[Mapping[Hashable, str]] = None) -> None:
        """Add several members at once from their sum ``total`` (computed elsewhere: another
        process, a composition file). ``weights``: key -> weight of each member;
        ``components`` (needed when this composition keeps them) and ``checksums``
        (computed from ``components`` when not given) identify each member for
        :meth:`forget`. Nothing changes when it is refused."""
        weights = OrderedDict((key, _positive_weight(w, key)) for key, w in weights.items())
        twice = [key for key in weights if key in self._weights]
        if twice:
            raise KeyError(f"{self.noun}s {twice} are already in the composition; forget them first.")
        if self.keep_components and (components is None or not set(weights) <= set(components)):
            raise ValueError("This composition keeps its components: merge() needs each member's tensors.")
        total = self._checked("sum", total)
        self._check_compatible(total)
        self._check_finite(total, "merged sum")
        new_total = self._total_weight + sum(weights.values())
        if not math.isfinite(new_total):
            raise ValueError("Merging makes the total weight infinite: the composed model would be zero.")
        sums = OrderedDict()
        for key in [] if self.keep_components else weights:
            if checksums is not None and key in checksums:
                sums[key] = str(checksums[key])
            elif components is not None and key in components:
                sums[key] = tensors_sha256(components[key])
            else:
                raise ValueError(f"merge() needs the checksum or the tensors of member {key!r}.")
        self._sum = self._accumulate(total, 1.0)
        self._total_weight = new_total
        self._weights.update(weights)
        self._checksums.update(sums)
        if self.keep_components:
            self._components.update((key, OrderedDict((n, t.detach().clone()) for n, t in components[key].items()))
                                    for key in weights)

    def forget(self, key: Hashable, tensors: Optional[Mapping[str, Tensor]] = None) -> None:
        """Remove member ``key`` exactly: afterwards the sum is that of the others (to float
        rounding). ``tensors`` is needed only when members are not kept, and must then be the
        member as added (its checksum is compared); when kept, a given ``tensors`` must be
        the kept one bit for bit (same dtype and values; the kept one is subtracted)."""
        if key not in self._weights:
            raise KeyError(f"No {self.noun} with key {key!r}; present: {self.keys}.")
        if tensors is None:
            if not self.keep_components:
                raise ValueError(
                    f"To forget {key!r} from a composition that keeps no components, pass its {self.argument} "
                    "(e.g. loaded from the component's file)."
                )
            tensors = self._components[key]
        tensors = self._checked(key, tensors)
        self._check_compatible(tensors)
        self._check_finite(tensors, f"{self.noun} given to forget {key!r}")
        if self.keep_components:  # bit for bit the kept one (dtype and values), as the checksum compares below
            kept = self._components[key]
            differ = [n for n in kept if tensors[n].dtype != kept[n].dtype
                      or not torch.equal(tensors[n].to(kept[n].device), kept[n])]
            if differ:
                raise ValueError(self._differs_message(key, differ))
            tensors = kept
        elif tensors_sha256(tensors) != self._checksums[key]:
            raise ValueError(
                f"The {self.noun} given to forget {key!r} is not the one added under that key (its checksum "
                f"differs): subtracting it would leave the composition wrong. Pass exactly the {self.noun} that "
                "was added (e.g. read back from its file)."
            )
        weight = self._weights.pop(key)
        self._components.pop(key, None)
        self._checksums.pop(key, None)
        self._sum = self._accumulate(tensors, -(weight if self.scaled else 1.0))
        self._total_weight -= weight
        if not self._weights:  # clear the rounding residue: nothing is left
            self._sum = OrderedDict((n, torch.zeros_like(t)) for n, t in self._template.items())
            self._total_weight = 0.0

    def _differs_message(self, key: Hashable, names: List[str]) -> str:
        return (f"The {self.noun} given to forget {key!r} differs from the component kept under that key (in "
                f"{names[:5]}); subtracting it would leave the composition wrong. Call forget({key!r}) without "
                "one: the kept component is used.")

    # ------------------------------------------------------------------ undo
    def snapshot(self) -> Dict[str, Any]:
        """The state, for :meth:`restore` (cheap: tensors are shared, never changed in place)."""
        return dict(sum=self._sum, total_weight=self._total_weight, weights=OrderedDict(self._weights),
                    components=OrderedDict(self._components), checksums=OrderedDict(self._checksums),
                    template=self._template)

    def restore(self, state: Mapping[str, Any]) -> None:
        """Go back exactly to a :meth:`snapshot`."""
        self._sum = state["sum"]
        self._total_weight = state["total_weight"]
        self._weights = OrderedDict(state["weights"])
        self._components = OrderedDict(state["components"])
        self._checksums = OrderedDict(state.get("checksums", {}))
        self._template = state["template"]

    def empty_like(self, keep_components: Optional[bool] = None) -> "AdditiveComposition":
        """A new, empty composition of the same kind and settings (``keep_components``: as
        this one's unless given)."""
        new = copy.copy(self)
        keep = self.keep_components if keep_components is None else keep_components
        AdditiveComposition.__init__(new, keep_components=keep, scaled=self.scaled)
        return new

