"""``AutocastPlugin``: mixed-precision forwards (``torch.autocast``) for Avalanche strategies,
which have no AMP of their own (Avalanche 0.6)."""

import math
import warnings
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional

import torch
from avalanche.core import BaseSGDPlugin, SupervisedPlugin

from ..divergence import all_finite
from .divergence import trained_tensors

__all__ = ["AutocastPlugin", "AUTOCAST_DTYPES"]

if TYPE_CHECKING:
    from avalanche.training.templates import SupervisedTemplate

AUTOCAST_DTYPES = (torch.bfloat16, torch.float16)
"""The dtypes :class:`AutocastPlugin` runs forwards in."""


def _power_of_two(scale: float) -> str:
    """``2.0 ** k`` for a power of two (the GradScaler's scales), else the number."""
    mantissa, exponent = math.frexp(scale)
    return f"2.0 ** {exponent - 1}" if mantissa == 0.5 else f"{scale:g}"


class AutocastPlugin(SupervisedPlugin, supports_distributed=True):
    """Runs the strategy's forwards (training and evaluation) under
    ``torch.autocast(strategy.device.type, dtype)``.

    **Mixed precision.** What it is for: faster forwards and less activation memory, for a
    :class:`~avalanche_tmc.tangent.TangentModel` (both its paths) or any network. Use
    ``AutocastPlugin()`` (bfloat16) on CPU and on recent GPUs;
    ``AutocastPlugin(torch.float16)`` on GPUs without bfloat16::

        strategy = TMCStrategy(model=TangentModel(net, num_classes=10), plugins=[AutocastPlugin()])

    What runs in which dtype:

    * the forward (``before_forward`` to ``after_forward``, and ``before_eval_forward`` to
      ``after_eval_forward``) runs under autocast: convolutions and matrix products in
      ``dtype``, the model's output in ``dtype``. Nothing else does: the autocast context is
      left at the end of every forward, so the optimizer step never sees a cast cached
      from before it;
    * the trained tensors (a tangent model's ``δ``), their gradients and the optimizer state
      stay float32: autocast casts copies, never the parameters;
    * the output is cast to float32 on leaving the forward (``strategy.mb_output``), so the
      loss and the metrics are computed in float32 (:class:`~avalanche_tmc.RescaledSquareLoss`
      also upcasts 16-bit logits itself);
    * :class:`~avalanche_tmc.tangent.TangentModel` keeps each tangent in its primal's dtype
      under autocast (:mod:`avalanche_tmc.tangent.precision` says why PyTorch needs help
      there).

    Accuracy (``tests/avalanche_tmc/tangent/test_mixed_precision.py``): bfloat16 keeps 8
    significant bits (one rounding: up to 2⁻⁸ ≈ 0.4% of the value), float16 11 (0.05%).
    Measured on CPU, outputs against float32's, relative to the largest logit: 0.4-0.9% in
    bfloat16 and 0.05-0.1% in float16 for the tests' small networks and ConvNeXt-atto, 1.9%
    and 0.2% for a ViT-tiny; the gradients of ``δ`` point the same way (cosine similarity
    with float32's above 0.9995), and a short TMC run learns the same ``δ`` (cosine above
    0.99) and accuracy. The tangent model is as accurate as its network: compare the plain
    network's output under autocast with float32's first (randomly initialised BatchNorm
    networks are already 3-20% off there).

    float16 needs loss scaling, which this plugin does with a ``torch.amp.GradScaler``
    (bfloat16 has float32's range and needs none): ``before_backward`` multiplies
    ``strategy.loss`` by the scale, ``after_backward`` puts the unscaled loss back (for the
    metrics and :class:`~avalanche_tmc.training.plugins.divergence.DivergenceGuardPlugin`),
    ``before_update`` divides the gradients by the scale and, when one of them is not
    finite, skips the optimizer step (by clearing the gradients, which optimizers skip), and
    ``after_update`` updates the scale. Plugins that add terms to ``strategy.loss`` in their
    own ``before_backward`` (LwF, EWC ...) must come *before* this plugin in the list, or
    their terms would not be scaled: training refuses that order with a ``ValueError``.
    The scale is kept across experiences and is part of what a failed ``train()`` of this
    package's strategies rolls back; it is not saved in checkpoints (it restarts from
    ``init_scale``).

    **Skipped steps.** The GradScaler starts at ``init_scale`` and halves the scale at each
    step it skips, so the first steps of a run are often skipped while it calibrates. The
    plugin counts, per experience, the optimizer steps taken and skipped
    (:attr:`steps_taken`, :attr:`steps_skipped`). An experience whose every step was
    skipped (one short experience from ``2**16``) is refused with a ``ValueError`` before
    anything is stored, as an experience without a training step is: its trained tensors
    never moved (a tangent component would be ``δ = 0``, which only dilutes a composition).
    When at least :attr:`SKIPPED_STEPS_REPORTED` of an experience's steps were skipped, a
    ``RuntimeWarning`` names the count and the scale reached: pass a lower ``init_scale``
    (that scale), or use bfloat16.

    **Every exit path leaves autocast.** ``torch.autocast`` is a thread-wide state: if a
    forward raised with it entered, the caller's later float32 code would run in ``dtype``.
    For the duration of a ``train()`` / ``eval()`` call the plugin therefore wraps the
    strategy's experience loops (Avalanche's ``_train_exp`` / ``_eval_exp``, on the strategy
    instance; removed at the end of the call) in a ``try``/``finally`` that leaves autocast
    however the loop ends: an exception in the forward, in a plugin's callback, or
    ``KeyboardInterrupt``, on this package's strategies and on Avalanche's own.

    :param dtype: ``torch.bfloat16`` (default) or ``torch.float16``.
    :param init_scale: the GradScaler's first loss scale (float16 only).
    """

    SKIPPED_STEPS_REPORTED = 0.1
    """The fraction of an experience's optimizer steps skipped (float16) from which a
    ``RuntimeWarning`` reports it."""

    def __init__(self, dtype: torch.dtype = torch.bfloat16, *, init_scale: float = 2.0 ** 16):
        super().__init__()
        if dtype not in AUTOCAST_DTYPES:
            raise ValueError(f"AutocastPlugin runs forwards in torch.bfloat16 or torch.float16, got {dtype!r} "
                             "(for float32, leave the plugin out).")
        self.dtype = dtype
        self.init_scale = float(init_scale)
        self.scaler: Optional[torch.amp.GradScaler] = None
        self._context: Optional[torch.autocast] = None
        self._unscaled_loss: Optional[torch.Tensor] = None
        self.steps_taken = 0
        """Optimizer steps taken in the current (or last) training experience."""
        self.steps_skipped = 0
        """Optimizer steps skipped there by float16 loss scaling (an inf/NaN gradient)."""

    # ------------------------------------------------------------------ the autocast context
    @property
    def active(self) -> bool:
        """Whether this plugin's autocast context is entered now (inside a forward)."""
        return self._context is not None

    def enter(self, strategy: "SupervisedTemplate") -> None:
        """Enter ``torch.autocast`` for the strategy's device (leaving one still open first)."""
        self.exit()
        context = torch.autocast(torch.device(strategy.device).type, dtype=self.dtype)
        context.__enter__()
        self._context = context

    def exit(self) -> None:
        """Leave this plugin's autocast context, if entered."""
        context, self._context = self._context, None
        if context is not None:
            context.__exit__(None, None, None)

    def _guard(self, strategy: "SupervisedTemplate", name: str) -> None:
        """Wrap the strategy's loop ``name`` (on the instance) so that it leaves autocast however it ends."""
        current = vars(strategy).get(name)
        if isinstance(current, _LeaveAutocast) and current.plugin is self:
            return
        setattr(strategy, name, _LeaveAutocast(self, strategy, name, current))

    @staticmethod
    def _unguard(strategy: "SupervisedTemplate", *names: str) -> None:
        """Remove this plugin's wrappers (any left by a call that raised)."""
        for name in names:
            current = vars(strategy).get(name)
            while isinstance(current, _LeaveAutocast):
                current = current.previous
            if current is None:
                vars(strategy).pop(name, None)
            else:
                setattr(strategy, name, current)

    def check_steps(self, strategy: "SupervisedTemplate") -> None:
        """At the end of an experience: refuse it when float16 loss scaling skipped every
        optimizer step; warn when it skipped at least :attr:`SKIPPED_STEPS_REPORTED` of them."""
        taken, skipped = self.steps_taken, self.steps_skipped
        if not skipped:
            return
        experience = getattr(getattr(strategy, "experience", None), "current_experience", None)
        start = _power_of_two(self.init_scale)
        reached = _power_of_two(self.scaler.get_scale() if self.scaler is not None else self.init_scale)
        remedy = (f"Start from a lower loss scale (AutocastPlugin(torch.float16, init_scale={reached}), the scale "
                  "reached, or lower), or use torch.bfloat16, which needs no loss scaling.")
        if not taken:
            symbol = trained_tensors(strategy.model)[0]
            raise ValueError(
                f"Experience {experience}: float16 loss scaling skipped all {skipped} optimizer steps (each had an "
                f"inf/NaN gradient while the GradScaler calibrated its scale down from init_scale={start}): {symbol} "
                "never moved, and a component of 0 would only dilute the composition (the strategies of this package "
                f"are left as before the train() call). {remedy}")
        if skipped >= self.SKIPPED_STEPS_REPORTED * (taken + skipped):
            warnings.warn(
                f"Experience {experience}: float16 loss scaling skipped {skipped} of {taken + skipped} optimizer steps "
                f"(inf/NaN gradients while the GradScaler calibrated its scale from init_scale={start}): it trained "
                f"on {taken} steps only. {remedy}", RuntimeWarning, stacklevel=2)

    @staticmethod
    def _float32_output(strategy: "SupervisedTemplate") -> None:
        output = getattr(strategy, "mb_output", None)
        if isinstance(output, torch.Tensor) and output.is_floating_point() and torch.finfo(output.dtype).bits < 32:
            strategy.mb_output = output.float()

    def before_training(self, strategy: "SupervisedTemplate", **kwargs: Any) -> None:
        """Check the device and, for float16, the plugin order; make the GradScaler; wrap
        the experience loop so that it leaves autocast on every exit path."""
        self.exit()
        self._guard(strategy, "_train_exp")
        device_type = torch.device(strategy.device).type
        available = getattr(torch.amp, "is_autocast_available", None)
        if available is not None and not available(device_type):
            raise ValueError(f"torch.autocast is not available on {device_type!r} (the strategy's device).")
        if self.dtype is torch.float16:
            self._check_order(strategy)
            if self.scaler is None:
                self.scaler = torch.amp.GradScaler(device_type, init_scale=self.init_scale)

    def _check_order(self, strategy: "SupervisedTemplate") -> None:
        plugins: List[Any] = list(getattr(strategy, "plugins", []))
        after = plugins[plugins.index(self) + 1:] if self in plugins else []
        adds_loss = [type(p).__name__ for p in after
                     if getattr(type(p), "before_backward", BaseSGDPlugin.before_backward)
                     is not BaseSGDPlugin.before_backward]
        if adds_loss:
            raise ValueError(
                f"AutocastPlugin(torch.float16) scales the loss in before_backward, but {adds_loss} come after it "
                "in the strategy's plugins and may add loss terms there, which would not be scaled. Put "
                "AutocastPlugin after them in the plugins list (or use torch.bfloat16, which needs no scaling).")

    def before_training_exp(self, strategy: "SupervisedTemplate", **kwargs: Any) -> None:
        """Start counting the experience's optimizer steps."""
        self.steps_taken = self.steps_skipped = 0

    def before_forward(self, strategy: "SupervisedTemplate", **kwargs: Any) -> None:
        """Enter autocast for the training forward."""
        self.enter(strategy)

    def after_forward(self, strategy: "SupervisedTemplate", **kwargs: Any) -> None:
        """Leave autocast; the output goes on in float32."""
        self.exit()
        self._float32_output(strategy)

    def before_eval_forward(self, strategy: "SupervisedTemplate", **kwargs: Any) -> None:
        """Enter autocast for the evaluation forward."""
        self.enter(strategy)

    def after_eval_forward(self, strategy: "SupervisedTemplate", **kwargs: Any) -> None:
        """Leave autocast; the output goes on in float32."""
        self.exit()
        self._float32_output(strategy)

    def after_training(self, strategy: "SupervisedTemplate", **kwargs: Any) -> None:
        """Leave autocast (if a forward was interrupted) and unwrap the experience loop."""
        self.exit()
        self._unguard(strategy, "_train_exp")

    def before_eval(self, strategy: "SupervisedTemplate", **kwargs: Any) -> None:
        """Leave autocast if a forward was interrupted; wrap the evaluation loop so that it
        leaves autocast on every exit path."""
        self.exit()
        self._guard(strategy, "_eval_exp")

    def after_eval(self, strategy: "SupervisedTemplate", **kwargs: Any) -> None:
        """Leave autocast (if a forward was interrupted) and unwrap the evaluation loop."""
        self.exit()
        self._unguard(strategy, "_eval_exp")

    # ------------------------------------------------------------------ float16 loss scaling
    def before_backward(self, strategy: "SupervisedTemplate", **kwargs: Any) -> None:
        """float16: backpropagate the scaled loss."""
        if self.scaler is not None and self.dtype is torch.float16:
            self._unscaled_loss = strategy.loss
            strategy.loss = self.scaler.scale(strategy.loss)

    def after_backward(self, strategy: "SupervisedTemplate", **kwargs: Any) -> None:
        """float16: the unscaled loss back in ``strategy.loss``."""
        if self._unscaled_loss is not None:
            strategy.loss, self._unscaled_loss = self._unscaled_loss, None

    def before_update(self, strategy: "SupervisedTemplate", **kwargs: Any) -> None:
        """float16: unscale the gradients; skip the step (clear them) if one is not finite.
        Count the step as taken or skipped."""
        if self.scaler is None or self.dtype is not torch.float16:
            self.steps_taken += 1
            return
        optimizer = strategy.optimizer
        self.scaler.unscale_(optimizer)
        params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        if params and not all_finite(p.grad for p in params):
            for p in params:  # optimizers skip parameters without a gradient: no step, no state change
                p.grad = None
            self.steps_skipped += 1
        else:
            self.steps_taken += 1

    def after_update(self, strategy: "SupervisedTemplate", **kwargs: Any) -> None:
        """float16: grow or shrink the loss scale."""
        if self.scaler is not None and self.dtype is torch.float16:
            self.scaler.update()

    # ------------------------------------------------------------------ all or nothing
    def snapshot(self, strategy: "SupervisedTemplate") -> Optional[Dict[str, Any]]:
        """The GradScaler's state (None without one), for :meth:`restore`."""
        return None if self.scaler is None else self.scaler.state_dict()

    def restore(self, strategy: "SupervisedTemplate", snapshot: Optional[Dict[str, Any]]) -> None:
        """Leave autocast (a failed forward leaves it entered), unwrap the strategy's loops
        and put the scale back."""
        self.exit()
        self._unguard(strategy, "_train_exp", "_eval_exp")
        self._unscaled_loss = None
        if snapshot is None:
            self.scaler = None
        elif self.scaler is not None:
            self.scaler.load_state_dict(snapshot)


class _LeaveAutocast:
    """One of the strategy's loops (``_train_exp`` / ``_eval_exp``), run so that the
    plugin's autocast is left however it ends; after a training experience that ended
    normally, the plugin's step check (before any ``after_training_exp`` stores anything).
    An exception also unwraps the loop: the strategy keeps nothing of the plugin."""

    def __init__(self, plugin: AutocastPlugin, strategy: "SupervisedTemplate", name: str,
                 previous: Optional[Callable[..., Any]]):
        self.plugin, self.strategy, self.name, self.previous = plugin, strategy, name, previous

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        loop = self.previous if self.previous is not None else getattr(type(self.strategy), self.name).__get__(
            self.strategy)
        try:
            result = loop(*args, **kwargs)
        except BaseException:
            self.plugin.exit()
            AutocastPlugin._unguard(self.strategy, self.name)
            raise
        self.plugin.exit()
        if self.name == "_train_exp" and self.plugin in getattr(self.strategy, "plugins", ()):
            self.plugin.check_steps(self.strategy)
        return result
