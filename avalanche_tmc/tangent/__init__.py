"""Tangent models and their fast path: a network linearized around its weights,
``f_w(x) + J_w f(x)·δ``, and the machinery that evaluates it quickly.

* :mod:`.model`: :class:`TangentModel` (what users build), :data:`Delta`;
* :mod:`.heads`: :func:`find_head` / :func:`replace_head` (the classification layer);
* :mod:`.trace`: tracing the network with ``torch.fx`` (:class:`TracingError`);
* :mod:`.plan`: :func:`build_plan` and the :class:`TangentPlan` interpreter; :mod:`.steps`
  its data, :mod:`.passes` its graph passes (in-place check, convolution + BatchNorm fusion);
* :mod:`.registry`: :func:`register_rule`, the decorator that registers a fast-path rule for
  a module class, a function or a tensor method; :mod:`.rules` holds the built-in rules,
  and :func:`add_tangents` / :func:`expand_to` are what a rule of your own sums its tangent
  terms with (a term is None where its input or parameter has no tangent).
* :mod:`.precision`: :func:`matched_tangent_dtypes`, which keeps each tangent in its primal's
  dtype under ``torch.autocast`` (for ``torch.func.jvp`` evaluations: the generic path, the
  fast path's fallbacks, a rule of your own that calls ``jvp``).

This package imports torch only; it knows nothing of Avalanche.
"""

from ._ops import add_tangents, expand_to
from .heads import find_head, replace_head
from .model import IMPLEMENTATIONS, Delta, LinearizeSpec, TangentModel
from .plan import TangentPlan, build_plan
from .precision import matched_tangent_dtypes
from .registry import (
    Call,
    NotApplicable,
    RegisteredRule,
    Rule,
    RuleResult,
    register_rule,
    registered_rules,
    unregister_rule,
)
from .trace import TracingError

__all__ = [
    "TangentModel", "Delta", "LinearizeSpec", "IMPLEMENTATIONS", "find_head", "replace_head", "TracingError",
    "TangentPlan", "build_plan", "register_rule", "unregister_rule", "registered_rules", "Call", "Rule",
    "RuleResult", "RegisteredRule", "NotApplicable", "matched_tangent_dtypes", "add_tangents", "expand_to",
]
