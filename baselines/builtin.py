"""Avalanche's own continual-learning strategies, configured as the paper's baselines.

``make_builtin_strategy(name, model=...)`` returns an Avalanche ``SupervisedTemplate``
for one of :data:`BUILTIN_METHODS`, run on the same benchmark objects and the same model
(one fixed head over all classes) as TMC:

==================  =====================================================================
``naive``           ``Naive``: sequential fine-tuning (the lower bound)
``er``              ``Naive`` + ``ReplayPlugin(mem_size=300, batch_size_mem=32)``
``lwf``             ``LwF(alpha=1, temperature=2)``
``ewc``             ``EWC(ewc_lambda=1, mode="online", decay_factor=0.9)``
``der``             ``DER`` as DER++ (``mem_size=300, batch_size_mem=32, alpha=0.1, beta=0.5``)
``joint``           ``JointTraining`` of the network on all data (the paragon)
``joint-tangent``   ``JointTraining`` of ``TangentModel(model)`` with RSL and Adam (the
                    tangent paragon)
==================  =====================================================================

The non-tangent methods train with ``SGD(lr, momentum=0.9)`` and cross-entropy. Every
strategy gets a :class:`~avalanche_tmc.TaskMaskPlugin`, so task-incremental
evaluation restricts predictions to the task's classes for every baseline.
``JointTraining`` trains once on the whole stream: call ``strategy.train(train_stream)``.

Each is one :func:`baseline` entry: its builder, description, hyper-parameters and its row
of the benchmark tables together. Importing :mod:`baselines` registers each of them, and
Avalanche's ``StreamingLDA`` as ``slda``, in the library's strategy registry
(``avalanche_tmc.create_strategy(name, network, **options)``), as the library registers its own;
the benchmark registry (``benchmarks/methods/catalogue.py``) makes each a method group
(:func:`on_baseline`). This module imports neither torch nor Avalanche until a strategy is
built, so that the benchmark tables read the entries without them.
"""

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple, Union

from avalanche_tmc.training.registry import register_strategy  # standard library only

if TYPE_CHECKING:
    import torch
    from avalanche.core import SupervisedPlugin
    from avalanche.training.templates import SupervisedTemplate
    from torch import nn

__all__ = ["BUILTIN_METHODS", "DEFAULTS", "REPLAY_BUFFER", "Baseline", "baseline", "make_builtin_strategy",  # noqa: F822 (__getattr__)
           "on_baseline", "registered_baselines"]

REPLAY_BUFFER = 300
"""ER's and DER's replay buffer in samples, by default (the paper's). The rows' texts below hold
``{buffer}``, filled by :func:`benchmarks.results.files.method_info` with a run's own buffer."""

Build = Callable[..., "SupervisedTemplate"]


@dataclass(frozen=True)
class Baseline:
    """An Avalanche strategy registered as a baseline: ``build(common, hp, plugins, mem_size=,
    train_mb_size=)`` returns it from the template arguments every baseline shares
    (``common``), its own hyper-parameters (``hp``: ``defaults`` with the caller's overrides)
    and its plugins; ``tangent`` ones train a :class:`TangentModel` with RSL and Adam,
    ``joint`` ones train once on the whole stream.

    Its row of the benchmark tables: ``label``, ``memory`` (the "Inference/Memory" column),
    ``replay`` (the "Replay buffer" column); and how the runner treats it: ``cost`` (its
    training's rough relative cost), ``tuning`` (``"family"``: its family's tuned learning
    rate and epochs, ``"self"``: tuned for itself), ``task_aware`` (its training reads task
    labels; joint ones are too)."""

    name: str
    build: Build
    description: str
    defaults: Dict[str, Any]
    tangent: bool = False
    joint: bool = False
    label: str = ""
    memory: str = ""
    replay: str = "none"
    cost: int = 1
    tuning: str = "family"
    task_aware: bool = False


_BASELINES: Dict[str, Baseline] = {}
_LISTENERS: List[Callable[[Baseline], None]] = []
DEFAULTS: Dict[str, Dict[str, Any]] = {}
"""Each baseline's own hyper-parameters (override through :func:`make_builtin_strategy`'s ``**kwargs``)."""


def baseline(name: str, *, description: str, label: str, memory: str, defaults: Optional[Dict[str, Any]] = None,
             tangent: bool = False, joint: bool = False, replay: str = "none", cost: int = 1, tuning: str = "family",
             task_aware: bool = False) -> Callable[[Build], Build]:
    """Decorator: register ``build`` as the baseline ``name``, here (:func:`make_builtin_strategy`,
    :data:`BUILTIN_METHODS`, :data:`DEFAULTS`), in the library's strategy registry
    (``create_strategy(name, network, **options)``) and, with its row (``label``, ``memory``,
    ``replay``, ``cost``, ``tuning``, ``task_aware``: see :class:`Baseline`), in the benchmark
    tables (through :func:`on_baseline`): adding an Avalanche baseline is this one entry."""

    def decorator(build: Build) -> Build:
        if name in _BASELINES:
            raise ValueError(f"A baseline named {name!r} is already registered; choose another name.")
        spec = Baseline(name, build, description, dict(defaults or {}), tangent, joint, label, memory, replay,
                        int(cost), tuning, task_aware)
        register_strategy(name, family="tangent" if tangent else "non-linear", description=description)(
            _create(name))
        _BASELINES[name] = spec
        if spec.defaults:
            DEFAULTS[name] = spec.defaults
        for listener in _LISTENERS:
            listener(spec)
        return build

    return decorator


def _create(name: str) -> Build:
    def create(network: "nn.Module", **options: Any) -> "SupervisedTemplate":
        return make_builtin_strategy(name, model=network, **options)

    return create


def registered_baselines() -> Tuple[Baseline, ...]:
    """Every registered baseline, in registration order."""
    return tuple(_BASELINES.values())


def on_baseline(listener: Callable[[Baseline], None]) -> None:
    """Call ``listener(entry)`` for every registered baseline, in registration order, and for
    each one registered later (the benchmark registry makes each a method group this way)."""
    _LISTENERS.append(listener)
    for spec in registered_baselines():
        listener(spec)


def __getattr__(name: str) -> Any:
    if name == "BUILTIN_METHODS":  # the registered baselines' names, read when asked (later entries too)
        return tuple(_BASELINES)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@lru_cache(maxsize=None)
def _joint_task_mask_plugin() -> type:
    """:class:`TaskMaskPlugin` for ``JointTraining`` (made when first needed: this module
    imports no Avalanche), which fires ``before_training_exp`` for the first experience only
    (it trains on the concatenation of all of them): it records the task labels and classes
    of every experience of the joint training set."""
    from avalanche_tmc.training.plugins.task_mask import TaskMaskPlugin

    class _JointTaskMaskPlugin(TaskMaskPlugin):
        def before_training_exp(self, strategy, **kwargs) -> None:
            # JointTraining keeps the experiences of train() in `_experiences` (no public name)
            for experience in getattr(strategy, "_experiences", None) or [strategy.experience]:
                self.record_training_experience(experience)

    return _JointTaskMaskPlugin


def make_builtin_strategy(
    name: str,
    *,
    model: "nn.Module",
    lr: float = 0.01,
    train_mb_size: int = 32,
    train_epochs: int = 1,
    eval_mb_size: Optional[int] = None,
    device: Union[str, "torch.device"] = "cpu",
    plugins: Optional[List["SupervisedPlugin"]] = None,
    mem_size: int = REPLAY_BUFFER,
    beta: float = 25.0,
    **kwargs,
) -> "SupervisedTemplate":
    """Build Avalanche's strategy ``name`` (one of :data:`BUILTIN_METHODS`).

    :param model: the pre-trained network with one fixed head over all classes. It is
        trained in place (``joint-tangent`` wraps it in a :class:`TangentModel`, which
        freezes it); pass a copy to reuse it.
    :param lr: learning rate: of ``SGD(momentum=0.9)``, or of ``Adam`` on the tangent
        parameters for ``joint-tangent``.
    :param mem_size: replay memory of ``er`` and ``der`` (300, the paper's).
    :param beta: RSL target of ``joint-tangent`` (25 class/task-incremental, 5 data-incremental).
    :param kwargs: method hyper-parameters overriding :data:`DEFAULTS` (``batch_size_mem``
        for er/der; ``lwf_alpha``, ``temperature`` for lwf; ``ewc_lambda``,
        ``decay_factor`` for ewc; ``der_alpha``, ``der_beta`` for der; ``linearize``,
        ``start_at`` for joint-tangent), ``optimizer``/``criterion`` to replace the
        defaults, ``evaluator`` (Avalanche's ``default_evaluator`` if not given) and any
        other Avalanche template argument (``eval_every``, ...).
    """
    if name not in _BASELINES:
        raise ValueError(f"Unknown method {name!r}; valid names are {', '.join(_BASELINES)}.")
    import torch
    from avalanche.training.plugins.evaluation import default_evaluator
    from torch import nn

    from avalanche_tmc.tangent import TangentModel
    from avalanche_tmc.training.losses import RescaledSquareLoss
    from avalanche_tmc.training.plugins.task_mask import TaskMaskPlugin

    spec = _BASELINES[name]
    hp = dict(spec.defaults)
    for key in list(hp):
        if key in kwargs:
            hp[key] = kwargs.pop(key)
    optimizer = kwargs.pop("optimizer", None)
    criterion = kwargs.pop("criterion", None)
    evaluator = kwargs.pop("evaluator", default_evaluator)

    plugins = list(plugins or [])
    plugins.append(_joint_task_mask_plugin()() if spec.joint else TaskMaskPlugin())

    if spec.tangent:
        if not isinstance(model, TangentModel):
            model = TangentModel(model, linearize=hp["linearize"], start_at=hp["start_at"])
        optimizer = optimizer or torch.optim.Adam(model.delta_parameters(), lr=lr)
        criterion = criterion or RescaledSquareLoss(alpha=1.0, beta=beta)
    else:
        optimizer = optimizer or torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
        criterion = criterion or nn.CrossEntropyLoss()

    common = dict(
        model=model,
        optimizer=optimizer,
        criterion=criterion,
        train_mb_size=train_mb_size,
        train_epochs=train_epochs,
        eval_mb_size=eval_mb_size,
        device=device,
        evaluator=evaluator,
        **kwargs,
    )
    return spec.build(common, hp, plugins, mem_size=mem_size, train_mb_size=train_mb_size)


# Each builder imports its Avalanche strategy when called (see the module's docstring). The entries'
# order is the benchmark tables': the paragons (joint) close them.
_BUFFER = "O(1) + buffer {buffer}"
_PARAGON = "all data at once (paragon)"


@baseline("naive", description="Avalanche's Naive: sequential fine-tuning (the lower bound)", label="Naive",
          memory="O(1)", cost=2)
def _naive(common: Dict[str, Any], hp: Dict[str, Any], plugins: List["SupervisedPlugin"], **_: Any):
    from avalanche.training.supervised import Naive

    return Naive(plugins=plugins, **common)


@baseline("er", description="Avalanche's Naive with a ReplayPlugin (experience replay)",
          defaults={"batch_size_mem": 32}, label="ER", memory=_BUFFER, replay="{buffer} samples", cost=5,
          tuning="self")
def _er(common: Dict[str, Any], hp: Dict[str, Any], plugins: List["SupervisedPlugin"], *, mem_size: int,
        train_mb_size: int):
    from avalanche.training.plugins import ReplayPlugin
    from avalanche.training.supervised import Naive

    replay = ReplayPlugin(mem_size=mem_size, batch_size=train_mb_size, batch_size_mem=hp["batch_size_mem"])
    return Naive(plugins=[replay, *plugins], **common)


@baseline("lwf", description="Avalanche's LwF (learning without forgetting)",
          defaults={"lwf_alpha": 1.0, "temperature": 2.0}, label="LwF", memory="O(1)", cost=5, task_aware=True)
def _lwf(common: Dict[str, Any], hp: Dict[str, Any], plugins: List["SupervisedPlugin"], **_: Any):
    from avalanche.training.supervised import LwF

    return LwF(alpha=hp["lwf_alpha"], temperature=hp["temperature"], plugins=plugins, **common)


@baseline("ewc", description="Avalanche's online EWC", defaults={"ewc_lambda": 1.0, "decay_factor": 0.9},
          label="EWC", memory="O(1), 2x params", cost=5)
def _ewc(common: Dict[str, Any], hp: Dict[str, Any], plugins: List["SupervisedPlugin"], **_: Any):
    from avalanche.training.supervised import EWC

    return EWC(ewc_lambda=hp["ewc_lambda"], mode="online", decay_factor=hp["decay_factor"], plugins=plugins,
               **common)


@baseline("der", description="Avalanche's DER (DER++)",
          defaults={"batch_size_mem": 32, "der_alpha": 0.1, "der_beta": 0.5}, label="DER", memory=_BUFFER,
          replay="{buffer} samples + logits", cost=6, tuning="self")
def _der(common: Dict[str, Any], hp: Dict[str, Any], plugins: List["SupervisedPlugin"], *, mem_size: int,
         **_: Any):
    from avalanche.training.supervised import DER

    return DER(mem_size=mem_size, batch_size_mem=hp["batch_size_mem"], alpha=hp["der_alpha"], beta=hp["der_beta"],
               plugins=plugins, **common)


@baseline("joint", description="Avalanche's JointTraining of the network on all data (the paragon)", joint=True,
          label="Joint", memory="O(1)", replay=_PARAGON, cost=3, tuning="self")
def _joint(common: Dict[str, Any], hp: Dict[str, Any], plugins: List["SupervisedPlugin"], **_: Any):
    from avalanche.training.supervised import JointTraining

    return JointTraining(plugins=plugins, **common)


baseline("joint-tangent", description="JointTraining of the tangent model with RSL and Adam (the tangent paragon)",
         defaults={"linearize": "all", "start_at": None}, tangent=True, joint=True, label="Joint-Tangent",
         memory="O(1)", replay=_PARAGON, cost=3, tuning="self")(_joint)


@register_strategy("slda", family="training-free", description="Avalanche's StreamingLDA on the penultimate features")
def _slda(network: "nn.Module", *, num_classes: Optional[int] = None, shrinkage_param: float = 1e-4,
          **options) -> "SupervisedTemplate":
    from avalanche.training.supervised import StreamingLDA
    from torch import nn

    from avalanche_tmc.models.training_free import check_num_classes, penultimate
    from avalanche_tmc.tangent import find_head
    from avalanche_tmc.training.plugins.task_mask import TaskMaskPlugin

    head = network.get_submodule(find_head(network))
    return StreamingLDA(slda_model=penultimate(network), criterion=nn.CrossEntropyLoss(), input_size=head.in_features,
                        num_classes=head.out_features if num_classes is None else check_num_classes(num_classes),
                        shrinkage_param=shrinkage_param,
                        plugins=[TaskMaskPlugin(), *options.pop("plugins", [])], **options)
