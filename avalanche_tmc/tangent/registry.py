"""The registry of fast-path rules: which rule evaluates which layer or operation.

What it is for: a rule computes an operation's output and its tangent together, instead of
handing the operation to ``torch.func.jvp``. Rules are registered by a decorator, keyed by
what the traced graph calls (as timm registers models and leaf modules)::

    @register_rule(nn.Conv2d, nn.Linear, subclasses=True)   # module types
    @register_rule(F.conv2d, torch.matmul, operator.add)    # functions
    @register_rule("matmul", "__matmul__")                  # tensor methods, by name

so a new rule is one decorated function in one place. A rule receives a :class:`Call` and
returns ``(output, tangent)``, or None to leave this call to ``torch.func.jvp`` (e.g. an
argument combination it does not cover). Plans look rules up when they are built
(:func:`~avalanche_tmc.tangent.plan.build_plan`): a rule registered later serves plans
built later. ``TangentPlan.fallback_ops`` lists the operations that found no rule.
"""

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

from torch import Tensor, fx, nn

__all__ = [
    "Call", "Rule", "RuleResult", "NotApplicable", "RegisteredRule", "register_rule", "unregister_rule",
    "registered_rules", "module_rule", "rule_for_module", "rule_for_node",
]

RuleResult = Optional[Tuple[Any, Any]]
"""What a rule returns: ``(output, tangent)`` (tangent None: no tangent), or None to hand the
call to ``torch.func.jvp``."""

Target = Union[type, str, Callable[..., Any]]


class NotApplicable(Exception):
    """Raised by a rule's ``configure(module)`` when the rule does not cover this instance
    (e.g. a padding mode it does not implement): the module is evaluated by ``torch.func.jvp``."""


class Call:
    """One operation of the traced network as a rule sees it, with primal and tangent values.

    ``op`` is ``"module"``, ``"function"`` or ``"method"``; ``target`` the module name,
    function or method name of the graph node; ``fn`` what is called (the module, the
    function, or the method bound to ``args[0]``). ``d_args``/``d_kwargs`` mirror
    ``args``/``kwargs`` with the tangent of each tensor (None: no tangent). ``conf`` is
    what the rule's ``configure`` returned for this module when the plan was built (else
    the rule's ``conf``). ``model`` is the traced network and ``tangents`` every linearized
    parameter's tangent by name; :meth:`param_tangents` gives a module's own ones.
    """

    __slots__ = ("op", "target", "fn", "args", "kwargs", "d_args", "d_kwargs", "conf", "model", "tangents",
                 "params")

    def __init__(self, op: str, target: Any, fn: Any, args: Any, kwargs: Dict[str, Any], d_args: Any,
                 d_kwargs: Dict[str, Any], conf: Any, model: nn.Module, tangents: Dict[str, Tensor],
                 params: Sequence[Tuple[str, str]] = ()):
        self.op, self.target, self.fn = op, target, fn
        self.args, self.kwargs, self.d_args, self.d_kwargs = args, kwargs, d_args, d_kwargs
        self.conf, self.model, self.tangents, self.params = conf, model, tangents, params

    def param_tangents(self) -> Dict[str, Tensor]:
        """Tangents of the called module's own linearized parameters, by local name."""
        return {local: self.tangents[full] for local, full in self.params if full in self.tangents}

    def first_input(self) -> Tuple[Any, Any]:
        """The first positional argument and its tangent (None, None when there is none)."""
        return (self.args[0] if self.args else None), (self.d_args[0] if self.d_args else None)

    def without_tangent(self) -> Any:
        """The plain output (an in-place method runs out of place: stored values never change)."""
        if self.op == "method":
            fn = self.fn
            if self.target.endswith("_") and not self.target.startswith("__"):
                fn = getattr(self.args[0], self.target[:-1])
            return fn(*self.args[1:], **self.kwargs)
        return self.fn(*self.args, **self.kwargs)


@dataclass(frozen=True, eq=False)
class Rule:
    """A registered rule: ``evaluate(call)`` and when it applies.

    ``configure(module)`` (module rules) runs when a plan is built and gives ``call.conf``
    (raise :class:`NotApplicable` to decline the instance); ``applies(node)`` (function and
    method rules) declines a graph node when the plan is built, so the node is listed in
    ``fallback_ops``; ``subclasses``: module subclasses that keep the registered class's
    ``forward`` use the rule too; ``matches(module)``: also modules of other types.
    """

    evaluate: Callable[[Call], RuleResult]
    configure: Optional[Callable[[nn.Module], Any]] = None
    applies: Optional[Callable[[fx.Node], bool]] = None
    conf: Any = None
    subclasses: bool = False
    matches: Optional[Callable[[nn.Module], bool]] = None

    @property
    def name(self) -> str:
        """``module.function`` of the rule's ``evaluate``."""
        fn = self.evaluate
        return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"

    def __deepcopy__(self, memo: Dict[int, Any]) -> "Rule":  # a copied plan keeps the registered rule
        return self


class RegisteredRule(NamedTuple):
    """One entry of :func:`registered_rules`: ``kind`` is ``"module"``, ``"module-if"`` (a
    ``matches`` predicate), ``"function"`` or ``"method"``."""

    kind: str
    target: Any
    rule: Rule


_MODULES: Dict[type, Rule] = {}
_FUNCTIONS: Dict[Any, Rule] = {}
_METHODS: Dict[str, Rule] = {}
_PREDICATES: Dict[Callable[[nn.Module], bool], Rule] = {}


def _table(target: Target) -> Dict[Any, Rule]:
    if isinstance(target, str):
        return _METHODS
    if isinstance(target, type):
        if not issubclass(target, nn.Module):
            raise TypeError(f"A rule's class target must be an nn.Module subclass, got {target!r}; register a "
                            "function or a tensor method's name instead.")
        return _MODULES
    if callable(target):
        return _FUNCTIONS
    raise TypeError(f"A rule is registered for an nn.Module class, a function or a tensor method's name (str), "
                    f"got {target!r}.")


def _describe(target: Any) -> str:
    if isinstance(target, str):
        return f"method {target!r}"
    return f"{getattr(target, '__module__', '')}.{getattr(target, '__qualname__', repr(target))}"


def register_rule(
    *targets: Target,
    configure: Optional[Callable[[nn.Module], Any]] = None,
    applies: Optional[Callable[[fx.Node], bool]] = None,
    conf: Any = None,
    subclasses: bool = False,
    matches: Optional[Callable[[nn.Module], bool]] = None,
    override: bool = False,
) -> Callable[[Callable[[Call], RuleResult]], Callable[[Call], RuleResult]]:
    """Decorator registering ``evaluate(call) -> (output, tangent) | None`` as the fast-path
    rule of ``targets``: ``nn.Module`` classes, functions (``F.conv2d``, ``operator.add``) or
    tensor method names (``"matmul"``). See :class:`Rule` for the options. A target that
    already has a rule raises ``ValueError`` unless ``override=True``. Returns ``evaluate``."""
    if not targets and matches is None:
        raise ValueError("register_rule needs at least one target (a module class, function or method name) "
                         "or matches=<predicate on modules>.")
    tables = [_table(t) for t in targets]
    if not override:
        taken = [t for t, table in zip(targets, tables) if t in table]
        if matches is not None and matches in _PREDICATES:
            taken.append(matches)
        if taken:
            raise ValueError(f"{', '.join(_describe(t) for t in taken)} already has the rule "
                             f"{(_PREDICATES.get(taken[0]) or _table(taken[0])[taken[0]]).name}; pass override=True "
                             "to replace it, or unregister_rule() it first.")

    def decorator(evaluate: Callable[[Call], RuleResult]) -> Callable[[Call], RuleResult]:
        if not callable(evaluate):
            raise TypeError(f"register_rule decorates a function call -> (output, tangent), got {evaluate!r}.")
        rule = Rule(evaluate, configure, applies, conf, subclasses, matches)
        for target, table in zip(targets, tables):
            table[target] = rule
        if matches is not None:
            _PREDICATES[matches] = rule
        return evaluate

    return decorator


def unregister_rule(*targets: Union[Target, Callable[[nn.Module], bool]]) -> None:
    """Remove the rules of ``targets`` (classes, functions, method names, or a ``matches``
    predicate): plans built afterwards evaluate them with ``torch.func.jvp``."""
    for target in targets:
        table = _PREDICATES if target in _PREDICATES else _table(target)
        if target not in table:
            raise ValueError(f"{_describe(target)} has no registered rule (see registered_rules()).")
        del table[target]


def registered_rules() -> List[RegisteredRule]:
    """Every registered rule with its target, modules first, then functions and methods."""
    return ([RegisteredRule("module-if", p, r) for p, r in _PREDICATES.items()]
            + [RegisteredRule("module", t, r) for t, r in _MODULES.items()]
            + [RegisteredRule("function", t, r) for t, r in _FUNCTIONS.items()]
            + [RegisteredRule("method", t, r) for t, r in _METHODS.items()])


def module_rule(module: nn.Module) -> Optional[Rule]:
    """The rule of ``module``: a ``matches`` predicate that accepts it, else the rule of its
    exact type, else of the nearest registered base class (``subclasses=True``) whose
    ``forward`` it keeps; None when it has none."""
    for predicate, rule in _PREDICATES.items():
        if predicate(module):
            return rule
    cls = type(module)
    rule = _MODULES.get(cls)
    if rule is not None:
        return rule
    for base in cls.__mro__[1:]:
        rule = _MODULES.get(base)
        if rule is not None and rule.subclasses:
            return rule if cls.forward is base.forward else None
    return None


def rule_for_module(module: nn.Module) -> Tuple[Optional[Rule], Any]:
    """``(rule, conf)`` for a ``call_module`` node's module, ``(None, None)`` for the fallback."""
    rule = module_rule(module)
    if rule is None:
        return None, None
    if rule.configure is None:
        return rule, rule.conf
    try:
        return rule, rule.configure(module)
    except NotApplicable:
        return None, None


def rule_for_node(node: fx.Node) -> Tuple[Optional[Rule], Any]:
    """``(rule, conf)`` for a ``call_function`` / ``call_method`` node, ``(None, None)`` for
    the fallback."""
    try:
        rule = (_METHODS if node.op == "call_method" else _FUNCTIONS).get(node.target)
    except TypeError:  # an unhashable callable: no rule can be keyed by it
        return None, None
    if rule is None or (rule.applies is not None and not rule.applies(node)):
        return None, None
    return rule, rule.conf
