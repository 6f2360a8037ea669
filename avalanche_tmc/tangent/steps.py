"""The data of a plan: its steps, and references from one step's arguments to earlier
steps' values."""

from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Tuple

from .registry import Rule

__all__ = ["Ref", "Step", "subst", "subst_tangent", "iter_refs"]


@dataclass
class Ref:
    """The value of step ``index`` (in an argument of a later step)."""

    index: int


@dataclass
class Step:
    """One operation of the plan.

    ``op``: ``"input"`` (the network's input), ``"constant"`` (``target`` is the value),
    ``"attr"`` (a parameter or buffer of the model by name), ``"module"`` (the submodule
    named ``target``), ``"function"`` or ``"method"`` (``target`` is the function or method
    name). ``rule`` evaluates a module/function/method step, None: ``torch.func.jvp``;
    ``conf`` is given to the rule; ``params`` lists a module step's linearized parameters as
    ``(local name, full name)``.
    """

    op: str
    target: Any
    args: Any
    kwargs: Dict[str, Any]
    rule: Optional[Rule] = None
    conf: Any = None
    params: List[Tuple[str, str]] = field(default_factory=list)


def subst(value: Any, table: List[Any], tangent: bool = False) -> Any:
    """``value`` with every reference replaced by its entry of ``table``. With
    ``tangent=True`` (the tangent table) constants become None: they have no tangent."""
    if isinstance(value, Ref):
        return table[value.index]
    if isinstance(value, (list, tuple)):
        items = [subst(v, table, tangent) for v in value]
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, dict):
        return {k: subst(v, table, tangent) for k, v in value.items()}
    if tangent:
        return None
    if isinstance(value, slice):
        return slice(subst(value.start, table), subst(value.stop, table), subst(value.step, table))
    return value


def subst_tangent(value: Any, table: List[Any]) -> Any:
    """:func:`subst` on the tangent table."""
    return subst(value, table, tangent=True)


def iter_refs(value: Any) -> Iterator[Ref]:
    """Every reference in ``value`` (nested in lists, tuples, dicts and slices)."""
    if isinstance(value, Ref):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from iter_refs(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from iter_refs(v)
    elif isinstance(value, slice):
        yield from iter_refs([value.start, value.stop, value.step])
