"""What ``python -m benchmarks.tools.speed`` times: the networks, and one network's training-step,
inference and memory numbers.

* :data:`NETWORKS` and :data:`PRESETS`: the networks (random weights, BatchNorm statistics
  randomized) and the input size and batch each is timed at; ``--networks`` shorthands;
* :func:`interleaved_medians`: median seconds over rounds, every function once per round
  (a busy machine slows all of them alike);
* :func:`training_memory`: the bytes of one training step (parameters, gradients,
  optimizer state and the tensors autograd saves; the allocator's peak on CUDA);
* :func:`time_network`: the plain and tangent training steps, the plain, TMC, TME and
  Ens-SM forwards, and their memory, for one network.

The command line, the tables and the whole class-incremental run are :mod:`benchmarks.tools.speed`.
"""

from __future__ import annotations

import contextlib
import copy
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence

import torch
from torch import nn

from avalanche_tmc import RescaledSquareLoss, TangentModel, log_softmax_ensemble, replace_head

__all__ = [
    "TASK_COUNTS", "NetworkSpec", "NETWORKS", "PRESETS", "interleaved_medians", "training_memory", "time_network",
]


TASK_COUNTS = (1, 5, 20, 50)


@dataclass
class NetworkSpec:
    """A network to time and the input it is timed on."""

    name: str
    image_size: int
    batch: int
    build: Callable[[], nn.Module]


def _randomize_batchnorm(net: nn.Module) -> nn.Module:
    gen = torch.Generator().manual_seed(0)
    for module in net.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm) and module.running_mean is not None:
            module.running_mean.copy_(torch.randn(module.num_features, generator=gen) * 0.1)
            module.running_var.copy_(torch.rand(module.num_features, generator=gen) + 0.5)
    return net


def _torchvision(name: str) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        import torchvision

        return _randomize_batchnorm(getattr(torchvision.models, name)())

    return build


def _timm(name: str, **kwargs) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        import timm

        return _randomize_batchnorm(timm.create_model(name, pretrained=False, **kwargs))

    return build


NETWORKS: Dict[str, NetworkSpec] = {
    spec.name: spec
    for spec in (
        NetworkSpec("resnet18", 64, 16, _torchvision("resnet18")),
        NetworkSpec("resnet50", 64, 16, _torchvision("resnet50")),
        NetworkSpec("efficientnet_lite0", 32, 32, _timm("tf_efficientnet_lite0")),
        NetworkSpec("mobilenet_v2", 32, 32, _torchvision("mobilenet_v2")),
        NetworkSpec("vit_tiny", 64, 16, _timm("vit_tiny_patch16_224", img_size=64)),
        # at their real resolutions (ImageNet-style inputs)
        NetworkSpec("resnet18@112", 112, 16, _torchvision("resnet18")),
        NetworkSpec("resnet18@32", 32, 32, _torchvision("resnet18")),
        NetworkSpec("resnet50@224", 224, 32, _torchvision("resnet50")),  # the paper's network, input and batch
        NetworkSpec("mobilenet_v2@112", 112, 16, _torchvision("mobilenet_v2")),
        NetworkSpec("mobilenet_v2@224", 224, 8, _torchvision("mobilenet_v2")),
        NetworkSpec("efficientnet_lite0@112", 112, 16, _timm("tf_efficientnet_lite0")),
        NetworkSpec("efficientnet_lite0@224", 224, 8, _timm("tf_efficientnet_lite0")),
        NetworkSpec("vit_small@224", 224, 8, _timm("vit_small_patch16_224")),
    )
}
"""Networks by name; ``name@size`` is the same network at another input size."""

PRESETS: Dict[str, Sequence[str]] = {
    "small": ("resnet18", "resnet50", "efficientnet_lite0", "mobilenet_v2", "vit_tiny"),
    "large": ("resnet18@112", "mobilenet_v2@112", "mobilenet_v2@224", "efficientnet_lite0@112",
              "efficientnet_lite0@224", "vit_small@224"),
}
"""``--networks`` shorthands: ``small`` (inputs of 32-64 px, the default), ``large``
(112-224 px), ``all``."""


# --------------------------------------------------------------------------------------
# Measuring
# --------------------------------------------------------------------------------------


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def interleaved_medians(fns: Dict[str, Callable[[], None]], rounds: int, device: torch.device) -> Dict[str, float]:
    """Median seconds of each function over ``rounds`` rounds; each round runs every
    function once, in order (after one warm-up call each)."""
    for fn in fns.values():
        fn()
    _sync(device)
    times: Dict[str, List[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            _sync(device)
            start = time.perf_counter()
            fn()
            _sync(device)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def _bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def training_memory(step: Callable[[], None], trainable: Sequence[torch.Tensor], frozen: Sequence[torch.Tensor],
                    optimizer_slots: int, device: torch.device, *, parts: bool = False):
    """Bytes of one training step: on CUDA the allocator's peak; on CPU the parameters,
    the gradients and optimizer state of the trainable ones, and every other storage
    autograd saves for the backward (each once; a saved weight is the parameter itself).

    ``parts=True`` (CPU): a dict of ``weights`` (parameters), ``state`` (gradients and
    optimizer state) and ``activations`` (the saved storages) instead of their sum."""
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        step()
        peak = torch.cuda.max_memory_allocated(device)
        return {"weights": 0, "state": 0, "activations": peak} if parts else peak
    saved: Dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        saved[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        step()
    params = {t.untyped_storage().data_ptr(): t for t in list(trainable) + list(frozen)}
    counted = {
        "weights": _bytes(params.values()),
        "state": (1 + optimizer_slots) * _bytes(trainable),
        "activations": sum(nbytes for ptr, nbytes in saved.items() if ptr not in params),  # weights counted once
    }
    return counted if parts else sum(counted.values())


# --------------------------------------------------------------------------------------
# One network
# --------------------------------------------------------------------------------------


def _autocast(device: torch.device, dtype: Optional[torch.dtype]):
    """``torch.autocast`` to ``dtype`` on ``device``'s type, or nothing (None)."""
    return torch.autocast(device.type, dtype) if dtype is not None else contextlib.nullcontext()


def _make_optimizer(name: str, params) -> torch.optim.Optimizer:
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-4)
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9)
    raise ValueError(f"unknown optimizer {name!r}: adam or sgd")


def _failing(fn: Callable[[], None]) -> Optional[str]:
    """None when ``fn`` runs, else the first line of its error (a path that cannot run
    is reported in the table, not allowed to stop the other measurements)."""
    try:
        fn()
    except Exception as error:  # noqa: BLE001 - reported in the table
        return f"{type(error).__name__}: {str(error).splitlines()[0][:80]}"
    return None


def time_network(spec: NetworkSpec, *, device: torch.device, rounds: int, ensemble_rounds: int,
                 channels_last: bool, task_counts: Sequence[int] = TASK_COUNTS, num_classes: int = 30,
                 plain_optimizer: str = "adam", amp_dtype: Optional[torch.dtype] = None) -> Dict:
    """Training-step, inference and memory numbers of one network (see the module doc).

    ``plain_optimizer``: the plain fine-tuning step's optimizer (the tangent step uses
    Adam on δ; ``"adam"`` compares like with like, ``"sgd"`` is SGD with momentum).
    ``amp_dtype``: run every forward (plain and tangent alike) under ``torch.autocast``
    to that dtype; parameters, δ and optimizer state stay float32."""
    torch.manual_seed(0)
    base = spec.build()
    plain = replace_head(copy.deepcopy(base), num_classes).to(device)
    generic = TangentModel(copy.deepcopy(base), num_classes, implementation="generic",
                           channels_last=channels_last).to(device)
    fast = TangentModel(copy.deepcopy(base), num_classes, implementation="fast",
                        channels_last=channels_last).to(device)
    x = torch.randn(spec.batch, 3, spec.image_size, spec.image_size, device=device)
    y = torch.randint(0, num_classes, (spec.batch,), device=device)
    if channels_last:
        plain.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    criterion = RescaledSquareLoss(beta=25.0)
    plain_opt = _make_optimizer(plain_optimizer, plain.parameters())

    def plain_step() -> None:
        plain.train()
        plain_opt.zero_grad(set_to_none=True)
        with _autocast(device, amp_dtype):
            out = plain(x)
        criterion(out.float(), y).backward()
        plain_opt.step()

    def tangent_step(tm: TangentModel) -> Callable[[], None]:
        opt = _make_optimizer("adam", tm.delta_parameters())

        def step() -> None:
            opt.zero_grad(set_to_none=True)
            with _autocast(device, amp_dtype):
                out = tm(x)
            criterion(out.float(), y).backward()
            opt.step()

        return step

    failed = {}
    train_fns = {"plain": plain_step, "generic": tangent_step(generic), "fast": tangent_step(fast)}
    for name, fn in list(train_fns.items()):
        error = _failing(fn)
        if error is not None:
            failed[name] = error
            del train_fns[name]
    train = interleaved_medians(train_fns, rounds, device)
    plain_optimizer_slots = 2 if plain_optimizer == "adam" else 1
    memory = {
        "plain": training_memory(plain_step, list(plain.parameters()), [], plain_optimizer_slots, device, parts=True),
        "tangent": training_memory(
            tangent_step(fast), list(fast.delta_parameters()), list(fast.model.parameters()), 2, device, parts=True
        ),
    }

    # Inference: T random components; TMC evaluates their average, one model.
    gen = torch.Generator().manual_seed(1)
    components = [
        {n: (torch.randn(p.shape, generator=gen) * 1e-3).to(device) for n, p in fast.delta.items()}
        for _ in range(max(task_counts))
    ]
    plain.eval()

    @torch.inference_mode()
    def plain_forward() -> None:
        with _autocast(device, amp_dtype):
            plain(x)

    def tmc_forward(t: int, tm: TangentModel) -> Callable[[], None]:
        composed = {n: sum(c[n] for c in components[:t]) / t for n in components[0]}

        @torch.inference_mode()
        def run() -> None:
            with _autocast(device, amp_dtype):
                tm.forward_with(x, composed)

        return run

    inference_fns: Dict[str, Callable[[], None]] = {"plain": plain_forward}
    if "generic" not in failed:
        inference_fns["tmc-generic T=1"] = tmc_forward(1, generic)
    for t in task_counts:
        inference_fns[f"tmc T={t}"] = tmc_forward(t, fast)
    inference = interleaved_medians(inference_fns, rounds, device)

    def tme_forward(t: int) -> Callable[[], None]:
        @torch.inference_mode()
        def run() -> None:
            with _autocast(device, amp_dtype):
                log_softmax_ensemble([fast.forward_with(x, c).float() for c in components[:t]], [1.0] * t)

        return run

    def ens_forward(t: int) -> Callable[[], None]:
        @torch.inference_mode()
        def run() -> None:
            with _autocast(device, amp_dtype):
                log_softmax_ensemble([plain(x).float() for _ in range(t)], [1.0] * t)

        return run

    ensembles: Dict[str, Callable[[], None]] = {}
    for t in task_counts:
        ensembles[f"tme T={t}"] = tme_forward(t)
        ensembles[f"ens-sm T={t}"] = ens_forward(t)
    if ensemble_rounds > 0:
        inference.update(interleaved_medians(ensembles, ensemble_rounds, device))
    return {"spec": spec, "train": train, "inference": inference, "memory": memory, "failed": failed,
            "fallbacks": list(fast._plan.fallback_ops) if fast._plan else ["(generic path)"]}
