"""What the method registry's builders (:mod:`benchmarks.methods.catalogue`) share: the network a
method trains (a copy with a new seeded head; for tangent methods, the base point with
BatchNorm re-estimated), where linearization starts, the paper's other β, the decay on δ as
strategy arguments or a plugin, and the first-session adaptation candidates of the
``ranpac-layer`` and ``adapt-ridge`` rows; and what ``build_strategy`` gives every
strategy: the learning-rate schedule, fused optimizer kernels, autocast dtypes."""

import copy
from typing import Any, Dict, List, Optional, Sequence

import torch
from torch import nn

from avalanche_tmc import Adaptation, find_head, reestimate_batchnorm, replace_head
from benchmarks.methods.train_config import TrainConfig

__all__ = ["tangent_base", "with_new_head", "other_beta", "linearize_start", "delta_decay_plugin", "decay_arguments",
           "feature_layers", "layer_candidates", "adaptation_candidates", "decay_milestones", "schedule_milestones",
           "use_fused_kernels", "AMP_DTYPES"]


def tangent_base(top: nn.Module, cfg: TrainConfig) -> nn.Module:
    """The network a tangent method linearizes: ``top`` with a new head and, when
    ``cfg.bn_batches`` is set, its BatchNorm statistics re-estimated on those batches."""
    net = with_new_head(top, cfg)
    if cfg.bn_batches is not None:
        reestimate_batchnorm(net, cfg.bn_batches)
    return net


def with_new_head(top: nn.Module, cfg: TrainConfig) -> nn.Module:
    """A copy of ``top`` with a new ``cfg.num_classes`` head seeded by ``cfg.head_seed``
    (by default the run's seed)."""
    return replace_head(copy.deepcopy(top), cfg.num_classes, seed=cfg.seed if cfg.head_seed is None else cfg.head_seed)


def other_beta(beta: float) -> float:
    """The paper's other RSL β: 5 (data-IL) for 25 (class/task-IL) and 25 for 5; for any
    other value, the nearer of the two is taken as the scenario's."""
    return 5.0 if abs(beta - 25.0) < abs(beta - 5.0) else 25.0


# The first module after the stem, per layout (checked in this order): torchvision ResNets,
# timm EfficientNets/MobileNets and ViTs, torchvision MobileNets/EfficientNets.
_AFTER_STEM = ("layer1", "blocks", "features.1")


def linearize_start(linearize_from: Optional[str], net: nn.Module) -> Optional[str]:
    """The module a tangent model of ``net`` starts at (``TangentModel(start_at=...)``):
    ``None`` (everything), a module name, or ``"after-stem"``, the first module after the
    stem as the paper's authors linearize a ResNet (``layer1``; ``blocks`` of timm's
    EfficientNets and ViTs, ``features.1`` of torchvision's MobileNets)."""
    if linearize_from != "after-stem":
        return linearize_from
    names = {name for name, _ in net.named_modules()}
    for candidate in _AFTER_STEM:
        if candidate in names:
            return candidate
    raise ValueError(f"linearize_from='after-stem': {type(net).__name__} has none of the known stem ends "
                     f"{_AFTER_STEM}; name the first module to linearize (--linearize-from MODULE).")


def delta_decay_plugin(cfg: TrainConfig) -> Any:
    """The decay on δ of ``cfg`` as a plugin, for tangent strategies built outside
    ``avalanche_tmc``'s (``joint-tangent``): only the authors' norm penalty is a plugin."""
    from avalanche_tmc import DeltaDecayPlugin

    if cfg.decay_kind != "norm":
        raise ValueError(f"joint-tangent takes the decay on δ as the authors' norm penalty only, got "
                         f"decay_kind={cfg.decay_kind!r}.")
    return DeltaDecayPlugin(cfg.decay)


def decay_arguments(cfg: TrainConfig) -> Dict[str, Any]:
    """The tangent strategies' decay arguments for ``cfg`` (none when it has no decay)."""
    return dict(decay=cfg.decay, decay_kind=cfg.decay_kind) if cfg.decay > 0 else {}


def feature_layers(net: nn.Module) -> List[Optional[str]]:
    """The layers whose pooled outputs a training-free head may use: every stage of the chain
    (a :class:`~benchmarks.networks.trunk.ChainSegment`'s stages, else the top-level children) that
    has parameters and comes before the head, then ``None`` (the head's input)."""
    head = find_head(net)
    chain = net.stages if isinstance(getattr(net, "stages", None), nn.ModuleDict) else net
    prefix = "stages." if chain is not net else ""
    layers: List[Optional[str]] = []
    for name, module in chain.named_children():
        if head == prefix + name or head.startswith(prefix + name + "."):
            break
        if next(module.parameters(), None) is not None:
            layers.append(prefix + name)
    return layers + [None]


def layer_candidates(net: nn.Module, cfg: TrainConfig) -> List[Adaptation]:
    """No adaptation; the statistics read from each of :func:`feature_layers`."""
    return [Adaptation("none", batch_size=cfg.batch_size, seed=cfg.seed, beta=cfg.beta, layer=layer)
            for layer in feature_layers(net)]


def adaptation_candidates(net: nn.Module, cfg: TrainConfig) -> List[Adaptation]:
    """The adaptations the first-session learner chooses from (on a validation split of
    experience 0), each read at every layer of :func:`feature_layers`: none; non-linear
    fine-tuning (SGD, momentum 0.9) of the whole trained part or of its last half (by
    parameter count), at lr 1e-3 or 1e-2, for 2 or 5 epochs; and, at the head's input,
    one tangent component (the combination with TMC). Nine trainings in all: candidates
    that differ only in the layer share one."""
    head = find_head(net)
    body = [(n, p.numel()) for n, p in net.named_parameters() if not n.startswith(head + ".")]
    total, remaining, half = sum(c for _, c in body), 0, None
    for name, count in reversed(body):
        remaining += count
        if remaining >= total / 2:
            half = name.rsplit(".", 1)[0]
            break
    common = dict(batch_size=cfg.batch_size, seed=cfg.seed, beta=cfg.beta)
    fine_tune = [Adaptation("fine-tune", lr, epochs, train_from=part, layer=layer, **common)
                 for part in (None, half) for lr in (1e-3, 1e-2) for epochs in (2, 5) for layer in feature_layers(net)]
    return [*layer_candidates(net, cfg), *fine_tune, Adaptation("tangent", 1e-3, 5, **common)]


def decay_milestones(epochs: int, decay_at: Sequence[float]) -> List[int]:
    """The epochs (of ``epochs``) where a step schedule at fractions ``decay_at``
    multiplies the learning rate by 0.1: ``(0.5, 0.75)`` of 20 epochs -> ``[10, 15]``;
    fractions that round to epoch 0 or to the same epoch count once."""
    return sorted({int(f * epochs) for f in decay_at} - {0})


# Autocast dtypes by --amp name.
AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def schedule_milestones(cfg: TrainConfig) -> List[int]:
    """The epochs (0-based) from which ``MultiStepLR`` multiplies the learning rate by 0.1.

    ``schedule="step"``: from each milestone on (the paper's text, "x0.1 at epochs 25 and
    40"); ``"authors"``: the authors' code, whose epoch ``e`` trains at
    ``lr · 0.1^#{m : m < e}``, so one epoch later (1e-4 for epochs 0-25 of 50, 1e-5 for
    26-40, 1e-6 for 41-49)."""
    milestones = set(cfg.milestones) | set(decay_milestones(cfg.epochs, cfg.decay_at))
    if cfg.schedule == "authors":
        milestones = {m + 1 for m in milestones}
    return sorted(m for m in milestones if m < cfg.epochs)


# Optimizers whose PyTorch implementation has a fused kernel on CPU and CUDA.
_FUSED_OPTIMIZERS = (torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW)


def use_fused_kernels(optimizer: Optional[torch.optim.Optimizer]) -> bool:
    """Switch ``optimizer`` (before its first step) to PyTorch's fused implementation: one
    kernel over every parameter instead of a Python loop over them, the same update up to
    float rounding. Every method of the runner gets it (an Adam step over the main job's
    4.3 M parameters: 31 -> 9 ms on one core). Returns whether it was switched."""
    if type(optimizer) not in _FUSED_OPTIMIZERS or optimizer.state:
        return False
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if not all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params):
        return False
    for group in [optimizer.defaults, *optimizer.param_groups]:
        group.update(foreach=None, fused=True)
    return True
