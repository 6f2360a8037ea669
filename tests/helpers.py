"""What the tests share: tiny networks, random δ, scikit-learn's digits as a benchmark, and
the small benchmark and TMC strategy of the reliability tests (also run by
``tests/avalanche_tmc/checkpoint_job.py`` in its own process)."""

import os
from typing import Optional, Tuple

import numpy as np
import torch
from avalanche.benchmarks.scenarios.deprecated.generators import nc_benchmark
from avalanche.evaluation.metrics import accuracy_metrics
from avalanche.training.plugins import EvaluationPlugin
from torch import nn
from torch.utils.data import TensorDataset

from avalanche_tmc import TangentModel, TMCStrategy
from avalanche_tmc.factories.benchmarks import digits_splits as library_digits_splits
from benchmarks.protocol.scenarios import class_incremental

# ---------------------------------------------------------------------------- tiny networks


class TinyResNet(nn.Module):
    """Conv + BatchNorm stem, one residual block, max and average pooling, linear head."""

    def __init__(self, in_channels: int = 1, width: int = 4, num_classes: int = 3):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(in_channels, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU())
        self.block = nn.Sequential(
            nn.Conv2d(width, width, 3, padding=1, bias=False),
            nn.BatchNorm2d(width),
            nn.Tanh(),
            nn.Conv2d(width, width, 3, padding=1, bias=False),
            nn.BatchNorm2d(width),
        )
        self.fc = nn.Linear(width, num_classes)

    def forward(self, x):
        h = self.stem(x)
        h = torch.relu(h + self.block(h))
        h = torch.max_pool2d(h, 2)
        return self.fc(h.mean(dim=(2, 3)))


class TinyTransformer(nn.Module):
    """Patch embedding, one pre-norm transformer block (self-attention + GELU MLP), head."""

    def __init__(self, dim: int = 8, heads: int = 2, num_classes: int = 3):
        super().__init__()
        self.heads = heads
        self.patch = nn.Conv2d(1, dim, 4, stride=4)
        self.pos = nn.Parameter(torch.randn(1, 4, dim) * 0.1)
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        tokens = self.patch(x).flatten(2).transpose(1, 2) + self.pos  # (B, 4, dim)
        b, n, d = tokens.shape
        q, k, v = self.qkv(self.norm1(tokens)).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attn = torch.softmax(q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5, dim=-1)
        tokens = tokens + self.proj((attn @ v).transpose(1, 2).reshape(b, n, d))
        tokens = tokens + self.mlp(self.norm2(tokens))
        return self.head(self.norm(tokens).mean(dim=1))


def randomize_batchnorm(model: nn.Module, seed: int = 0) -> nn.Module:
    """Give BatchNorm layers non-trivial running statistics and affine parameters."""
    gen = torch.Generator().manual_seed(seed)
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.running_mean.copy_(torch.randn(module.num_features, generator=gen) * 0.5)
            module.running_var.copy_(torch.rand(module.num_features, generator=gen) + 0.5)
            module.weight.data.copy_(torch.randn(module.num_features, generator=gen) * 0.3 + 1)
            module.bias.data.copy_(torch.randn(module.num_features, generator=gen) * 0.3)
    return model


def random_delta(tangent_model, scale: float = 0.1, seed: int = 0):
    """A random δ with the model's names and shapes."""
    gen = torch.Generator().manual_seed(seed)
    return {
        n: torch.randn(s, generator=gen, dtype=torch.float64).to(p.dtype) * scale
        for (n, s), p in zip(tangent_model.delta_shapes().items(), tangent_model.delta_params)
    }


# ---------------------------------------------------------------------------- digits

Split = Tuple[np.ndarray, np.ndarray]


def digits_splits(seed: int = 0, pretrain_per_class: int = 40, test_fraction: float = 0.3) -> Tuple[Split, ...]:
    """The library's digits split (:func:`avalanche_tmc.factories.digits_splits`) as
    ``(pretrain, train, test)`` pairs of numpy ``(images, labels)``, images ``(N, 1, 8, 8)``
    in [-0.5, 0.5]."""
    parts = library_digits_splits(seed, pretrain_per_class, test_fraction)
    return tuple((parts[k][0].numpy(), parts[k][1].numpy()) for k in ("pretrain", "train", "test"))


def _labelled(split: Split) -> TensorDataset:
    dataset = TensorDataset(torch.as_tensor(split[0]), torch.as_tensor(split[1]))
    dataset.targets = split[1].tolist()
    return dataset


def digits_benchmark(train: Split, test: Split, n_experiences: int = 5, task_labels: bool = False, seed: int = 0):
    """The runner's class-incremental (``task_labels``: task-incremental) benchmark of
    ``train`` / ``test`` (:func:`benchmarks.protocol.scenarios.class_incremental`)."""
    return class_incremental(_labelled(train), _labelled(test), n_experiences, seed=seed, task_labels=task_labels)


# ---------------------------------------------------------------------------- reliability tests

NUM_CLASSES = 4


def tensor_dataset(n: int = 24, seed: int = 0, num_classes: int = NUM_CLASSES, nan_at=None) -> TensorDataset:
    """``n`` random 8x8 images, labels cycling through the classes (image ``nan_at`` all NaN)."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 1, 8, 8, generator=gen)
    y = torch.arange(n) % num_classes
    if nan_at is not None:
        x[nan_at] = float("nan")
    dataset = TensorDataset(x, y)
    dataset.targets = y.tolist()
    return dataset


def small_benchmark(n_experiences: int = 2, task_labels: bool = False, train=None):
    """A class-incremental benchmark of :func:`tensor_dataset` (the deprecated generator, seeded)."""
    return nc_benchmark(train or tensor_dataset(), tensor_dataset(16, seed=1), n_experiences=n_experiences,
                        task_labels=task_labels, seed=0)


def quiet_evaluator():
    """Accuracy per experience and stream, no logger."""
    return EvaluationPlugin(accuracy_metrics(experience=True, stream=True), loggers=[])


def tmc(lr: float = 1e-2, **kwargs) -> TMCStrategy:
    """A seeded TMC strategy on a tiny ResNet, one epoch per experience."""
    torch.manual_seed(0)
    model = TangentModel(TinyResNet(num_classes=3), num_classes=NUM_CLASSES)
    return TMCStrategy(model=model, lr=lr, train_mb_size=8, train_epochs=1, evaluator=quiet_evaluator(), **kwargs)


def train_seeded(strategy, experiences):
    """Train ``strategy`` on each experience, seeding torch with ``100 + experience id``
    first (the same run whatever else the test did before)."""
    for exp in experiences:
        torch.manual_seed(100 + exp.current_experience)
        strategy.train(exp)
    return strategy


def learned_of(strategy):
    """What a TMC strategy or a training-free strategy has learned: its additive composition."""
    return strategy.tangent_plugin.composition if isinstance(strategy, TMCStrategy) else strategy.statistics


def seeded_resnet(seed: int = 0, width: int = 8, num_classes: int = 10) -> "TinyResNet":
    """A :class:`TinyResNet` initialised from ``seed``."""
    torch.manual_seed(seed)
    return TinyResNet(width=width, num_classes=num_classes)


# ---------------------------------------------------------------------------- the device the tests run on

DEVICE_VARIABLE = "AVALANCHE_TMC_TEST_DEVICE"
BACKEND_VARIABLE = "AVALANCHE_TMC_TEST_DIST_BACKEND"
WORKERS = 2  # processes of the two-process torch.distributed tests


def resolve_device(name: str) -> torch.device:
    """The device named by ``--device`` / ``$AVALANCHE_TMC_TEST_DEVICE``: ``cpu``, ``cuda`` or
    ``cuda:N``; ``ValueError`` saying why for anything else, or CUDA this machine lacks."""
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError) as error:
        raise ValueError(f"{name!r} is not a torch device ({error}); use cpu, cuda or cuda:N.") from None
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"the tests run on cpu or cuda (cuda:N), not {device.type!r}"
                         + (": a meta tensor holds no values to compare." if device.type == "meta" else "."))
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"{name!r} was asked for, but CUDA is not available here (torch {torch.__version__}, "
                             f"CUDA build {torch.version.cuda}); run on a GPU machine with a CUDA build of torch, or "
                             "use --device cpu.")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(f"{name!r} was asked for, but this machine has {torch.cuda.device_count()} CUDA "
                             "device(s).")
    return device


def resolve_backend(name: Optional[str], device: torch.device) -> str:
    """The ``torch.distributed`` backend of the two-process tests: ``name`` when given
    (``--dist-backend`` / ``$AVALANCHE_TMC_TEST_DIST_BACKEND``), else gloo on CPU and NCCL on
    CUDA when there is a GPU per process (NCCL refuses two ranks on one GPU; on one GPU the
    processes train on CUDA and communicate through gloo). ``ValueError`` for NCCL without them."""
    if name is None:
        return "nccl" if device.type == "cuda" and torch.cuda.device_count() >= WORKERS else "gloo"
    if name not in ("gloo", "nccl"):
        raise ValueError(f"the distributed backend is gloo or nccl, not {name!r}.")
    if name == "nccl" and (device.type != "cuda" or torch.cuda.device_count() < WORKERS):
        raise ValueError(f"NCCL takes CUDA tensors only and one GPU per process: it needs --device cuda and "
                         f"{WORKERS} GPUs (this run: device {device}, "
                         f"{torch.cuda.device_count() if torch.cuda.is_available() else 0} GPU(s)).")
    return name


def prepare_device(device: torch.device) -> None:
    """On CUDA, float32 matmuls and convolutions in full precision (no TF32: the tolerances
    are float32's) and deterministic kernels (the tests compare runs bit for bit); on the
    CPU nothing changes. Call it before any CUDA work (the cuBLAS setting is read then)."""
    if device.type != "cuda":
        return
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.use_deterministic_algorithms(True, warn_only=True)


def to_device(tensors, device):
    """A mapping of tensors (or one tensor) on ``device``."""
    if isinstance(tensors, torch.Tensor):
        return tensors.to(device)
    return type(tensors)((name, t.to(device)) for name, t in tensors.items())


def to_cpu(tensors):
    """A mapping of tensors (or one tensor) on the CPU, to compare with CPU references."""
    return to_device(tensors, "cpu")


# ---------------------------------------------------------------------------- examples

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_example(*command: str, timeout: float = 300) -> str:
    """Run an example as its docstring says a user runs it (``python -m examples.NAME ARGS``,
    or ``python -m torch.distributed.run ... -m examples.NAME``: pass ``command`` after
    ``python``) from the checkout; its stdout, after checking that it exited 0."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, *command], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, PYTHONWARNINGS="ignore", OMP_WAIT_POLICY="PASSIVE"))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done.stdout


def examples_digits_accuracy(delta) -> Tuple[float, int]:
    """Accuracy (and test images) of the installed digits CNN with ``delta`` on the test
    stream of the installed digits benchmark: what the examples on the default factories report."""
    from torch.utils.data import DataLoader

    from avalanche_tmc.factories import digits, digits_cnn

    model = TangentModel(digits_cnn()).eval()
    right = total = 0
    with torch.no_grad():
        for exp in digits().test_stream:
            for x, y, *_ in DataLoader(exp.dataset, batch_size=256):
                right += int((model.forward_with(x, delta).argmax(1) == y).sum())
                total += len(y)
    return right / total, total


# ---------------------------------------------------------------------------- shared test files


def two_silo_components(directory) -> None:
    """Component files of experiences 0 and 1 of a seeded TinyResNet's tangent model (random δ) in ``directory``:
    what the command-line refusal tests compose, forget and inspect."""
    import avalanche_tmc.files as cf

    torch.manual_seed(0)
    model = TangentModel(TinyResNet(num_classes=3), num_classes=NUM_CLASSES)
    for exp in (0, 1):
        cf.save_component(cf.tangent_component(model, random_delta(model, seed=exp), exp),
                          os.path.join(str(directory), f"experience-{exp}.safetensors"))


def small_caltech_folder(root, classes: int = 5, per_class: int = 7):
    """A generated Caltech-256-style image folder in ``root`` (small images), for the runner's tests."""
    from benchmarks.datasets.synthetic import make_image_folder

    make_image_folder(root, layout="caltech256", classes=classes, per_class=per_class, min_size=40, max_size=64)
    return root


def random_resnet18_weights(path):
    """A state-dict file of a seeded, randomly initialised ResNet-18 at ``path`` (the runner's ``--weights``)."""
    from torchvision.models import resnet18

    torch.manual_seed(0)
    torch.save(resnet18().state_dict(), path)
    return path
