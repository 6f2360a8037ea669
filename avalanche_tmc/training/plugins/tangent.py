"""``TangentPlugin``: Tangent Model Composition as an Avalanche plugin.

It maps Avalanche's training-loop moments onto the TMC algorithm:

* ``before_training_exp``: start a fresh component ``δ_t`` at zero (TMC, TME) or at the
  composed ``δ`` so far (TMC-Seq), with a fresh optimizer state;
* ``after_training_exp``: add ``δ_t`` to the :class:`~avalanche_tmc.composition.DeltaComposition`
  and load the composed ``δ`` into the model;
* evaluation: the single composed model (TMC, TMC-Seq) or the average of the softmax of
  the T component models (TME); with task labels, predictions are restricted to the
  classes of the sample's task (task-incremental learning).

Attach it to any supervised template whose model is a
:class:`~avalanche_tmc.tangent.TangentModel` (with a
:class:`~avalanche_tmc.training.plugins.divergence.DivergenceGuardPlugin` before it to stop
a diverging experience); :mod:`avalanche_tmc.training.strategies.tangent` does that.
"""

import copy
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Callable, Dict, Hashable, List, Optional, Tuple, Union

import torch

from ...composition.deltas import DeltaComposition
from ...composition.ensemble import log_softmax_ensemble
from ...tangent import Delta, TangentModel
from ..exact_forgetting import check_forget, dependent_plugin_names, purge_replay, replay_groups
from ..rollback import AllOrNothingTraining, TrainingTransaction, check_new_experience_ids
from .composition import CompositionPlugin
from .task_mask import experience_task_classes

__all__ = ["MODES", "WEIGHTINGS", "TangentPlugin"]

if TYPE_CHECKING:
    from avalanche.training.templates import SupervisedTemplate

MODES = ("tmc", "tme", "tmc-seq")
WEIGHTINGS = ("mean", "samples")


class TangentPlugin(CompositionPlugin, supports_distributed=True):
    """Trains one tangent component per experience and evaluates their composition.

    :param mode: ``"tmc"`` (compose by averaging δ; O(1) inference), ``"tme"`` (same
        training, evaluation averages the softmax of the components; O(T)), or
        ``"tmc-seq"`` (each δ_t starts from the previous composed δ; not parallelisable).
    :param weighting: component weights ``w_t``: ``"mean"`` (1 each: the paper's running
        mean) or ``"samples"`` (the number of training samples of the experience).
    :param keep_components: keep every δ_t (needed by TME and by :meth:`forget` without
        files); ``False`` keeps only the running sum (O(1) memory).
    :param task_incremental: restrict predictions to the classes of each sample's task.
        ``None`` (default) turns it on when training has seen more than one task label.
    :param reset_optimizer_state: start every component with a fresh optimizer state
        (momentum, Adam moments), as independent training requires.

    These plugins tell Avalanche they support distributed runs (``supports_distributed``):
    in a ``torch.distributed`` job each process trains whole experiences and the processes
    compose once at the end (:func:`~avalanche_tmc.distributed.train_parallel`).
    """

    def __init__(
        self,
        mode: str = "tmc",
        *,
        weighting: str = "mean",
        keep_components: bool = True,
        task_incremental: Optional[bool] = None,
        reset_optimizer_state: bool = True,
    ):
        super().__init__(task_incremental, reset_optimizer_state)
        if weighting not in WEIGHTINGS:
            raise ValueError(f"weighting must be one of {WEIGHTINGS}, got {weighting!r}.")
        self.composition = DeltaComposition(keep_components=keep_components)
        self._mode = "tmc"
        self.mode = mode
        self.weighting = weighting
        self.training_state: Optional[Delta] = None  # the component being trained, during evaluation
        self._pending_weight = 1.0
        self._transaction: Optional[TrainingTransaction] = None  # on a template not all or nothing itself
        self._replayed: Dict[Hashable, List[str]] = {}  # experience id -> replay/distillation plugins when trained
        self._replay_groups: Dict[Hashable, Dict[int, int]] = {}  # experience id -> its replay buffer groups
        self.base_fingerprint: Optional[str] = None  # TangentModel.base_fingerprint() the components belong to
        self.component_classes: Dict[Hashable, Dict[int, List[int]]] = {}  # experience id -> task -> classes
        # called as f(strategy, key, delta, weight) after each component is composed (component files)
        self.component_callbacks: List[Callable[..., None]] = []

    @property
    def mode(self) -> str:
        """``"tmc"``, ``"tme"`` or ``"tmc-seq"``. TMC and TME train identically, so a
        trained strategy can switch between them to evaluate the same components both
        ways; switching to or from TMC-Seq after training has started is refused."""
        return self._mode

    @mode.setter
    def mode(self, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}.")
        if mode == "tme" and not self.composition.keep_components:
            raise ValueError("TME ensembles every component: it needs keep_components=True.")
        if len(self.composition) and "tmc-seq" in (mode, self._mode) and mode != self._mode:
            raise ValueError("TMC-Seq components are trained differently; build a new strategy instead.")
        self._mode = mode

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def tangent_model(strategy: "SupervisedTemplate") -> TangentModel:
        """The strategy's model, checked to be a :class:`TangentModel`."""
        model = strategy.model
        if not isinstance(model, TangentModel):
            raise TypeError(
                f"TangentPlugin needs the strategy's model to be a TangentModel, got {type(model).__name__}. "
                "Wrap it: TangentModel(model, num_classes=...)."
            )
        return model

    def _component_weight(self, strategy: "SupervisedTemplate") -> float:
        if self.weighting == "samples":
            return float(len(strategy.experience.dataset))
        return 1.0

    def members(self) -> List[Tuple[float, Delta]]:
        """(weight, δ) of every model the evaluation combines."""
        members = [(w, d) for _, w, d in self.composition.iter_components()]
        if self.training_state is not None:
            members.append((self._pending_weight, self.training_state))
        return members

    def _eval_delta(self) -> Optional[Delta]:
        """The composed δ to evaluate, including a component still in training."""
        if self.training_state is not None:
            return self.composition.composed_with(self.training_state, self._pending_weight)
        return self.composition.composed() if len(self.composition) else None

    # ------------------------------------------------------------------ all-or-nothing training
    def snapshot(self, strategy: "SupervisedTemplate") -> Dict[str, Any]:
        """Everything a ``train()`` call changes in the plugin, the model's ``δ`` and the
        optimizer (a training transaction's part; the transaction itself records the clock
        and the criterion): :meth:`restore` puts it back exactly."""
        model = self.tangent_model(strategy)
        optimizer = getattr(strategy, "optimizer", None)
        return dict(
            delta=model.delta,
            composition=self.composition.snapshot(),
            mask=self.mask_state(),
            replayed=dict(self._replayed),
            replay_groups=dict(self._replay_groups),
            base_fingerprint=self.base_fingerprint,
            component_classes=dict(self.component_classes),
            in_training_exp=self.in_training_exp,
            training_delta=self.training_state,
            pending_weight=self._pending_weight,
            optimizer=optimizer,
            optimizer_state=None if optimizer is None else (
                optimizer.state if self.reset_optimizer_state else copy.deepcopy(optimizer.state)),
            optimizer_groups=None if optimizer is None else [
                {k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups],
        )

    def restore(self, strategy: "SupervisedTemplate", snap: Dict[str, Any]) -> None:
        """Put back what :meth:`snapshot` recorded (and drop the transaction of the current
        ``train()`` call, if any: there is nothing left to undo)."""
        model = self.tangent_model(strategy)
        self._transaction = None
        self.composition.restore(snap["composition"])
        self.load_mask_state(snap["mask"])
        self._replayed = dict(snap["replayed"])
        self._replay_groups = dict(snap["replay_groups"])
        self.base_fingerprint = snap["base_fingerprint"]
        self.component_classes = dict(snap["component_classes"])
        self.in_training_exp = snap["in_training_exp"]
        self.training_state = snap["training_delta"]
        self._pending_weight = snap["pending_weight"]
        if snap["optimizer"] is not None:
            strategy.optimizer = snap["optimizer"]
            strategy.optimizer.state = snap["optimizer_state"]
            for group, saved in zip(strategy.optimizer.param_groups, snap["optimizer_groups"]):
                group.update(saved)
        model.load_delta(snap["delta"])

    def rollback(self, strategy: "SupervisedTemplate") -> bool:
        """On a template that is not all or nothing itself (not an
        :class:`~avalanche_tmc.training.rollback.AllOrNothingTraining`), undo a ``train()`` call
        that did not finish (an exception, ``KeyboardInterrupt``): the strategy is left exactly
        as before the call. Returns whether there was anything to undo. The strategies of this
        package roll back for you; call it in your own ``except`` when you attach this plugin
        to another template (or wrap the call in
        :meth:`~avalanche_tmc.training.rollback.TrainingTransaction.around`)."""
        if self._transaction is None:
            return False
        transaction, self._transaction = self._transaction, None
        transaction.rollback()
        return True

    def before_training(self, strategy: "SupervisedTemplate", **kwargs: Any) -> None:
        """On a template that is not all or nothing itself, open the transaction
        :meth:`rollback` goes back to (first undoing a previous call that failed without
        :meth:`rollback`)."""
        if self._transaction is not None:
            self.rollback(strategy)
        if not isinstance(strategy, AllOrNothingTraining):
            self._transaction = TrainingTransaction(strategy)

    def after_training(self, strategy: "SupervisedTemplate", **kwargs: Any) -> None:
        """The call finished: nothing to undo any more."""
        self._transaction = None

    # ------------------------------------------------------------------ training
    def start_member(self, strategy: "SupervisedTemplate") -> None:
        """Refuse an experience id already composed; start a fresh component (zero, or
        the composed δ for TMC-Seq)."""
        model = self.tangent_model(strategy)
        check_new_experience_ids([strategy.experience], self.composition)
        self.check_base(model)
        if self.mode == "tmc-seq" and len(self.composition):
            model.load_delta(self.composition.composed())
        else:
            model.zero_delta()
        self._pending_weight = self._component_weight(strategy)

    def add_member(self, strategy: "SupervisedTemplate", key: Hashable) -> None:
        """Add the trained component to the composition."""
        model = self.tangent_model(strategy)
        if key in self.composition:
            raise KeyError(
                f"Experience {key} was already trained and composed; forget it first "
                "(strategy.forget(exp_id)) to train it again."
            )
        clock = getattr(strategy, "clock", None)
        if clock is not None and clock.train_exp_iterations == 0:
            raise ValueError(
                f"Experience {key}: no training step was taken (train_epochs={getattr(strategy, 'train_epochs', '?')}"
                f", {len(strategy.experience.dataset)} samples): its component would be δ = 0, which composed with "
                "weight > 0 only dilutes the others. Nothing was composed; train at least one epoch on a non-empty "
                "experience.")
        delta = model.delta
        self.check_base(model)
        self.composition.add(key, delta, self._pending_weight)
        self._replayed[key] = dependent_plugin_names(strategy)
        self._replay_groups[key] = replay_groups(strategy)
        self.component_classes[key] = {t: sorted(c) for t, c in experience_task_classes(strategy.experience).items()}
        for callback in self.component_callbacks:
            callback(strategy, key, delta, self._pending_weight)

    def install_component(self, model: TangentModel, key: Hashable, delta: Delta, weight: float = 1.0,
                          classes: Optional[Dict[int, List[int]]] = None) -> None:
        """Compose a component trained elsewhere (another process, a file) as if it had
        been trained here: ``delta`` under ``key`` with weight ``weight``; ``classes``
        (task label -> classes) feed the task-incremental mask. ``model`` then holds the
        composition."""
        if self.mode == "tmc-seq":
            raise ValueError("TMC-Seq components are not independent: a component trained elsewhere cannot be "
                             "added to a TMC-Seq composition.")
        if key in self.composition:
            raise KeyError(f"Experience {key} is already composed; forget it first.")
        model.check_delta(delta)
        self.check_base(model)
        self.composition.add(key, delta, weight)
        self.installed(model, {key: classes or {}})

    def installed(self, model: TangentModel, classes: Dict[Hashable, Dict[int, List[int]]]) -> None:
        """Components were added to :attr:`composition` from elsewhere (a file, another
        process): record each one's classes (task label -> classes) as if trained here and
        load the composition into ``model``."""
        self.check_base(model)
        for key, task_classes in classes.items():
            self._replayed[key] = []
            self._replay_groups[key] = {}
            self.component_classes[key] = {int(t): sorted(int(x) for x in c) for t, c in task_classes.items()}
            self.record_task_classes(self.component_classes[key])
        if len(self.composition):
            model.load_delta(self.composition.composed())

    def check_base(self, model: TangentModel) -> None:
        """Record the base point the components belong to (the first time) and refuse a
        model whose base weights or BatchNorm statistics changed since (``ValueError``):
        every component is a direction from that base, meaningless around another."""
        fingerprint = model.base_fingerprint()
        if self.base_fingerprint is None or not len(self.composition):
            self.base_fingerprint = fingerprint
        elif fingerprint != self.base_fingerprint:
            raise ValueError(
                "The wrapped network's weights or buffers changed since the components were trained (its base "
                f"fingerprint is {fingerprint[:12]}, the components belong to {self.base_fingerprint[:12]}): "
                "tangent components only mean something around the base they were trained on. Load the original "
                "pre-trained weights back (never load_state_dict other weights into a trained strategy's network).")

    # ------------------------------------------------------------------ evaluation
    def load_combination(self, strategy: "SupervisedTemplate") -> None:
        """Load the composed δ (during training: the composition as if training stopped now)."""
        model = self.tangent_model(strategy)
        delta = self._eval_delta()
        if delta is not None:
            self.check_base(model)
            model.load_delta(delta)

    def save_training_state(self, strategy: "SupervisedTemplate") -> Delta:
        """The ``δ`` of the component being trained."""
        return self.tangent_model(strategy).delta

    def load_training_state(self, strategy: "SupervisedTemplate", state: Delta) -> None:
        """Load the ``δ`` of the component being trained back into the model."""
        self.tangent_model(strategy).load_delta(state)

    def ensembles(self) -> bool:
        """TME ensembles the components' softmax outputs."""
        return self.mode == "tme"

    ensembles_softmax = ensembles

    def ensemble_output(self, strategy: "SupervisedTemplate", members: List[Tuple[float, Delta]]) -> torch.Tensor:
        """TME: the weighted softmax ensemble. It averages each member's softmax over all
        classes and the task mask selects the task's outputs afterwards, as for a single
        model; masking members first would renormalise the near-uniform outputs of
        components that never saw the task and let their noise outvote the one that did."""
        model = self.tangent_model(strategy)
        logits = [model.forward_with(strategy.mb_x, delta) for _, delta in members]
        return log_softmax_ensemble(logits, [w for w, _ in members])

    # ------------------------------------------------------------------ unlearning
    @property
    def components(self) -> "OrderedDict[Hashable, Delta]":
        """Experience id -> trained component δ (when components are kept)."""
        return self.composition.components

    def forget(self, strategy: Union["SupervisedTemplate", TangentModel], exp_id: Hashable,
               delta: Optional[Delta] = None, *, inexact: bool = False) -> None:
        """Remove experience ``exp_id`` from the composition and load the result into the
        strategy's model (``strategy``: the strategy, or just its :class:`TangentModel`,
        then its plugins are not checked).

        Refused (``ValueError``) when it would not be exact, unless ``inexact=True``: an
        experience composed after ``exp_id`` was trained with a replay or distillation
        plugin; a distillation plugin is attached (its teacher knows ``exp_id``); ``exp_id``'s
        samples sit in a replay buffer that cannot be purged. Replay buffers of Avalanche's
        ``ExperienceBalancedBuffer`` (``ReplayPlugin``'s default) are purged of ``exp_id``'s
        samples, so later experiences do not replay them."""
        if self.mode == "tmc-seq":
            raise ValueError(
                "TMC-Seq components are not independent: each δ_t started from the composition of "
                "the tasks before it, so subtracting one does not give the model without that task. "
                "Use TMCStrategy (parallel components) when you need exact forgetting."
            )
        model = strategy if isinstance(strategy, TangentModel) else self.tangent_model(strategy)
        if exp_id in self.composition:
            self.check_base(model)
        if strategy is not model:
            check_forget(exp_id, self.composition.keys, self._replayed, strategy, self._replay_groups.get(exp_id, {}),
                         inexact)
        self.composition.forget(exp_id, delta)
        if strategy is not model:
            purge_replay(strategy, self._replay_groups.get(exp_id, {}))
        self._replayed.pop(exp_id, None)
        self._replay_groups.pop(exp_id, None)
        self.component_classes.pop(exp_id, None)
        model.load_delta(self.composition.composed())
