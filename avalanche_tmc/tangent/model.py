"""Tangent models: the first-order Taylor expansion of a network around its weights.

``TangentModel(model)`` computes ``h_δ(x) = f_w(x) + J_w f(x)·δ`` where ``w`` are the
(frozen) pre-trained weights and ``δ`` the only trainable tensors. The Jacobian-vector
product is taken in one forward-mode pass (``torch.func.jvp`` over
``torch.func.functional_call``), so a training step costs about two forwards and one
backward. Because ``h_δ`` is linear in ``δ``, any weighted sum of tangent models around
the same ``w`` is again a tangent model (:mod:`avalanche_tmc.composition.deltas`).

This module imports torch only; it knows nothing of Avalanche.
"""

import hashlib
import warnings
from collections import OrderedDict
from typing import Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor, nn
from torch.func import functional_call
from torch.nn.attention import SDPBackend, sdpa_kernel

from ._ops import forward_jvp
from .heads import find_head, replace_head
from .plan import TangentPlan, build_plan
from .precision import matched_tangent_dtypes
from .trace import TracingError

__all__ = ["Delta", "LinearizeSpec", "IMPLEMENTATIONS", "TangentModel"]

Delta = Dict[str, Tensor]
"""A tangent component: linearized parameter name -> perturbation of that parameter."""

LinearizeSpec = Union[str, Sequence[str], Callable[[str], bool]]
"""Which parameters get a ``δ``: ``"all"``, ``"head"``, module-name prefixes, or a callable on names."""

IMPLEMENTATIONS = ("auto", "fast", "generic")
"""The ways :class:`TangentModel` computes ``J_w f(x)·δ`` (its ``implementation`` argument)."""


def _check_arguments(model: nn.Module, num_classes: Optional[int], head: Optional[str], linearize: LinearizeSpec,
                     start_at: Optional[str]) -> None:
    """The boundary checks of :class:`TangentModel`, each with what is allowed."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"TangentModel wraps an nn.Module, got {type(model).__name__}.")
    if num_classes is not None and (isinstance(num_classes, bool) or not isinstance(num_classes, int)
                                    or num_classes < 1):
        raise ValueError(f"num_classes must be a positive int (the size of a new head) or None (keep the model's "
                         f"head), got {num_classes!r}.")
    for name, value in (("head", head), ("start_at", start_at)):
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{name} must be a module name (str) or None, got {value!r}.")
    if not (isinstance(linearize, str) or callable(linearize) or (
            isinstance(linearize, (list, tuple, set, frozenset)) and all(isinstance(p, str) for p in linearize))):
        raise TypeError(f"linearize must be 'all', 'head', a list of module-name prefixes, or a callable "
                        f"name -> bool; got {linearize!r}.")
    dynamic = [(name or "<model>", type(m).__name__) for name, m in model.named_modules()
               if any(c.__module__.startswith("avalanche.") and c.__name__ in _DYNAMIC_MODULES
                      for c in type(m).__mro__)]
    if dynamic:
        raise TypeError(
            f"TangentModel cannot linearize Avalanche's dynamic/multi-task modules ({dynamic[0][0]}: "
            f"{dynamic[0][1]}): their heads grow or are chosen per task label, so there is no single fixed "
            "network to take the tangent of, and the forward needs task labels. Use a fixed nn.Linear head "
            "over all classes instead (TangentModel(net, num_classes=<total classes>)); for task-incremental "
            "learning the strategies mask each sample's prediction to its task's classes (TaskMaskPlugin, on "
            "by default when training sees several task labels)."
        )


_DYNAMIC_MODULES = ("DynamicModule", "MultiTaskModule", "IncrementalClassifier", "MultiHeadClassifier")


def parameter_modules(names: Sequence[str], depth: int = 2, most: int = 24) -> str:
    """The module names that hold parameters, down to ``depth`` dots, in registration order
    (what ``start_at`` may name; deeper ones work too), at most ``most`` of them shown."""
    found: List[str] = []
    for name in names:
        parts = name.split(".")[:-1]
        for k in range(1, min(len(parts), depth + 1) + 1):
            prefix = ".".join(parts[:k])
            if prefix and prefix not in found:
                found.append(prefix)
    shown = ", ".join(found[:most])
    return shown + (f", ... ({len(found)} in all; deeper names work too)" if len(found) > most else "")


def _select_linearized(
    names: Sequence[str], head: Optional[str], linearize: LinearizeSpec, start_at: Optional[str]
) -> Tuple[str, ...]:
    def under(name: str, prefix: Optional[str]) -> bool:
        return prefix is not None and (name == prefix or name.startswith(prefix + "."))

    if callable(linearize):
        chosen = [n for n in names if linearize(n)]
    elif linearize == "all":
        chosen = list(names)
    elif linearize == "head":
        chosen = [n for n in names if under(n, head)]
    elif isinstance(linearize, str):
        raise ValueError(
            f"linearize={linearize!r} is not understood: use 'all', 'head', a list of "
            "module-name prefixes, or a callable name -> bool."
        )
    else:
        prefixes = list(linearize)
        chosen = [n for n in names if any(under(n, p) for p in prefixes)]
    if start_at is not None:
        starts = [i for i, n in enumerate(names) if under(n, start_at)]
        if not starts:
            raise ValueError(f"start_at={start_at!r} names no parameter of the model; valid names: "
                             f"{parameter_modules(names)}.")
        keep = set(names[starts[0]:])
        chosen = [n for n in chosen if n in keep]
    if not chosen:
        raise ValueError("No parameter is linearized: check `linearize` and `start_at`.")
    return tuple(chosen)


class TangentModel(nn.Module):
    """A network linearized around its current weights: ``f_w(x) + J_w f(x)·δ``.

    What it is for: training task components ``δ_t`` that compose by plain arithmetic
    (TMC). All weights of ``model`` are frozen; the trainable parameters are ``δ``, one
    tensor per linearized parameter, starting at exactly zero so that a fresh tangent
    model equals ``f_w``.

    The wrapped network always runs in eval mode, in the primal and the tangent pass
    alike: BatchNorm uses its running statistics and dropout is off (the tangent model
    lives around the fixed function ``f_w``). ``train()``/``eval()`` on the wrapper only
    flip its own ``training`` flag.

    :param model: any ``nn.Module`` (torchvision, timm, your own) holding pre-trained
        weights ``w``. It is modified in place when ``num_classes`` is given.
    :param num_classes: if given, the head is replaced by a new ``nn.Linear`` with this
        many outputs (initialised from ``head_seed``); the new head is part of ``w``.
    :param head: module name of the classification layer; default: the last nn.Linear
        (looked up only when a new head is made or only the head is linearized, so
        headless feature networks can be linearized too).
    :param linearize: which parameters get a ``δ``: ``"all"`` (default), ``"head"``
        (head only: TMC-FC), a list of module-name prefixes, or a callable on names.
        Parameters left out stay frozen at ``w``.
    :param start_at: linearize only parameters registered at or after this module
        (e.g. ``"layer1"`` for a ResNet leaves the stem out, as the official code does).
    :param head_seed: seed of the new head's initialisation.
    :param implementation: how ``J_w f(x)·δ`` is computed. ``"generic"``: one
        ``torch.func.jvp`` over ``torch.func.functional_call`` (the reference).
        ``"fast"``: the network traced once by ``torch.fx`` and run as (primal, tangent)
        pairs with fused rules for the common layers (:mod:`avalanche_tmc.tangent.plan`;
        same numbers, fewer and larger kernels, no primal autograd graph); raises
        :class:`~avalanche_tmc.tangent.TracingError` if the network cannot be
        traced. ``"auto"`` (default): fast when the trace succeeds, else generic.
        ``tm.implementation`` says which one is in use.
    :param channels_last: store the network's 4-D weights (and ``δ``) channels-last and
        convert 4-D inputs likewise. On CPU this made convolutions, depthwise ones most,
        about twice as fast (``python -m benchmarks.tools.speed``); the numbers are the same.
    """

    def __init__(
        self,
        model: nn.Module,
        num_classes: Optional[int] = None,
        *,
        head: Optional[str] = None,
        linearize: LinearizeSpec = "all",
        start_at: Optional[str] = None,
        head_seed: int = 0,
        implementation: str = "auto",
        channels_last: bool = False,
    ):
        super().__init__()
        _check_arguments(model, num_classes, head, linearize, start_at)
        if implementation not in IMPLEMENTATIONS:
            raise ValueError(f"implementation must be one of {IMPLEMENTATIONS}, got {implementation!r}.")
        if head is None and (num_classes is not None or linearize == "head"):
            head = find_head(model)
        if num_classes is not None:
            replace_head(model, num_classes, head, head_seed)
        model.eval()
        model.requires_grad_(False)
        self.channels_last = channels_last
        if channels_last:
            model.to(memory_format=torch.channels_last)
        self.model = model
        self.head_name = head
        names = [n for n, _ in model.named_parameters()]
        self.linearized_names: Tuple[str, ...] = _select_linearized(names, head, linearize, start_at)
        base = dict(model.named_parameters())
        self.delta_params = nn.ParameterList(
            [nn.Parameter(torch.zeros_like(base[n])) for n in self.linearized_names]
        )
        self._plan: Optional[TangentPlan] = None
        if implementation != "generic":
            try:
                self._plan = build_plan(model, self.linearized_names)
            except TracingError:
                if implementation == "fast":
                    raise

    @property
    def implementation(self) -> str:
        """``"fast"`` (traced plan) or ``"generic"`` (``torch.func.jvp``): the path in use."""
        return "generic" if self._plan is None else "fast"

    def use_implementation(self, implementation: str) -> "TangentModel":
        """Switch to ``"fast"`` or ``"generic"`` (e.g. to compare them on the same ``δ``)."""
        if implementation == "generic":
            self._plan = None
        elif implementation in ("fast", "auto"):
            try:
                self._plan = build_plan(self.model, self.linearized_names)
            except TracingError:
                if implementation == "fast":
                    raise
                self._plan = None
        else:
            raise ValueError(f"implementation must be one of {IMPLEMENTATIONS}, got {implementation!r}.")
        return self

    # ------------------------------------------------------------------ forward
    def train(self, mode: bool = True) -> "TangentModel":
        """Set the wrapper's flag only: the linearized network stays in eval mode."""
        self.training = mode
        self.model.eval()
        return self

    def forward(self, x: Tensor) -> Tensor:
        """``f_w(x) + J_w f(x)·δ`` with this model's own ``δ``."""
        return self.forward_with(x, self.delta_params)

    def forward_with(self, x: Tensor, delta: Union[Mapping[str, Tensor], Sequence[Tensor]]) -> Tensor:
        """``f_w(x) + J_w f(x)·δ`` for a given ``δ`` (a :data:`Delta` or tensors in
        ``linearized_names`` order), without touching this model's own ``δ``."""
        if isinstance(delta, Mapping):
            self.check_delta(delta)
            tangents = tuple(delta[n] for n in self.linearized_names)
        else:
            tangents = tuple(delta)
        base = dict(self.model.named_parameters())
        primals = tuple(base[n] for n in self.linearized_names)
        tangents = tuple(t.to(dtype=p.dtype, device=p.device) for t, p in zip(tangents, primals))
        if self.channels_last and x.dim() == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        names = self.linearized_names
        if self._plan is not None and not getattr(self, "_hooks_warned", False):
            self._warn_if_hooked()
        # The fused attention kernels have no forward-mode derivative; the math one does.
        with sdpa_kernel([SDPBackend.MATH]):
            if self._plan is not None:
                return self._plan(self.model, x, dict(zip(names, tangents)))

            device_type = x.device.type

            def f(*linearized: Tensor) -> Tensor:
                # under autocast, keeps each tangent in its primal's dtype (see .precision)
                with matched_tangent_dtypes(device_type):
                    return functional_call(self.model, dict(zip(names, linearized)), (x,))

            output, jvp_output = forward_jvp(f, primals, tangents)
        if not isinstance(output, Tensor):
            raise TypeError(
                f"TangentModel needs a model that returns one tensor of logits, got {type(output).__name__}."
            )
        return output + jvp_output

    def _warn_if_hooked(self) -> None:
        """Warn once if a module of the wrapped network has a forward (pre-)hook: the fast
        path runs the traced graph's operations, not the modules, so those hooks do not fire
        there (they do on the generic path, which calls the modules)."""
        hooked = [name or type(self.model).__name__ for name, m in self.model.named_modules()
                  if m._forward_hooks or m._forward_pre_hooks]
        if hooked:
            self._hooks_warned = True
            warnings.warn(
                f"Forward hooks on the wrapped network's modules ({', '.join(hooked[:3])}"
                f"{', ...' if len(hooked) > 3 else ''}) do not fire on TangentModel's fast path, which runs the "
                "traced graph instead of the modules. To have them fire, use implementation='generic' (or "
                "tm.use_implementation('generic'): the same numbers, about half the speed), or hook the "
                "TangentModel itself. This warning is shown once per model.", UserWarning, stacklevel=3)

    @torch.no_grad()
    def base_forward(self, x: Tensor) -> Tensor:
        """``f_w(x)``: the pre-trained network alone (eval mode)."""
        return self.model(x)

    # ------------------------------------------------------------------ delta
    @property
    def delta(self) -> Delta:
        """A detached copy of the current ``δ``: linearized parameter name -> tensor."""
        return OrderedDict((n, p.detach().clone()) for n, p in zip(self.linearized_names, self.delta_params))

    def delta_parameters(self) -> Iterator[nn.Parameter]:
        """The trainable tensors (what an optimizer should see)."""
        return iter(self.delta_params)

    def delta_shapes(self) -> Dict[str, torch.Size]:
        """Name -> shape of every linearized parameter (what a compatible δ must have)."""
        return {n: p.shape for n, p in zip(self.linearized_names, self.delta_params)}

    def check_delta(self, delta: Mapping[str, Tensor]) -> None:
        """Raise ``ValueError`` unless ``delta`` has exactly this model's names and shapes."""
        expected = self.delta_shapes()
        missing = [n for n in expected if n not in delta]
        unexpected = [n for n in delta if n not in expected]
        wrong = [
            f"{n}: got {tuple(delta[n].shape)}, expected {tuple(s)}"
            for n, s in expected.items()
            if n in delta and delta[n].shape != s
        ]
        if missing or unexpected or wrong:
            parts = []
            if missing:
                parts.append(f"missing {missing[:5]}{' ...' if len(missing) > 5 else ''}")
            if unexpected:
                parts.append(f"unexpected {unexpected[:5]}{' ...' if len(unexpected) > 5 else ''}")
            if wrong:
                parts.append("wrong shapes " + "; ".join(wrong[:5]))
            raise ValueError(
                "This delta does not fit the TangentModel (" + ", ".join(parts) + "). A delta "
                "only fits a TangentModel built from the same network, head size and "
                "`linearize`/`start_at` choice."
            )

    @torch.no_grad()
    def load_delta(self, delta: Mapping[str, Tensor]) -> None:
        """Copy ``delta`` into this model's ``δ``, all or nothing: names, shapes, types and
        finiteness are checked and every entry converted before any is written."""
        not_tensors = [n for n, v in delta.items() if not isinstance(v, Tensor)]
        if not_tensors:
            raise TypeError(f"A delta maps names to tensors; {not_tensors[:5]} are not tensors. Nothing was loaded.")
        self.check_delta(delta)
        values = []
        for name, param in zip(self.linearized_names, self.delta_params):
            value = delta[name]
            if value.is_complex() or not (value.is_floating_point() or value.dtype == param.dtype):
                raise TypeError(f"delta[{name!r}] must be a real floating-point tensor, got "
                                f"{getattr(value, 'dtype', type(value).__name__)}. Nothing was loaded.")
            if not bool(torch.isfinite(value).all()):
                raise ValueError(f"delta[{name!r}] holds NaN or inf. Nothing was loaded.")
            values.append(value.to(device=param.device, dtype=param.dtype))
        for param, value in zip(self.delta_params, values):
            param.copy_(value)

    @torch.no_grad()
    def zero_delta(self) -> None:
        """Reset ``δ`` to zero: the model becomes ``f_w`` again."""
        for param in self.delta_params:
            param.zero_()

    def base_fingerprint(self) -> str:
        """SHA-256 of the base point ``w`` (names, shapes, values of parameters and
        buffers) and of the linearized names: components fit together only if their
        fingerprints agree."""
        digest = hashlib.sha256()
        digest.update("\n".join(self.linearized_names).encode())
        state = self.model.state_dict()
        for name in sorted(state):
            tensor = state[name].detach().to("cpu").contiguous()
            digest.update(f"{name}:{tuple(tensor.shape)}:{tensor.dtype}".encode())
            digest.update(tensor.view(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
        return digest.hexdigest()
