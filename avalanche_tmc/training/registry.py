"""The strategy registry: one name per continual-learning strategy, one place to add one.

Every strategy a user, the command line or the benchmark runner builds by name is
registered here with :func:`register_strategy`, and built with :func:`create_strategy`
(``list_strategies`` lists them). The library registers its own below (the tangent
strategies and the training-free heads); ``baselines`` registers Avalanche's
strategies the same way when it is imported (Naive, ER, LwF, EWC, DER, joint training,
SLDA, the composition baselines). Adding a strategy is one entry::

    @register_strategy("my-method", family="tangent", description="what it trains")
    def _my_method(network, **options):
        return MyStrategy(model=TangentModel(network), **options)

Nothing heavy is imported until a strategy is built (the command line lists the names
before it imports Avalanche). A builder takes the pre-trained network (with its head over all classes) and keyword
options (the strategy's own arguments and Avalanche's template arguments) and returns a
fresh ``SupervisedTemplate``.
"""

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

if TYPE_CHECKING:
    from avalanche.training.templates import SupervisedTemplate
    from torch import nn

__all__ = ["FAMILIES", "StrategySpec", "register_strategy", "create_strategy", "list_strategies", "strategy_spec"]

FAMILIES = ("tangent", "non-linear", "training-free")
"""What a strategy trains: tangent components (δ, Adam on the RSL), the network itself
(SGD on cross-entropy), or nothing (training-free: statistics of frozen features)."""

Builder = Callable[..., "SupervisedTemplate"]


@dataclass(frozen=True)
class StrategySpec:
    """A registered strategy: its name, its builder, its family (:data:`FAMILIES`), whether
    its components can be written as component files (``avalanche-tmc train-component``)
    and a one-line description."""

    name: str
    build: Builder
    family: str
    description: str
    component_files: bool = False


_STRATEGIES: Dict[str, StrategySpec] = {}


def register_strategy(name: str, *, family: str, description: str,
                      component_files: bool = False) -> Callable[[Builder], Builder]:
    """Decorator: register ``builder(network, **options) -> SupervisedTemplate`` as ``name``.

    :raises ValueError: the name is taken, or the family is not one of :data:`FAMILIES`.
    """
    if family not in FAMILIES:
        raise ValueError(f"Strategy {name!r}: family {family!r} is not one of {FAMILIES}.")

    def decorator(build: Builder) -> Builder:
        if name in _STRATEGIES:
            raise ValueError(f"A strategy named {name!r} is already registered; choose another name.")
        _STRATEGIES[name] = StrategySpec(name, build, family, description, component_files)
        return build

    return decorator


def strategy_spec(name: str) -> StrategySpec:
    """The registered strategy ``name``.

    :raises KeyError: no strategy has that name (the message lists the registered ones).
    """
    if name not in _STRATEGIES:
        hint = "" if "naive" in _STRATEGIES else " (Avalanche's own strategies are registered by `import baselines`)"
        raise KeyError(f"No strategy named {name!r}; registered: {', '.join(_STRATEGIES)}{hint}.")
    return _STRATEGIES[name]


def create_strategy(name: str, network: "nn.Module", **options: Any) -> "SupervisedTemplate":
    """A fresh strategy ``name`` on ``network`` (trained or wrapped in place: pass a copy to
    reuse it); ``options`` are the builder's (see :func:`list_strategies` for the names). A
    ``device`` this machine lacks is refused before anything is built, for every strategy
    (Avalanche's own failed deep inside with "Torch not compiled with CUDA enabled")."""
    spec = strategy_spec(name)
    if "device" in options:
        from .devices import check_device

        check_device(options["device"])
    return spec.build(network, **options)


def list_strategies(family: Optional[str] = None, *, component_files: Optional[bool] = None) -> Tuple[str, ...]:
    """The registered names, in registration order; only those of ``family`` and/or whose
    ``component_files`` flag matches, when given."""
    return tuple(s.name for s in _STRATEGIES.values()
                 if (family is None or s.family == family)
                 and (component_files is None or s.component_files == component_files))


# ------------------------------------------------------------------ the library's strategies


def _tangent(strategy: str, linearize: str) -> Builder:
    def build(network: "nn.Module", *, linearize: Any = linearize, start_at: Optional[str] = None,
              num_classes: Optional[int] = None, head: Optional[str] = None, new_head: bool = False,
              head_seed: int = 0, implementation: str = "auto", channels_last: bool = False,
              **options: Any) -> "SupervisedTemplate":
        """``TangentModel``'s options pass through: ``head``, ``head_seed``, ``implementation``,
        ``channels_last``; ``num_classes`` is the data's class count, checked against the
        head's output size (refused if they differ), or, with ``new_head=True``, the size of
        a new seeded head that replaces it (``TangentModel(network, num_classes)``)."""
        from ..tangent import TangentModel
        from .strategies import tangent

        if new_head and num_classes is None:
            raise ValueError("new_head=True replaces the head by one of num_classes outputs: give num_classes.")
        if num_classes is not None and (isinstance(num_classes, bool) or not isinstance(num_classes, int)):
            raise TypeError(f"num_classes={num_classes!r} ({type(num_classes).__name__}): give the number of classes "
                            f"as an int, e.g. num_classes=10.")
        if num_classes is not None and not new_head:
            _check_head_size(network, head, num_classes)
        model = TangentModel(network, num_classes if new_head else None, head=head, linearize=linearize,
                             start_at=start_at, head_seed=head_seed, implementation=implementation,
                             channels_last=channels_last)
        return getattr(tangent, strategy)(model=model, **options)

    return build


def _check_head_size(network: "nn.Module", head: Optional[str], num_classes: int) -> None:
    """Refuse a network whose head (``head``, else the output layer) has another output size
    than ``num_classes`` (a 1000-way ImageNet head on 10 classes would train silently)."""
    from ..tangent import find_head

    name = head if head is not None else find_head(network)
    outputs = getattr(network.get_submodule(name), "out_features", None)
    if outputs != num_classes:
        raise ValueError(f"The network's head {name!r} has {outputs} outputs, but num_classes={num_classes}: give a "
                         f"network whose head has {num_classes} outputs, or pass new_head=True to replace it by a new "
                         f"seeded head of {num_classes} outputs (head_seed).")


def _statistics(head: str, projection: bool) -> Builder:
    def build(network: "nn.Module", *, num_classes: Optional[int] = None, seed: int = 0,
              projection_dim: int = 2000, **options: Any) -> "SupervisedTemplate":
        from ..models.training_free import TrainingFreeClassifier, penultimate
        from ..tangent import find_head
        from .strategies.training_free import TrainingFreeStrategy

        classes = int(network.get_submodule(find_head(network)).out_features) if num_classes is None else num_classes
        model = TrainingFreeClassifier(penultimate(network), classes, head=head, seed=seed,
                                   projection_dim=projection_dim if projection else None)
        return TrainingFreeStrategy(model=model, **options)

    return build


def _adapt_then_compose(network: "nn.Module", **options: Any) -> "SupervisedTemplate":
    from .strategies.adapt_then_compose import AdaptThenComposeStrategy

    return AdaptThenComposeStrategy(network=network, **options)


_LIBRARY: List[Tuple[str, str, str, bool, Builder]] = [
    ("tmc", "tangent", "TMC: one tangent component per experience, composed by their running mean", True,
     _tangent("TMCStrategy", "all")),
    ("tme", "tangent", "TME: the same components, evaluated as their softmax ensemble", False,
     _tangent("TMEStrategy", "all")),
    ("tmc-seq", "tangent", "TMC-Seq: each component starts from the previous composition", False,
     _tangent("TMCSeqStrategy", "all")),
    ("tmc-fc", "tangent", "TMC with the head alone linearized", True, _tangent("TMCStrategy", "head")),
    ("stats-ridge", "training-free", "a ridge head on the frozen penultimate features", True,
     _statistics("ridge", projection=False)),
    ("ranpac", "training-free", "RanPAC-style: a ridge head on random ReLU features of the frozen features", True,
     _statistics("ridge", projection=True)),
    ("ncm", "training-free", "nearest class mean on the frozen penultimate features", True,
     _statistics("ncm", projection=False)),
    ("adapt-then-compose", "training-free", "adapt the features once (first session), then a training-free head",
     False, _adapt_then_compose),
]
for _name, _family, _description, _files, _build in _LIBRARY:
    register_strategy(_name, family=_family, description=_description, component_files=_files)(_build)
