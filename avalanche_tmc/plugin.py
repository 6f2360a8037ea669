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
:class:`~avalanche_tmc.tangent.TangentModel`; :mod:`avalanche_tmc.strategies` does that.
"""

import copy
from collections import OrderedDict, defaultdict
from typing import TYPE_CHECKING, Any, Callable, Dict, Hashable, List, Optional, Set, Tuple

import torch
from avalanche.core import SupervisedPlugin

from .composition import DeltaComposition, non_finite_names
from .ensemble import class_mask, log_softmax_ensemble, mask_logits, nll_of_log_probs
from .safety import check_forget, check_new_experience_ids, dependent_plugin_names, purge_replay, replay_groups
from .tangent import Delta, TangentModel

__all__ = [
    "MODES", "WEIGHTINGS", "experience_task_classes", "batch_task_labels", "DivergenceError", "TaskMaskPlugin",
    "CompositionPlugin", "TangentPlugin",
]

if TYPE_CHECKING:
    from avalanche.training.templates import SupervisedTemplate

MODES = ("tmc", "tme", "tmc-seq")
WEIGHTINGS = ("mean", "samples")


def _labels(values) -> torch.Tensor:
    """A sequence of integer labels (list, tensor, Avalanche ``DataAttribute``) as a tensor."""
    values = getattr(values, "data", values)
    if isinstance(values, torch.Tensor):
        return values.reshape(-1).long()
    return torch.as_tensor([int(v) for v in values], dtype=torch.long)


def _single_task_label(experience) -> Optional[int]:
    """The experience's one task label; 0 when it carries none; None when it has several."""
    try:
        task = getattr(experience, "task_label", None)
    except (ValueError, AssertionError):  # a multi-task experience refuses ``task_label``
        return None
    if task is not None:
        return int(task)
    labels = getattr(experience, "task_labels", None)
    if labels is not None:
        return int(labels[0]) if len(labels) == 1 else None
    return 0


def experience_task_classes(experience) -> Dict[int, Set[int]]:
    """Task label -> the classes of that task in ``experience``.

    Works with every Avalanche 0.6 benchmark generator: it uses the experience's
    ``classes_in_this_experience`` when it has it (``nc_benchmark``, ``ni_benchmark``,
    ``class_incremental_benchmark``) and otherwise the dataset's ``targets`` (and
    ``targets_task_labels``) (``new_instances_benchmark``, ``benchmark_from_datasets``,
    ``task_incremental_benchmark``, ``with_task_labels``). Experiences without task
    labels are task 0.
    """
    task = _single_task_label(experience)
    classes = getattr(experience, "classes_in_this_experience", None)
    if classes is not None and task is not None:
        return {task: {int(c) for c in classes}}
    dataset = experience.dataset
    targets = getattr(dataset, "targets", None)
    if targets is None:
        raise TypeError(
            f"Cannot tell the classes of experience {getattr(experience, 'current_experience', '?')}: it has no "
            "`classes_in_this_experience` and its dataset no `targets`. Build the benchmark from classification "
            "datasets (avalanche.benchmarks.utils.as_classification_dataset, or a dataset with a `targets` list)."
        )
    targets = _labels(targets)
    task_targets = getattr(dataset, "targets_task_labels", None)
    tasks = _labels(task_targets) if task_targets is not None else torch.full_like(targets, 0 if task is None else task)
    result: Dict[int, Set[int]] = {}
    for t in tasks.unique().tolist():
        result[int(t)] = set(targets[tasks == t].unique().tolist())
    return result


def batch_task_labels(strategy: "SupervisedTemplate") -> torch.Tensor:
    """Task label of every sample of the current minibatch: the batch's own (third
    element) when the dataset has task labels, else the experience's (0 if none)."""
    mbatch = strategy.mbatch
    if mbatch is not None and len(mbatch) >= 3:
        return strategy.mb_task_id
    task = _single_task_label(strategy.experience) if strategy.experience is not None else 0
    return torch.full((len(strategy.mb_x),), 0 if task is None else task, dtype=torch.long)


class DivergenceError(RuntimeError):
    """Training produced a non-finite loss or ``δ``: the experience is stopped and nothing
    is composed (the strategy is left as before the ``train()`` call)."""


def _experience_id(strategy: "SupervisedTemplate") -> Any:
    experience = getattr(strategy, "experience", None)
    return getattr(experience, "current_experience", None)


def _training_position(strategy: "SupervisedTemplate") -> str:
    """``"iteration i (epoch e)"`` of the current experience, 1-based."""
    clock = getattr(strategy, "clock", None)
    if clock is None:
        return "an unknown iteration"
    return f"iteration {clock.train_exp_iterations + 1} (epoch {clock.train_exp_epochs + 1})"


class TaskMaskPlugin(SupervisedPlugin, supports_distributed=True):
    """Task-incremental evaluation for any strategy: each sample's prediction is
    restricted to the classes of its task (the task label is known at test time).

    What it is for: a fair task-IL comparison of models with one fixed head over all
    classes (TMC and the baselines alike). It records which classes each task label
    has (from training and evaluation experiences) and sets the other logits to
    ``-inf`` after every evaluation forward.

    :param task_incremental: ``True``/``False`` forces masking on/off; ``None``
        (default) masks when training has seen more than one task label.
    """

    def __init__(self, task_incremental: Optional[bool] = None):
        super().__init__()
        self.task_incremental = task_incremental
        self.task_classes: Dict[int, Set[int]] = defaultdict(set)
        self._train_task_labels: Set[int] = set()
        self._saved_criterion = None

    def evaluate_with_nll(self, strategy: "SupervisedTemplate") -> None:
        """For a softmax ensemble's log-probabilities: evaluate the loss as NLL until
        :meth:`restore_criterion` (a square loss on log-probabilities means nothing)."""
        self._saved_criterion = strategy._criterion
        strategy._criterion = nll_of_log_probs

    def restore_criterion(self, strategy: "SupervisedTemplate") -> None:
        """Put back the criterion replaced by :meth:`evaluate_with_nll` (if it was)."""
        if self._saved_criterion is not None:
            strategy._criterion = self._saved_criterion
            self._saved_criterion = None

    def mask_state(self) -> Dict[str, Any]:
        """The recorded task labels and classes (and a replaced criterion), for :meth:`load_mask_state`."""
        return dict(task_classes={k: set(v) for k, v in self.task_classes.items()},
                    train_task_labels=set(self._train_task_labels), saved_criterion=self._saved_criterion)

    def load_mask_state(self, state: Dict[str, Any]) -> None:
        """Go back exactly to a :meth:`mask_state`."""
        self.task_classes = defaultdict(set, {k: set(v) for k, v in state["task_classes"].items()})
        self._train_task_labels = set(state["train_task_labels"])
        self._saved_criterion = state["saved_criterion"]

    def _record_classes(self, experience) -> Set[int]:
        """Record the classes of each task of ``experience``; returns its task labels."""
        per_task = experience_task_classes(experience)
        for task, classes in per_task.items():
            self.task_classes[task].update(classes)
        return set(per_task)

    def record_training_experience(self, experience) -> None:
        """Remember the task labels and classes of a training experience (done for you
        before each one; call it for experiences trained without that callback, e.g. all
        but the first of ``JointTraining``)."""
        self._train_task_labels.update(self._record_classes(experience))

    def record_task_classes(self, classes: Dict[int, Any]) -> None:
        """Record trained task labels and their classes known without an experience (a
        component trained elsewhere: its file says which)."""
        for task, task_classes in classes.items():
            self.task_classes[int(task)].update(int(c) for c in task_classes)
            self._train_task_labels.add(int(task))

    def uses_task_mask(self) -> bool:
        """Whether evaluation restricts predictions to the task's classes."""
        if self.task_incremental is not None:
            return self.task_incremental
        return len(self._train_task_labels) > 1

    def eval_mask(self, strategy: "SupervisedTemplate") -> Optional[torch.Tensor]:
        """(batch, classes) mask of the allowed classes of the current minibatch, or None."""
        if not self.uses_task_mask():
            return None
        output = strategy.mb_output
        return class_mask(batch_task_labels(strategy).to(output.device), self.task_classes, output.shape[1])

    def before_training_exp(self, strategy: "SupervisedTemplate", **kwargs) -> None:
        """Remember the experience's task label and classes."""
        self.record_training_experience(strategy.experience)

    def before_eval_exp(self, strategy: "SupervisedTemplate", **kwargs) -> None:
        """Learn the class set of the evaluated task (task identity is given at test time)."""
        self._record_classes(strategy.experience)

    def after_eval_forward(self, strategy: "SupervisedTemplate", **kwargs) -> None:
        """Mask the logits outside the sample's task."""
        mask = self.eval_mask(strategy)
        if mask is not None:
            strategy.mb_output = mask_logits(strategy.mb_output, mask)


class CompositionPlugin(TaskMaskPlugin, supports_distributed=True):
    """The skeleton shared by the plugins that train one *member* per experience from a
    common starting point and evaluate a combination of the members (TMC's tangent
    components, the baselines' independent fine-tunes).

    It drives Avalanche's callbacks; a subclass fills in the named hooks:

    * :meth:`start_member` (before an experience): load the member's starting point;
      then the optimizer state is reset (``reset_optimizer_state``) and the experience's
      task classes recorded;
    * :meth:`add_member` (after it): store the trained member under the experience id;
      then :meth:`load_combination` puts the combined model in place;
    * :meth:`members`: what the evaluation combines (with :attr:`training_state`, the
      member being trained, during periodic evaluation);
    * :meth:`save_training_state` / :meth:`load_training_state`: set the member being
      trained aside during such an evaluation and put it back afterwards;
    * :meth:`ensembles` / :meth:`ensemble_output`: whether evaluation replaces the model's
      output by an ensemble of the members, and that ensemble's output
      (:meth:`ensembles_softmax`: it is log-probabilities, so the loss becomes NLL).

    :attr:`in_training_exp` is True between the two training callbacks of an experience.
    """

    def __init__(self, task_incremental: Optional[bool] = None, reset_optimizer_state: bool = True):
        super().__init__(task_incremental)
        self.reset_optimizer_state = reset_optimizer_state
        self.in_training_exp = False
        self.training_state: Any = None

    # ------------------------------------------------------------------ hooks
    def start_member(self, strategy: "SupervisedTemplate") -> None:
        """Load the starting point of the member about to be trained."""
        raise NotImplementedError

    def add_member(self, strategy: "SupervisedTemplate", key: Hashable) -> None:
        """Store the member just trained (the model's current state) under ``key``."""
        raise NotImplementedError

    def members(self) -> List[Any]:
        """The members the evaluation combines, the one in training included."""
        raise NotImplementedError

    def load_combination(self, strategy: "SupervisedTemplate") -> None:
        """Load the combination of :meth:`members` into the model (nothing when there are none)."""
        raise NotImplementedError

    def save_training_state(self, strategy: "SupervisedTemplate") -> Any:
        """The state of the member being trained, to evaluate as if training stopped now."""
        raise NotImplementedError

    def load_training_state(self, strategy: "SupervisedTemplate", state: Any) -> None:
        """Put back what :meth:`save_training_state` returned."""
        raise NotImplementedError

    def ensembles(self) -> bool:
        """Whether evaluation replaces the model's output by an ensemble of the members."""
        return False

    def ensembles_softmax(self) -> bool:
        """Whether that ensemble outputs log-probabilities (evaluated with NLL)."""
        return False

    def ensemble_output(self, strategy: "SupervisedTemplate", members: List[Any]) -> torch.Tensor:
        """The ensemble's output for the current minibatch (before task masking)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ training
    def before_training_exp(self, strategy: "SupervisedTemplate", **kwargs) -> None:
        """Start a new member from its starting point, with a fresh optimizer state."""
        self.start_member(strategy)
        if self.reset_optimizer_state:
            strategy.optimizer.state = defaultdict(dict)
        super().before_training_exp(strategy, **kwargs)
        self.in_training_exp = True

    def after_training_exp(self, strategy: "SupervisedTemplate", **kwargs) -> None:
        """Store the trained member; the model then holds the combination."""
        self.add_member(strategy, strategy.experience.current_experience)
        self.in_training_exp = False
        self.load_combination(strategy)

    # ------------------------------------------------------------------ evaluation
    def before_eval(self, strategy: "SupervisedTemplate", **kwargs) -> None:
        """Load the combination (during training: including the member being trained,
        set aside to be put back); a softmax ensemble evaluates its loss as NLL."""
        if self.in_training_exp:
            self.training_state = self.save_training_state(strategy)
        self.load_combination(strategy)
        if self.ensembles_softmax() and self.members():
            self.evaluate_with_nll(strategy)

    def after_eval_forward(self, strategy: "SupervisedTemplate", **kwargs) -> None:
        """Ensembles: replace the output by the ensemble's; then (task-IL) restrict it to
        the task's classes."""
        members = self.members() if self.ensembles() else []
        if not members:
            super().after_eval_forward(strategy, **kwargs)
            return
        strategy.mb_output = mask_logits(self.ensemble_output(strategy, members), self.eval_mask(strategy))

    def after_eval(self, strategy: "SupervisedTemplate", **kwargs) -> None:
        """Restore the criterion and, during training, the member being trained."""
        self.restore_criterion(strategy)
        if self.training_state is not None:
            self.load_training_state(strategy, self.training_state)
            self.training_state = None


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
        self._snapshot: Optional[Dict[str, Any]] = None
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

    # ------------------------------------------------------------------ failure safety
    def snapshot(self, strategy: "SupervisedTemplate") -> Dict[str, Any]:
        """Everything a ``train()`` call changes in the plugin, the model's ``δ``, the
        optimizer and the clock: :meth:`restore` puts it back exactly."""
        model = self.tangent_model(strategy)
        optimizer = getattr(strategy, "optimizer", None)
        clock = getattr(strategy, "clock", None)
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
            criterion=getattr(strategy, "_criterion", None),
            optimizer=optimizer,
            optimizer_state=None if optimizer is None else (
                optimizer.state if self.reset_optimizer_state else copy.deepcopy(optimizer.state)),
            optimizer_groups=None if optimizer is None else [
                {k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups],
            clock=None if clock is None else dict(vars(clock)),
        )

    def restore(self, strategy: "SupervisedTemplate", snap: Dict[str, Any]) -> None:
        """Put back what :meth:`snapshot` recorded (and drop the rollback point of the
        current ``train()`` call, if any: there is nothing left to undo)."""
        model = self.tangent_model(strategy)
        self._snapshot = None
        self.composition.restore(snap["composition"])
        self.load_mask_state(snap["mask"])
        self._replayed = dict(snap["replayed"])
        self._replay_groups = dict(snap["replay_groups"])
        self.base_fingerprint = snap["base_fingerprint"]
        self.component_classes = dict(snap["component_classes"])
        self.in_training_exp = snap["in_training_exp"]
        self.training_state = snap["training_delta"]
        self._pending_weight = snap["pending_weight"]
        if snap["criterion"] is not None:
            strategy._criterion = snap["criterion"]
        if snap["optimizer"] is not None:
            strategy.optimizer = snap["optimizer"]
            strategy.optimizer.state = snap["optimizer_state"]
            for group, saved in zip(strategy.optimizer.param_groups, snap["optimizer_groups"]):
                group.update(saved)
        if snap["clock"] is not None:
            vars(strategy.clock).update(snap["clock"])
        model.load_delta(snap["delta"])

    def rollback(self, strategy: "SupervisedTemplate") -> bool:
        """Undo a ``train()`` call that did not finish (an exception, ``KeyboardInterrupt``):
        the strategy is left exactly as before the call. Returns whether there was
        anything to undo. The tangent strategies call it for you; call it in your own
        ``except`` when you attach this plugin to another template."""
        if self._snapshot is None:
            return False
        snap, self._snapshot = self._snapshot, None
        self.restore(strategy, snap)
        return True

    def before_training(self, strategy: "SupervisedTemplate", **kwargs) -> None:
        """Record the state to go back to if this ``train()`` call fails (first undoing a
        previous call that failed without :meth:`rollback`)."""
        if self._snapshot is not None:
            self.rollback(strategy)
        self._snapshot = self.snapshot(strategy)

    def after_training(self, strategy: "SupervisedTemplate", **kwargs) -> None:
        """The call finished: nothing to undo any more."""
        self._snapshot = None

    def _stop_diverged(self, strategy: "SupervisedTemplate", what: str) -> None:
        exp_id = _experience_id(strategy)
        position = _training_position(strategy)
        lr = None
        optimizer = getattr(strategy, "optimizer", None)
        if optimizer is not None and optimizer.param_groups:
            lr = optimizer.param_groups[0].get("lr")
        self.rollback(strategy)
        raise DivergenceError(
            f"Experience {exp_id}: training diverged at {position}: {what}. Nothing was composed; the "
            f"strategy is as before this train() call. Lower the learning rate (lr={lr}) or check the data "
            "for NaN/inf."
        )

    def before_update(self, strategy: "SupervisedTemplate", **kwargs) -> None:
        """Stop on a non-finite loss before the optimizer step spreads it into ``δ``."""
        loss = getattr(strategy, "loss", None)
        if self.in_training_exp and isinstance(loss, torch.Tensor) and not bool(torch.isfinite(loss.detach()).all()):
            self._stop_diverged(strategy, f"the loss is {loss.detach().float().sum().item()}")

    def after_update(self, strategy: "SupervisedTemplate", **kwargs) -> None:
        """Stop when the optimizer step made ``δ`` non-finite."""
        if not self.in_training_exp:
            return
        model = self.tangent_model(strategy)
        if bool(torch.stack([torch.isfinite(p).all() for p in model.delta_params]).all()):
            return
        bad = [n for n, p in zip(model.linearized_names, model.delta_params) if not bool(torch.isfinite(p).all())]
        self._stop_diverged(strategy, f"δ holds NaN/inf in {bad[:5]}")

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
        if non_finite_names(delta):
            self._stop_diverged(strategy, f"δ holds NaN/inf in {non_finite_names(delta)[:5]}")
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
        return self.tangent_model(strategy).delta

    def load_training_state(self, strategy: "SupervisedTemplate", state: Delta) -> None:
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

    def forget(self, strategy, exp_id: Hashable, delta: Optional[Delta] = None, *, inexact: bool = False) -> None:
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
