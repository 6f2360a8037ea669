"""``AutocastPlugin``: mixed-precision forwards (``torch.autocast``) for Avalanche strategies,
which have no AMP of their own (Avalanche 0.6)."""

from typing import TYPE_CHECKING, Any, Dict, List, Optional

import torch
from avalanche.core import BaseSGDPlugin, SupervisedPlugin

__all__ = ["AutocastPlugin", "AUTOCAST_DTYPES"]

if TYPE_CHECKING:
    from avalanche.training.templates import SupervisedTemplate

AUTOCAST_DTYPES = (torch.bfloat16, torch.float16)
"""The dtypes :class:`AutocastPlugin` runs forwards in."""


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

    If a forward raises on a strategy that is not all or nothing (Avalanche's own), the
    autocast context stays entered until this plugin's next callback; the strategies of
    this package leave it when they roll back.

    :param dtype: ``torch.bfloat16`` (default) or ``torch.float16``.
    :param init_scale: the GradScaler's first loss scale (float16 only).
    """

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

    @staticmethod
    def _float32_output(strategy: "SupervisedTemplate") -> None:
        output = getattr(strategy, "mb_output", None)
        if isinstance(output, torch.Tensor) and output.is_floating_point() and torch.finfo(output.dtype).bits < 32:
            strategy.mb_output = output.float()

    def before_training(self, strategy: "SupervisedTemplate", **kwargs: Any) -> None:
        """Check the device and, for float16, the plugin order; make the GradScaler."""
        self.exit()
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
        """Leave autocast if a forward was interrupted."""
        self.exit()

    def before_eval(self, strategy: "SupervisedTemplate", **kwargs: Any) -> None:
        """Leave autocast if a forward was interrupted."""
        self.exit()

    def after_eval(self, strategy: "SupervisedTemplate", **kwargs: Any) -> None:
        """Leave autocast if a forward was interrupted."""
        self.exit()

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
        """float16: unscale the gradients; skip the step (clear them) if one is not finite."""
        if self.scaler is None or self.dtype is not torch.float16:
            return
        optimizer = strategy.optimizer
        self.scaler.unscale_(optimizer)
        params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        if params and not bool(torch.stack([torch.isfinite(p.grad).all() for p in params]).all()):
            for p in params:  # optimizers skip parameters without a gradient: no step, no state change
                p.grad = None

    def after_update(self, strategy: "SupervisedTemplate", **kwargs: Any) -> None:
        """float16: grow or shrink the loss scale."""
        if self.scaler is not None and self.dtype is torch.float16:
            self.scaler.update()

    # ------------------------------------------------------------------ all or nothing
    def snapshot(self, strategy: "SupervisedTemplate") -> Optional[Dict[str, Any]]:
        """The GradScaler's state (None without one), for :meth:`restore`."""
        return None if self.scaler is None else self.scaler.state_dict()

    def restore(self, strategy: "SupervisedTemplate", snapshot: Optional[Dict[str, Any]]) -> None:
        """Leave autocast (a failed forward leaves it entered) and put the scale back."""
        self.exit()
        self._unscaled_loss = None
        if snapshot is None:
            self.scaler = None
        elif self.scaler is not None:
            self.scaler.load_state_dict(snapshot)
