"""TMC, TME and TMC-Seq as Avalanche strategies: a ``SupervisedTemplate`` plus a
:class:`~avalanche_tmc.training.plugins.tangent.TangentPlugin` and a
:class:`~avalanche_tmc.training.plugins.divergence.DivergenceGuardPlugin`, with keyword-only
constructors like Avalanche's ``Naive``."""

import math
import numbers
import os
from collections import OrderedDict
from typing import Any, Callable, Dict, Hashable, List, Optional, Sequence, Set, Union

import torch
from avalanche.core import SupervisedPlugin
from avalanche.training.plugins.evaluation import EvaluationPlugin, default_evaluator
from avalanche.training.templates import SupervisedTemplate
from torch.optim import Optimizer

from ...composition.deltas import DeltaComposition
from ...tangent import Delta, TangentModel
from ..devices import check_device
from ..loaders import UnshardedLoaders
from ..losses import RescaledSquareLoss
from ..metrics import default_tangent_evaluator
from ..plugins.delta_decay import DeltaDecayPlugin, check_decay
from ..plugins.divergence import DivergenceGuardPlugin
from ..plugins.tangent import TangentPlugin
from ..protocols import ComposableLearner, component_store
from ..rollback import AllOrNothingTraining, check_train_epochs
from .keywords import ThreePositionalArguments

__all__ = ["DEFAULT_LR", "TMCStrategy", "TMEStrategy", "TMCSeqStrategy"]

DEFAULT_LR = 1e-4
"""Adam's learning rate on ``δ``, the default of the tangent strategies: the paper's 1e-4,
which does no harm to a trained network, where a larger one can wreck it silently (digits,
class-incremental, 5 experiences, 2 epochs: a digits-trained torchvision ResNet-18 with a new
head ends at 0.27 with lr 1e-2 against 0.76 with 1e-4; a trained 128-wide CNN keeping its
head at 0.25 against 0.98). The best value depends on the network: a small network with a
new head needs more (the quick start, the examples and the command line's digits CNN pass
1e-2), and so did an ImageNet EfficientNet-Lite0 with a new head. Choose it on a validation
split (docs/usage.md, "Choosing the learning rate"); a training loss that ends far above
where it started gives a :class:`~avalanche_tmc.training.plugins.divergence.LossIncreaseWarning`."""


class _TangentStrategy(ThreePositionalArguments, ComposableLearner, AllOrNothingTraining, UnshardedLoaders,
                       SupervisedTemplate):
    """Shared constructor of the tangent strategies; subclasses fix ``mode``.

    ``train()`` is all or nothing: an experience id that is already composed is refused
    before training, and on any exception (a bad label, :class:`~avalanche_tmc.training.divergence.DivergenceError`,
    ``KeyboardInterrupt``) the components, the model's ``δ``, the optimizer state and the
    clock are as before the call (:class:`~avalanche_tmc.training.rollback.TrainingTransaction`).
    :attr:`tangent_plugin` trains and composes the components, :attr:`divergence_guard`
    stops a diverging experience, :attr:`delta_decay` (``decay_kind="norm"`` with
    ``decay > 0``, else None) adds the decay on ``δ`` to the loss."""

    mode = "tmc"
    payload = "delta"

    def __init__(
        self,
        *,
        model: TangentModel,
        optimizer: Optional[Optimizer] = None,
        criterion: Optional[Callable] = None,
        lr: float = DEFAULT_LR,
        beta: float = 25.0,
        weighting: str = "mean",
        keep_components: bool = True,
        task_incremental: Optional[bool] = None,
        train_mb_size: int = 32,
        train_epochs: int = 1,
        eval_mb_size: Optional[int] = None,
        device: Union[str, torch.device] = "cpu",
        plugins: Optional[List[SupervisedPlugin]] = None,
        evaluator: Union[EvaluationPlugin, Callable[[], EvaluationPlugin]] = default_evaluator,
        eval_every: int = -1,
        component_dir: Optional[str] = None,
        overwrite_components: bool = False,
        decay: float = 0.0,
        decay_kind: str = "norm",
        **base_kwargs: Any,
    ):
        """
        :param model: a :class:`TangentModel` (wrap your pre-trained network in one).
        :param optimizer: defaults to ``Adam(model.delta_parameters(), lr=lr)`` (the paper).
            Its state is reset at every experience: each component trains from scratch.
        :param criterion: defaults to ``RescaledSquareLoss(alpha=1, beta=beta)``.
        :param lr: learning rate of the default optimizer (:data:`DEFAULT_LR`).
        :param beta: RSL target value: 25 for class/task-incremental, 5 for data-incremental
            (the default is the class's: 25 for TMC and TMC-Seq, 5 for TME).
        :param weighting: ``"mean"`` (paper) or ``"samples"`` component weights.
        :param keep_components: keep every δ_t (for ``components``/``forget``);
            ``False`` keeps O(1) memory.
        :param task_incremental: mask predictions to the task's classes; ``None`` = auto.
        :param component_dir: write each component, as soon as it is composed, to
            ``<component_dir>/experience-<id>.safetensors``
            (:mod:`~avalanche_tmc.files`; not for TMC-Seq). A file written for an
            experience stays even if a later experience of the same ``train()`` call fails
            (it is a valid component; the strategy itself goes back to before the call).
            A file there that this strategy did not write (another run's) is never
            replaced: :class:`~avalanche_tmc.files.ComponentExistsError`, and ``train()``
            goes back to before the call.
        :param overwrite_components: replace such files in ``component_dir`` instead.
        :param decay: a decay on ``δ`` toward the pre-trained point, a finite number ``≥ 0``;
            0 (the default) turns it off. The authors' code uses 1e-5 with ``"norm"``.
        :param decay_kind: one of :data:`~avalanche_tmc.training.plugins.delta_decay.DECAY_KINDS`:
            ``"norm"`` (default) adds ``decay · sqrt(1e-6 + Σ δ²)``, the norm over every
            linearized tensor together, to the loss (:class:`~avalanche_tmc.DeltaDecayPlugin`,
            put before ``plugins``; the authors' penalty); ``"squared"`` is the usual L2 decay
            ``decay/2 · Σ δ²``, i.e. ``Adam(weight_decay=decay)``; ``"decoupled"`` is
            ``AdamW(weight_decay=decay)``. ``"squared"`` and ``"decoupled"`` change the default
            optimizer, so with your own ``optimizer`` they are refused (set its
            ``weight_decay`` instead); ``"norm"`` works with any optimizer.
        :param train_mb_size, train_epochs, eval_mb_size, device, plugins, evaluator,
            eval_every, base_kwargs: as in Avalanche's ``Naive``.
        """
        if not isinstance(model, TangentModel):
            raise TypeError(
                f"{type(self).__name__} needs a TangentModel, got {type(model).__name__}. "
                "Wrap the pre-trained network: TangentModel(net, num_classes=...)."
            )
        decay = check_decay(decay, decay_kind)
        if optimizer is None:
            if isinstance(lr, bool) or not isinstance(lr, numbers.Real) or not 0 < lr < math.inf:
                raise ValueError(
                    f"lr must be a positive finite number (the paper: 1e-4 to 1e-2 with Adam), got {lr!r}.")
            if decay and decay_kind == "squared":
                optimizer = torch.optim.Adam(model.delta_parameters(), lr=lr, weight_decay=decay)
            elif decay and decay_kind == "decoupled":
                optimizer = torch.optim.AdamW(model.delta_parameters(), lr=lr, weight_decay=decay)
            else:
                optimizer = torch.optim.Adam(model.delta_parameters(), lr=lr)
        elif decay and decay_kind != "norm":
            raise ValueError(
                f"decay_kind={decay_kind!r} is a setting of the default optimizer, which a given optimizer replaces: "
                f"set weight_decay={decay!r} on your optimizer instead ("
                + ("torch.optim.Adam(..., weight_decay=...) for 'squared'" if decay_kind == "squared"
                   else "torch.optim.AdamW(..., weight_decay=...) for 'decoupled'")
                + "), or use decay_kind='norm', which works with any optimizer.")
        self.decay, self.decay_kind = decay, decay_kind
        self.delta_decay: Optional[DeltaDecayPlugin] = (
            DeltaDecayPlugin(decay) if decay and decay_kind == "norm" else None)
        if criterion is None:
            criterion = RescaledSquareLoss(alpha=1.0, beta=beta)
        check_train_epochs(train_epochs)
        self.divergence_guard = DivergenceGuardPlugin()
        self.tangent_plugin = TangentPlugin(
            self.mode, weighting=weighting, keep_components=keep_components, task_incremental=task_incremental
        )
        self.component_dir = component_dir
        self.overwrite_components = overwrite_components
        check_device(device)  # before Avalanche moves anything there
        self._written_components: Set[str] = set()  # files of component_dir this strategy wrote: its own to replace
        if component_dir is not None:
            if self.mode == "tmc-seq":
                raise ValueError("TMC-Seq components are not independent (each starts from the composition before "
                                 "it): they are not written as component files. Use TMCStrategy or TMEStrategy.")
            self.tangent_plugin.component_callbacks.append(self._write_component)
        super().__init__(
            model=model,
            optimizer=optimizer,
            criterion=criterion,
            train_mb_size=train_mb_size,
            train_epochs=train_epochs,
            eval_mb_size=eval_mb_size,
            device=device,
            # the guard first: its end-of-experience check runs before the component is composed;
            # the decay before the user's plugins: an AutocastPlugin(float16) among them scales its term
            plugins=[self.divergence_guard, self.tangent_plugin,
                     *([self.delta_decay] if self.delta_decay is not None else []), *(plugins or [])],
            # Avalanche's default, with losses named for what they are (RSL_Loss_*, TME's NLL_Loss_*)
            evaluator=default_tangent_evaluator if evaluator is default_evaluator else evaluator,
            eval_every=eval_every,
            **base_kwargs,
        )

    # ------------------------------------------------------------------ ComposableLearner
    def learned(self) -> DeltaComposition:
        """The composition of the components learned so far."""
        return self.tangent_plugin.composition

    def replace_learned(self, composition: DeltaComposition) -> DeltaComposition:
        """Put ``composition`` in place of the learned one (returned)."""
        old, self.tangent_plugin.composition = self.tangent_plugin.composition, composition
        return old

    def check_independent(self, what: str) -> None:
        """Raise ``ValueError`` for TMC-Seq, whose components are not independent (``what``: the use)."""
        if self.mode == "tmc-seq":
            raise ValueError(
                f"TMC-Seq cannot {what}: each of its components starts from the composition of the experiences "
                "before it, so experience t must wait for t-1 (sequential by definition). Use TMCStrategy or "
                "TMEStrategy (independent components) for parallel or federated training.")

    def learned_settings(self) -> Dict[str, Any]:
        """What must agree between processes that compose together: mode, weighting, base."""
        return dict(mode=self.tangent_plugin.mode, weighting=self.tangent_plugin.weighting,
                    fingerprint=self.model.base_fingerprint())

    def installed(self, classes: Dict[Hashable, Dict[int, List[int]]]) -> None:
        """Components were merged in from elsewhere: record their classes, load the composition."""
        self.tangent_plugin.installed(self.model, classes)

    def learned_classes(self) -> Dict[Hashable, Dict[int, List[int]]]:
        """Experience id -> task label -> classes of every component."""
        return dict(self.tangent_plugin.component_classes)

    def component_settings(self) -> Dict[str, Any]:
        """How the components were made, recorded in component files (mode, weighting; the
        decay on ``δ`` and its kind when there is one)."""
        settings = dict(mode=self.tangent_plugin.mode, weighting=self.tangent_plugin.weighting)
        if getattr(self, "decay", 0.0):  # (strategies pickled before the decay existed have none)
            settings.update(decay=self.decay, decay_kind=self.decay_kind)
        return settings

    def base_network(self) -> torch.nn.Module:
        """The wrapped pre-trained network (its weights and buffers are the base point)."""
        return self.model.model

    @property
    def components(self) -> "OrderedDict[Hashable, Delta]":
        """Experience id -> trained component δ_t."""
        return self.tangent_plugin.components

    @property
    def composed_delta(self) -> Delta:
        """The composed δ the strategy evaluates (TMC, TMC-Seq)."""
        return self.tangent_plugin.composition.composed()

    def _write_component(self, strategy: SupervisedTemplate, key: Hashable, delta: Delta, weight: float) -> None:
        path = os.path.join(self.component_dir, f"experience-{key}.safetensors")
        written = self.__dict__.setdefault("_written_components", set())  # (pickled before it existed: none)
        # exclusive unless asked or this strategy wrote it (a train() it rolled back): another run's file is kept
        component_store().write_component(self, key, delta, weight, self.tangent_plugin.component_classes.get(key),
                                          path, overwrite=getattr(self, "overwrite_components", False)
                                          or path in written)
        written.add(path)

    def load_components(self, paths: Union[str, Sequence[str]], *, key: Union[None, bytes, str] = None
                        ) -> List[Hashable]:
        """Compose component files (a directory: its ``.safetensors`` files) as if their
        experiences had been trained here; returns their experience ids.

        Every file is read and checked against this strategy's model (base weights and
        BatchNorm statistics, head size, linearized parameters) before any is composed;
        with a key (``key``, or ``$AVALANCHE_TMC_KEY_FILE``) each must be signed with it.

        :raises ~avalanche_tmc.files.IncompatibleComponentsError: a file from
            another base (naming the difference), an experience already composed, a
            composition file (load its component files instead).
        """
        if self.mode == "tmc-seq":
            raise ValueError("TMC-Seq cannot be built from component files: its components are not independent.")
        components = component_store().read_components(self, paths, self.tangent_plugin.composition, key=key)
        for component in components:  # (read on the CPU: composed on the strategy's device)
            delta = OrderedDict((n, t.to(self.device)) for n, t in component.tensors.items())
            self.tangent_plugin.install_component(self.model, component.experience, delta, component.weight,
                                                  component.classes)
        return [c.experience for c in components]

    @classmethod
    def from_components(cls, paths: Union[str, Sequence[str]], *, model: TangentModel,
                        key: Union[None, bytes, str] = None, **kwargs: Any) -> "_TangentStrategy":
        """A strategy built on ``model`` (the same base the files were trained on) holding
        the components of ``paths`` (files, or a directory of them), ready to evaluate,
        train more experiences, or forget some; ``key`` as for :meth:`load_components`,
        ``kwargs`` as for the constructor."""
        strategy = cls(model=model, **kwargs)
        strategy.load_components(paths, key=key)
        return strategy

    def forget(self, exp_id: Hashable, delta: Optional[Delta] = None, *, inexact: bool = False) -> None:
        """Unlearn experience ``exp_id`` at zero cost: the strategy then evaluates the
        composition of the remaining experiences. ``delta`` is needed only with
        ``keep_components=False`` (and must then be that experience's component, bit for
        bit: its checksum is compared).

        With a replay plugin (e.g. ``plugins=[ReplayPlugin(mem_size=...)]``) the
        components of later experiences are trained on replayed samples of earlier ones,
        so forgetting an experience that later ones replayed is refused with a
        ``ValueError``; forget the later experiences first, or train without replay when
        exact forgetting matters. Forgetting the most recent experience stays exact, and
        its samples are purged from ``ReplayPlugin``'s buffer (Avalanche's
        ``ExperienceBalancedBuffer``; another buffer is refused). With a distillation plugin
        (``LwFPlugin``) forgetting is refused: its teacher knows the experience.
        ``inexact=True`` forgets from the composition anyway.

        With ``component_dir``, the experience's file there is removed, so that
        :meth:`from_components` on that directory does not bring it back."""
        self.tangent_plugin.forget(self, exp_id, delta, inexact=inexact)
        if self.component_dir is not None:
            path = os.path.join(self.component_dir, f"experience-{exp_id}.safetensors")
            if os.path.lexists(path):
                os.remove(path)
            self.__dict__.setdefault("_written_components", set()).discard(path)


class TMCStrategy(_TangentStrategy):
    """Tangent Model Composition: each experience trains its own δ_t from the pre-trained
    point; evaluation uses the single model of the averaged δ (O(1) in the tasks)."""

    mode = "tmc"


class TMEStrategy(_TangentStrategy):
    """Tangent Model Ensembling: TMC's training, but evaluation averages the softmax of
    the T component models (O(T) inference, usually a little more accurate).

    Its default RSL ``beta`` is 5, not TMC's 25: the paper trains TME with ``α = 1, β = 5``
    (its appendix: a large β makes TMC's sum of logits mimic the high signal-to-noise ratio
    that the softmax already gives an ensemble). The authors' ``scripts/compose.sh`` used 15
    in class-incremental runs; pass ``beta=`` to choose another value."""

    mode = "tme"

    def __init__(self, *, model: TangentModel, optimizer: Optional[Optimizer] = None,
                 criterion: Optional[Callable] = None, beta: float = 5.0, **kwargs: Any):
        """As :class:`TMCStrategy`'s constructor, with ``beta`` 5 by default (the paper's TME
        setting). ``model``, ``optimizer`` and ``criterion`` lead, as in every Avalanche
        strategy, so that Avalanche's positional call ``TMEStrategy(model, optimizer,
        criterion)`` fills them."""
        super().__init__(model=model, optimizer=optimizer, criterion=criterion, beta=beta, **kwargs)


class TMCSeqStrategy(_TangentStrategy):
    """TMC-Seq: δ_t starts from the composed δ of the previous tasks (sequential, not
    parallelisable; components are not independent, so ``forget`` is refused)."""

    mode = "tmc-seq"
