"""Passes over the traced graph and the plan's steps: the in-place check, use counts, and
the fusion of a convolution with the BatchNorm after it."""

import operator
from typing import Any, Dict, List, Optional, Tuple

from torch import fx, nn

from .rules.activations import FUSABLE, _activation_call
from .rules.conv_linear import bilinear_module
from .rules.normalization import CONV_BATCHNORM, batchnorm_function, batchnorm_module
from .rules.shapes import identity_module
from .steps import Ref, Step
from .trace import TracingError

__all__ = ["check_in_place", "count_uses", "fuse_conv_batchnorm", "fuse_activation"]


def _is_in_place(node: fx.Node, model: nn.Module) -> bool:
    if node.op == "call_method":
        return node.target.endswith("_") and not node.target.startswith("__") or node.target.startswith("__i")
    if node.op == "call_function":
        name = getattr(node.target, "__name__", "")
        return (
            node.target in (operator.iadd, operator.isub, operator.imul, operator.itruediv)
            or bool(node.kwargs.get("inplace"))
            or (name.endswith("_") and not name.startswith("__"))
        )
    if node.op == "call_module":
        return bool(getattr(model.get_submodule(node.target), "inplace", False))
    return False


def check_in_place(graph: fx.Graph, model: nn.Module) -> None:
    """The plan evaluates in-place operations out of place; that is only right when
    nothing reads the mutated tensor afterwards except through the operation's result
    (raises :class:`~avalanche_tmc.tangent.trace.TracingError` otherwise)."""
    order = {node: i for i, node in enumerate(graph.nodes)}
    for node in graph.nodes:
        if not _is_in_place(node, model):
            continue
        if not node.users:
            raise TracingError(f"in-place operation {node.target} whose result is unused")
        mutated = node.args[0] if node.args else None
        if isinstance(mutated, fx.Node) and any(
            user is not node and order[user] > order[node] for user in mutated.users
        ):
            raise TracingError(f"tensor read after the in-place operation {node.target}")


def count_uses(steps: List[Step], output: Any) -> List[int]:
    """How many times each step's value is referred to (by later steps and the output)."""
    uses = [0] * len(steps)

    def visit(value: Any) -> None:
        if isinstance(value, Ref):
            uses[value.index] += 1
        elif isinstance(value, (list, tuple)):
            for v in value:
                visit(v)
        elif isinstance(value, dict):
            for v in value.values():
                visit(v)
        elif isinstance(value, slice):
            visit([value.start, value.stop, value.step])

    for step in steps:
        visit(step.args)
        visit(step.kwargs)
    visit(output)
    return uses


def _batchnorm_function_spec(step: Step, steps: List[Step]) -> Optional[Tuple[Any, Dict[str, Optional[str]], float]]:
    """Names of ``F.batch_norm(input, mean, var, weight, bias, False, momentum, eps)``
    arguments when every tensor is a model attribute and it runs on running statistics."""
    names = ["input", "mean", "var", "weight", "bias", "training", "momentum", "eps"]
    kw_alias = {"running_mean": "mean", "running_var": "var"}
    values = dict(zip(names, step.args))
    values.update({kw_alias.get(k, k): v for k, v in step.kwargs.items()})
    if values.get("training", False) is not False or not isinstance(values.get("input"), Ref):
        return None
    out: Dict[str, Optional[str]] = {}
    for key in ("mean", "var", "weight", "bias"):
        value = values.get(key)
        if value is None and key in ("weight", "bias"):
            out[key] = None
        elif isinstance(value, Ref) and steps[value.index].op == "attr":
            out[key] = steps[value.index].target
        else:
            return None
    eps = values.get("eps", 1e-5)
    return values["input"], out, eps if isinstance(eps, float) else 1e-5


def _uses_rule(step: Step, evaluate: Any) -> bool:
    return step.rule is not None and step.rule.evaluate is evaluate


def fuse_conv_batchnorm(steps: List[Step], output: Any) -> None:
    """Merge each convolution whose only user is a BatchNorm on running statistics into one
    step evaluated by :data:`~avalanche_tmc.tangent.rules.normalization.CONV_BATCHNORM`
    (see :func:`~avalanche_tmc.tangent.rules.normalization.conv_batchnorm_rule`); the
    convolution's own step becomes an unused constant."""
    uses = count_uses(steps, output)
    for i, step in enumerate(steps):
        if step.op == "module" and _uses_rule(step, batchnorm_module):
            if len(step.args) != 1 or step.kwargs or not isinstance(step.args[0], Ref):
                continue
            source = step.args[0]
            norm: Any = ("module", step.target)
        elif step.op == "function" and _uses_rule(step, batchnorm_function):
            spec = _batchnorm_function_spec(step, steps)
            if spec is None:
                continue
            source, names, eps = spec
            norm = ("function", names, eps)
        else:
            continue
        conv_step = steps[source.index]
        if (
            conv_step.op != "module"
            or not _uses_rule(conv_step, bilinear_module)
            or conv_step.conf["kind"] != "conv"
            or uses[source.index] != 1
            or len(conv_step.args) != 1
            or conv_step.kwargs
        ):
            continue
        params = list(conv_step.params)
        if norm[0] == "module":
            params += step.params
        steps[i] = Step(
            "module", step.target if norm[0] == "module" else conv_step.target, conv_step.args, {},
            CONV_BATCHNORM, {"conv": conv_step.target, "conf": conv_step.conf, "norm": norm}, params,
        )
        steps[source.index] = Step("constant", None, (), {})  # computed inside the fused step
    fuse_activation(steps, output)


def _fusable_activation(step: Step, source: int) -> Optional[Tuple[Any, ...]]:
    """``(op, target, name, extra_args, kwargs)`` of a ReLU/ReLU6/Hardtanh step applied to the
    value of step ``source`` alone (other arguments constants), else None."""
    if not _uses_rule(step, _activation_call) or step.conf not in FUSABLE:
        return None
    if not step.args or step.args[0] != Ref(source):
        return None
    if step.op == "module":
        return ("module", step.target, step.conf, (), {}) if len(step.args) == 1 and not step.kwargs else None
    extra, kwargs = step.args[1:], step.kwargs
    if any(isinstance(v, (Ref, list, tuple, dict, slice)) for v in list(extra) + list(kwargs.values())):
        return None
    return (step.op, step.target, step.conf, tuple(extra), dict(kwargs))


def fuse_activation(steps: List[Step], output: Any) -> None:
    """Merge a ReLU, ReLU6 or Hardtanh that is the only user of a fused convolution +
    BatchNorm step (directly or through Identity / eval-mode Dropout, as in timm's
    BatchNormAct2d) into that step (``conf["act"]``): the step then computes the
    activation and its tangent into its own tensors
    (:func:`~avalanche_tmc.tangent.rules.activations.activation_in_place`)."""
    uses = count_uses(steps, output)
    users: Dict[int, int] = {}
    for i, step in enumerate(steps):
        for value in list(step.args) + list(step.kwargs.values()):
            if isinstance(value, Ref):
                users[value.index] = i
    for i, step in enumerate(steps):
        if step.rule is not CONV_BATCHNORM or uses[i] != 1 or i not in users:
            continue
        source, user, between = i, users[i], []
        while (  # Identity / eval-mode Dropout in between (timm's BatchNormAct2d: bn -> drop -> act)
            _uses_rule(steps[user], identity_module) and steps[user].args == (Ref(source),)
            and not steps[user].kwargs and uses[user] == 1 and user in users
        ):
            between.append(user)
            source, user = user, users[user]
        act = _fusable_activation(steps[user], source)
        if act is None:
            continue
        steps[user] = Step(step.op, step.target, step.args, step.kwargs, CONV_BATCHNORM, dict(step.conf, act=act),
                           step.params)
        for index in [i] + between:
            steps[index] = Step("constant", None, (), {})
