"""The fast path of :class:`~avalanche_tmc.tangent.TangentModel`: a traced network run
as (primal, tangent) pairs.

What it is for: computing ``f_w(x) + J_w f(x)·δ`` faster than one ``torch.func.jvp``
over the whole network, with the same numbers. :func:`build_plan` traces the network once
with ``torch.fx`` (:mod:`~avalanche_tmc.tangent.trace`) into a list of steps and gives each
operation its registered rule (:mod:`~avalanche_tmc.tangent.registry`,
:mod:`~avalanche_tmc.tangent.rules`); :class:`TangentPlan` then evaluates the steps on
pairs ``(value, tangent)``:

* operations with a rule (convolutions, linear layers, BatchNorm on running statistics,
  LayerNorm, the common activations, pooling, attention, arithmetic and shape operations)
  compute output and tangent together; a convolution followed by BatchNorm is one step;
* operations before the first linearized parameter carry no tangent at all (a frozen
  prefix costs one plain forward, with no autograd graph);
* anything else (custom modules, modules fx cannot trace, operations without a rule) is
  evaluated with ``torch.func.jvp`` for that operation alone, so every ``nn.Module``
  keeps working (``TangentPlan.fallback_ops`` lists them).

Only ``δ`` ever needs gradients: the primal pass builds no autograd graph, and the
backward of a training step goes through the tangent operations only.

The plan refers to modules, parameters and buffers by name and looks them up in the
model at every call, so moving the model to another device, loading a state dict or
re-estimating BatchNorm statistics in place is seen by the next call.

This module imports torch only.
"""

from typing import Any, Dict, List, Mapping, Sequence, Tuple

from torch import Tensor, fx, nn
from torch.func import functional_call

from . import rules  # noqa: F401  (registers the built-in rules)
from ._ops import forward_jvp, out_of_place, resolve_attr
from .passes import check_in_place, fuse_conv_batchnorm
from .precision import autocast_enabled, match_tangents, matched_tangent_dtypes
from .registry import Call, module_rule, rule_for_module, rule_for_node
from .rules.normalization import CONV_BATCHNORM
from .steps import Ref, Step, iter_refs, subst, subst_tangent
from .trace import TracingError, trace_network
from .tree import tree_flatten, tree_unflatten

__all__ = ["TangentPlan", "build_plan"]


class TangentPlan:
    """A traced network evaluated as (primal, tangent) pairs: ``f_w(x) + J_w f(x)·δ``.

    Built by :func:`build_plan`; used by :class:`~avalanche_tmc.tangent.TangentModel`
    (``implementation="fast"``). ``fallback_ops`` lists the operations evaluated with
    ``torch.func.jvp`` because no rule covers them (for information).
    """

    def __init__(self, steps: List[Step], output: Any, linearized: Sequence[str], aliases: Dict[str, str]):
        self.steps = steps
        self.output = output
        self.linearized = tuple(linearized)
        self.aliases = aliases  # second name of a shared (tied) parameter -> its first name
        self.fallback_ops = [self._describe(s) for s in steps if s.op in _CALLS and s.rule is None]
        self.released_after = release_schedule(steps, output)
        # the steps each step reads: a call none of whose inputs carries a tangent runs plain
        self.reads = [tuple(ref.index for ref in iter_refs((s.args, s.kwargs))) for s in steps]

    @staticmethod
    def _describe(step: Step) -> str:
        target = step.target
        return target if isinstance(target, str) else getattr(target, "__name__", repr(target))

    def __call__(self, model: nn.Module, x: Tensor, tangents: Mapping[str, Tensor]) -> Tensor:
        """``f_w(x) + J_w f(x)·δ`` for ``model`` (the traced network) and ``δ`` given
        as linearized parameter name -> tensor."""
        if self.aliases:  # a tied parameter gets its tangent under every name it is used by
            tangents = dict(tangents)
            tangents.update({a: tangents[c] for a, c in self.aliases.items() if c in tangents})
        primal: List[Any] = [None] * len(self.steps)
        tangent: List[Any] = [None] * len(self.steps)
        for i, step in enumerate(self.steps):
            primal[i], tangent[i] = self._run_step(step, model, x, tangents, primal, tangent, self.reads[i])
            for j in self.released_after[i]:  # as fx.Interpreter: a value dies after its last use
                primal[j] = tangent[j] = None
        out, d_out = subst(self.output, primal), subst_tangent(self.output, tangent)
        if not isinstance(out, Tensor):
            raise TypeError(
                f"TangentModel needs a model that returns one tensor of logits, got {type(out).__name__}."
            )
        return out if d_out is None else out + d_out

    # ------------------------------------------------------------------ one step
    def _run_step(self, step: Step, model: nn.Module, x: Tensor, tangents: Mapping[str, Tensor],
                  primal: List[Any], tangent: List[Any], reads: Sequence[int]) -> Tuple[Any, Any]:
        op = step.op
        if op == "input":
            return x, None
        if op == "constant":
            return step.target, None
        if op == "attr":
            value = resolve_attr(model, step.target)
            return value, tangents.get(step.target)
        args = subst(step.args, primal)
        kwargs = subst(step.kwargs, primal)
        if op == "module":
            if step.rule is CONV_BATCHNORM:  # fused: its module is looked up by the rule
                fn: Any = None
            else:
                fn = resolve_attr(model, step.target) if step.target else model
        else:
            fn = getattr(args[0], step.target) if op == "method" else step.target
            if not any(_carries_tangent(tangent[j]) for j in reads):  # no tangent in: a plain call
                return Call(op, step.target, fn, args, kwargs, (), {}, None, model, tangents).without_tangent(), None
        d_args = subst_tangent(step.args, tangent)
        d_kwargs = subst_tangent(step.kwargs, tangent)
        call = Call(op, step.target, fn, args, kwargs, d_args, d_kwargs, step.conf, model, tangents, step.params)
        if op == "module":
            if step.rule is not None:
                result = step.rule.evaluate(call)
                if result is not None:
                    return result
            return _jvp_module(call)
        if all(t is None for t in tree_flatten((d_args, d_kwargs))[0]):
            return call.without_tangent(), None
        if step.rule is not None:
            result = step.rule.evaluate(call)
            if result is not None:
                return result
        return _jvp_call(call)


_CALLS = ("module", "function", "method")


def _carries_tangent(value: Any) -> bool:
    """Whether a step's tangent value holds a tensor (a multi-output step's is nested)."""
    if value is None:
        return False
    if isinstance(value, Tensor):
        return True
    return any(leaf is not None for leaf in tree_flatten(value)[0])


def release_schedule(steps: List[Step], output: Any) -> List[List[int]]:
    """For each step ``i``, the steps whose values no later step and not the output
    refers to once step ``i`` has run (a value unused altogether goes right after it is
    made). Keeping every value until the forward returns swelled the heap by the whole
    forward's activations: glibc then handed pages back to the system and faulted them in
    again at every call (ViT-Tiny inference measured 4.18x -> 3.27x a plain forward when
    values were released)."""
    last_use = list(range(len(steps)))
    for i, step in enumerate(steps):
        for ref in iter_refs((step.args, step.kwargs, step.conf)):
            last_use[ref.index] = max(last_use[ref.index], i)
    kept = {ref.index for ref in iter_refs(output)}
    schedule: List[List[int]] = [[] for _ in steps]
    for j, last in enumerate(last_use):
        if j not in kept:
            schedule[last].append(j)
    return schedule


def _jvp_module(call: Call) -> Tuple[Any, Any]:
    """The module evaluated whole under ``torch.func.jvp`` (its parameters' and its inputs'
    tangents), or plainly when none has a tangent."""
    module, args, kwargs = call.fn, call.args, call.kwargs
    d_params = call.param_tangents()
    flat, spec = tree_flatten((args, kwargs))
    d_flat, _ = tree_flatten((call.d_args, call.d_kwargs))
    if not d_params and all(t is None for t in d_flat):
        return module(*args, **kwargs), None
    names = list(d_params)
    positions = [i for i, t in enumerate(d_flat) if t is not None]
    own = dict(module.named_parameters())

    primals = tuple(own[n] for n in names) + tuple(flat[i] for i in positions)
    tangents_in = tuple(d_params[n] for n in names) + tuple(d_flat[i] for i in positions)
    device_type = _device_type(primals)
    if autocast_enabled(device_type):  # pairs as the generic path has them (see .precision)
        tangents_in = match_tangents(primals, tangents_in)

    def f(*values: Tensor) -> Any:
        inputs = list(flat)
        for i, v in zip(positions, values[len(names):]):
            inputs[i] = v
        call_args, call_kwargs = tree_unflatten(inputs, spec)
        with matched_tangent_dtypes(device_type):
            return functional_call(module, dict(zip(names, values[: len(names)])), call_args, call_kwargs)

    return _jvp_any_output(f, primals, tangents_in)


def _jvp_call(call: Call) -> Tuple[Any, Any]:
    """A function or method call evaluated under ``torch.func.jvp`` (an in-place method
    runs out of place)."""
    fn, op, args, kwargs, d_args, d_kwargs = call.fn, call.op, call.args, call.kwargs, call.d_args, call.d_kwargs
    call_args = args[1:] if op == "method" else args
    d_call = d_args[1:] if op == "method" else d_args
    if op == "method":
        method = fn.__name__
        target_name = out_of_place(method)
        first = [args[0]]
        first_d = [d_args[0]]

        def method_call(self_value: Any, *rest: Any, **kw: Any) -> Any:
            return getattr(self_value, target_name)(*rest, **kw)

        flat, spec = tree_flatten((first + list(call_args), kwargs))
        d_flat, _ = tree_flatten((first_d + list(d_call), d_kwargs))
        fn_of = method_call
    else:
        flat, spec = tree_flatten((list(call_args), kwargs))
        d_flat, _ = tree_flatten((list(d_call), d_kwargs))
        fn_of = fn
    positions = [i for i, t in enumerate(d_flat) if t is not None]
    primals = tuple(flat[i] for i in positions)
    tangents_in = tuple(d_flat[i] for i in positions)
    device_type = _device_type(primals)
    if autocast_enabled(device_type):  # pairs as the generic path has them (see .precision)
        tangents_in = match_tangents(primals, tangents_in)

    def f(*values: Tensor) -> Any:
        inputs = list(flat)
        for i, v in zip(positions, values):
            inputs[i] = v
        a, kw = tree_unflatten(inputs, spec)
        with matched_tangent_dtypes(device_type):
            return fn_of(*a, **kw)

    return _jvp_any_output(f, primals, tangents_in)


def _jvp_any_output(f: Any, primals: Tuple[Tensor, ...], tangents_in: Tuple[Tensor, ...]) -> Tuple[Any, Any]:
    """``torch.func.jvp`` of ``f`` whatever it returns: ``jvp`` takes only tensors (and at
    least one), so other values (None, sizes: timm's attention-mask helper returns None)
    are kept aside and get no tangent."""
    structure: List[Any] = []

    def tensors_only(*values: Tensor) -> Tuple[Tensor, ...]:
        leaves, out_spec = tree_flatten(f(*values))
        tensor_at = [i for i, leaf in enumerate(leaves) if isinstance(leaf, Tensor)]
        structure.extend([[None if i in tensor_at else leaf for i, leaf in enumerate(leaves)], out_spec, tensor_at])
        # a constant beside the outputs, so that an output without tensors is still one
        return tuple(leaves[i] for i in tensor_at) + (values[0].new_zeros(()),)

    outputs, d_outputs = forward_jvp(tensors_only, primals, tangents_in)
    leaves, out_spec, tensor_at = structure
    d_leaves: List[Any] = [None] * len(leaves)
    for k, i in enumerate(tensor_at):
        leaves[i], d_leaves[i] = outputs[k], d_outputs[k]
    return tree_unflatten(leaves, out_spec), tree_unflatten(d_leaves, out_spec)


def _device_type(primals: Sequence[Tensor]) -> str:
    """The device type of the first tensor among ``primals`` (``"cpu"`` when none)."""
    return next((p.device.type for p in primals if isinstance(p, Tensor)), "cpu")


def _keeps_whole(module: nn.Module) -> bool:
    return module_rule(module) is not None


def build_plan(model: nn.Module, linearized: Sequence[str]) -> TangentPlan:
    """Trace ``model`` (in eval mode) into a :class:`TangentPlan` for the given
    linearized parameter names. Raises :class:`~avalanche_tmc.tangent.trace.TracingError`
    when the network cannot be traced (the caller then uses the generic
    ``torch.func.jvp`` path)."""
    graph, tracer = trace_network(model, _keeps_whole)
    check_in_place(graph, model)
    for node in reversed(list(graph.nodes)):
        if node.op not in ("placeholder", "output") and not node.users:
            graph.erase_node(node)
    first_name: Dict[int, str] = {}
    aliases: Dict[str, str] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        if id(param) in first_name:
            aliases[name] = first_name[id(param)]
        else:
            first_name[id(param)] = name
    linearized_set = set(linearized) | {a for a, c in aliases.items() if c in linearized}
    param_names = {n for n, _ in model.named_parameters(remove_duplicate=False)}
    index: Dict[fx.Node, int] = {}
    steps: List[Step] = []
    output: Any = None
    placeholders = 0

    def ref(arg: Any) -> Any:
        return fx.node.map_arg(arg, lambda n: Ref(index[n]))

    for node in graph.nodes:
        if node.op == "output":
            output = ref(node.args[0])
            continue
        if node.op == "placeholder":
            if placeholders == 0:
                steps.append(Step("input", None, (), {}))
            else:
                if not node.args:
                    raise TracingError("the network takes more than one required input")
                steps.append(Step("constant", node.args[0], (), {}))
            placeholders += 1
        elif node.op == "get_attr":
            try:
                value = resolve_attr(model, node.target)
                steps.append(Step("attr", node.target, (), {}))
            except AttributeError:
                value = resolve_attr(tracer.root, node.target)
                steps.append(Step("constant", value, (), {}))
        elif node.op == "call_module":
            module = model.get_submodule(node.target)
            rule, conf = rule_for_module(module)
            prefix = node.target + "." if node.target else ""
            params = [
                (local, prefix + local) for local, _ in module.named_parameters() if prefix + local in linearized_set
            ]
            steps.append(Step("module", node.target, ref(node.args), ref(dict(node.kwargs)), rule, conf, params))
        elif node.op in ("call_function", "call_method"):
            rule, conf = rule_for_node(node)
            op = "function" if node.op == "call_function" else "method"
            steps.append(Step(op, node.target, ref(node.args), ref(dict(node.kwargs)), rule, conf))
        else:  # pragma: no cover - fx has no other node kinds
            raise TracingError(f"unexpected fx node {node.op}")
        index[node] = len(steps) - 1
    fuse_conv_batchnorm(steps, output)
    used_params = {s.target for s in steps if s.op == "attr" and s.target in param_names}
    for s in steps:
        if s.op == "module":
            prefix = s.target + "." if s.target else ""
            used_params.update(prefix + n for n, _ in model.get_submodule(s.target).named_parameters())
            if s.rule is CONV_BATCHNORM:
                conv_prefix = s.conf["conv"] + "."
                used_params.update(conv_prefix + n for n, _ in model.get_submodule(s.conf["conv"]).named_parameters())
    missing = set(linearized) - {aliases.get(n, n) for n in used_params}
    if missing:
        raise TracingError(f"the trace does not use linearized parameters {sorted(missing)[:3]}")
    return TangentPlan(steps, output, linearized, aliases)
