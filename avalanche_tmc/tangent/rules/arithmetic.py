"""Rules of arithmetic: ``+ - * /`` between two tensors (or a tensor and a number) and
matrix products, with broadcasting."""

import operator
from typing import Optional

import torch
from torch import Tensor, fx

from .._ops import add_tangents, expand_to
from ..registry import Call, RuleResult, register_rule

__all__ = ["add", "sub", "mul", "div", "matmul"]


def _two_positional(node: fx.Node) -> bool:
    """``a op b`` without keyword arguments (``torch.add(a, b, alpha=2)`` goes to jvp)."""
    return len(node.args) == 2 and not node.kwargs


def _broadcast_sum(y: Tensor, da: Optional[Tensor], db: Optional[Tensor], sign: float) -> Optional[Tensor]:
    if db is not None and sign < 0:
        db = -db
    return expand_to(add_tangents(da, db), y)


@register_rule(operator.add, operator.iadd, torch.add, "add", "add_", "__add__", "__iadd__", "__radd__",
               applies=_two_positional)
def add(call: Call) -> RuleResult:
    """``a + b``: ``da + db``."""
    y = call.args[0] + call.args[1]
    return y, _broadcast_sum(y, call.d_args[0], call.d_args[1], sign=1.0)


@register_rule(operator.sub, operator.isub, torch.sub, "sub", "sub_", "__sub__", "__isub__",
               applies=_two_positional)
def sub(call: Call) -> RuleResult:
    """``a - b``: ``da - db``."""
    y = call.args[0] - call.args[1]
    return y, _broadcast_sum(y, call.d_args[0], call.d_args[1], sign=-1.0)


@register_rule(operator.mul, operator.imul, torch.mul, "mul", "mul_", "__mul__", "__imul__", "__rmul__",
               applies=_two_positional)
def mul(call: Call) -> RuleResult:
    """``a * b``: ``da·b + a·db``."""
    a, b = call.args[0], call.args[1]
    y = a * b
    da, db = call.d_args[0], call.d_args[1]
    terms = [da * b if da is not None else None, a * db if db is not None else None]
    return y, expand_to(add_tangents(*terms), y)


@register_rule(operator.truediv, operator.itruediv, torch.div, "div", "div_", "__truediv__", "__itruediv__",
               applies=_two_positional)
def div(call: Call) -> RuleResult:
    """``a / b`` for a divisor without tangent: ``da / b`` (else: jvp)."""
    a, b = call.args[0], call.args[1]
    y = a / b
    if call.d_args[1] is not None:
        return None
    return y, expand_to(call.d_args[0] / b, y)


@register_rule(torch.matmul, operator.matmul, torch.bmm, torch.mm, "matmul", "bmm", "mm", "__matmul__")
def matmul(call: Call) -> RuleResult:
    """``a @ b``: ``da @ b + a @ db`` (two positional arguments; else: jvp)."""
    if len(call.args) != 2 or call.kwargs:
        return None
    a, b = call.args
    da, db = call.d_args
    return a @ b, add_tangents(None if da is None else da @ b, None if db is None else a @ db)
