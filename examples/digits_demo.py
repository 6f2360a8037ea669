"""A small, real, offline class-incremental run: TMC / TME / TMC-Seq vs Naive fine-tuning.

Data: scikit-learn's handwritten digits (8x8, 1,797 images, ships with the package).
A small CNN is pre-trained on a disjoint pool of digit images; the continual learner
then sees the remaining images split into 5 experiences of 2 classes each, with a
freshly initialised 10-way head. Everything else is Avalanche: its current benchmark API
(``class_incremental_benchmark``, ``task_incremental_benchmark``), the ``EvaluationPlugin``
with ``accuracy_metrics``/``forgetting_metrics`` and its loggers.

Run: ``python -m examples.digits_demo`` (``make digits``).
"""

import argparse
import copy
import os
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch
from avalanche.benchmarks import class_incremental_benchmark, task_incremental_benchmark
from avalanche.benchmarks.utils import as_classification_dataset
from avalanche.evaluation.metrics import accuracy_metrics, forgetting_metrics, loss_metrics
from avalanche.logging import InteractiveLogger, TextLogger
from avalanche.training.plugins import EvaluationPlugin
from avalanche.training.supervised import Naive
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import TensorDataset

from avalanche_tmc import TangentModel, TaskMaskPlugin, TMCSeqStrategy, TMCStrategy, TMEStrategy
from avalanche_tmc.factories.benchmarks import cache_dir

STRATEGIES = {"tmc": TMCStrategy, "tme": TMEStrategy, "tmc-seq": TMCSeqStrategy}

# Adam's lr on δ, passed explicitly: a small CNN with a freshly initialised head needs 1e-2 to
# learn in 10 epochs (class-IL TMC: 0.76, against 0.10 at 1e-4). The library's default
# (avalanche_tmc.DEFAULT_LR) is the paper's 1e-4, for a fully trained network, which a larger
# one can wreck (docs/usage.md, "Choosing the learning rate").
TANGENT_LR = 1e-2


class SmallCNN(nn.Module):
    """A small CNN with BatchNorm, a residual block and pooling, for 8x8 digits."""

    def __init__(self, width: int = 32, num_classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        self.block = nn.Sequential(
            nn.Conv2d(width, width, 3, padding=1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(),
            nn.Conv2d(width, width, 3, padding=1, bias=False),
            nn.BatchNorm2d(width),
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.stem(x)
        h = torch.relu(h + self.block(h))
        return self.fc(self.pool(torch.max_pool2d(h, 2)).flatten(1))


def _classification_dataset(x: np.ndarray, y: np.ndarray):
    dataset = TensorDataset(torch.as_tensor(x), torch.as_tensor(y))
    dataset.targets = y.tolist()  # Avalanche reads the class labels from here
    return as_classification_dataset(dataset)


def load_digits_splits(seed: int = 0, pretrain_per_class: int = 40, test_fraction: float = 0.3):
    """Digits as (pretrain, train, test) arrays: a disjoint pre-training pool of
    ``pretrain_per_class`` images per class, the rest split train/test (stratified)."""
    digits = load_digits()
    x = (digits.images.astype(np.float32) / 16.0 - 0.5)[:, None]
    y = digits.target.astype(np.int64)
    rng = np.random.default_rng(seed)
    pre, train, test = [], [], []
    for c in range(10):
        idx = rng.permutation(np.flatnonzero(y == c))
        n_test = int(round(test_fraction * (len(idx) - pretrain_per_class)))
        pre.append(idx[:pretrain_per_class])
        test.append(idx[pretrain_per_class:pretrain_per_class + n_test])
        train.append(idx[pretrain_per_class + n_test:])
    pick = lambda parts: (x[np.concatenate(parts)], y[np.concatenate(parts)])  # noqa: E731
    return pick(pre), pick(train), pick(test)


def pretrain_backbone(x: np.ndarray, y: np.ndarray, epochs: int = 30, seed: int = 0,
                      cache: Optional[Path] = None) -> SmallCNN:
    """Supervised pre-training of :class:`SmallCNN` on the disjoint pool (the stand-in
    for ImageNet pre-training). ``cache``: a folder where the pre-trained weights are kept
    (one file per seed, epochs and torch version), so that the next run starts at once."""
    path = None if cache is None else cache / f"digits-demo-seed{seed}-epochs{epochs}-torch{torch.__version__}.pt"
    if path is not None and path.is_file():
        model = SmallCNN()
        model.load_state_dict(torch.load(path, weights_only=True))
        return model.eval()
    torch.manual_seed(seed)
    model = SmallCNN()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    xt, yt = torch.as_tensor(x), torch.as_tensor(y)
    for _ in range(epochs):
        model.train()
        for idx in torch.randperm(len(xt)).split(32):
            opt.zero_grad()
            nn.functional.cross_entropy(model(xt[idx]), yt[idx]).backward()
            opt.step()
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(model.state_dict(), path.with_suffix(".tmp"))
        os.replace(path.with_suffix(".tmp"), path)  # whole or not at all, if another run reads it
    return model.eval()


def make_benchmark(train, test, n_experiences: int = 5, task_labels: bool = False, seed: int = 0):
    """Avalanche class-incremental (or, with ``task_labels``, task-incremental: task label
    t on experience t) benchmark with global class ids (one fixed head over all classes).
    Every class is used once, the first experiences take the remainder (the class counts
    are explicit: ``num_experiences=`` would drop remainder classes)."""
    base, extra = divmod(len(np.unique(train[1])), n_experiences)
    benchmark = class_incremental_benchmark(
        {"train": _classification_dataset(*train), "test": _classification_dataset(*test)},
        num_classes_per_exp=[base + (i < extra) for i in range(n_experiences)],
        seed=seed,
    )
    return task_incremental_benchmark(benchmark) if task_labels else benchmark


def make_evaluator(verbose: bool) -> EvaluationPlugin:
    """Avalanche's own metrics and loggers."""
    loggers = [InteractiveLogger()] if verbose else [TextLogger(open("/dev/null", "w"))]
    return EvaluationPlugin(
        accuracy_metrics(experience=True, stream=True),
        loss_metrics(stream=True),
        forgetting_metrics(experience=True, stream=True),
        loggers=loggers,
    )


def run_method(
    method: str,
    benchmark,
    backbone: nn.Module,
    *,
    epochs: int = 10,
    lr: Optional[float] = None,
    verbose: bool = False,
    seed: int = 0,
) -> Tuple[float, List[float]]:
    """Train ``method`` over the benchmark; return (final stream accuracy, accuracy of
    the model after each experience on all test experiences)."""
    torch.manual_seed(seed)
    net = copy.deepcopy(backbone)
    evaluator = make_evaluator(verbose)
    common = dict(train_mb_size=32, train_epochs=epochs, eval_mb_size=256, evaluator=evaluator)
    if method == "naive":
        net.fc = nn.Linear(net.fc.in_features, 10)
        strategy = Naive(
            model=net, optimizer=torch.optim.Adam(net.parameters(), lr=lr or 1e-3),
            criterion=nn.CrossEntropyLoss(), plugins=[TaskMaskPlugin()], **common,
        )
    else:
        model = TangentModel(net, num_classes=10)
        strategy = STRATEGIES[method](model=model, lr=lr or TANGENT_LR, beta=25.0, **common)
    curve = []
    for experience in benchmark.train_stream:
        strategy.train(experience)
        curve.append(_stream_accuracy(strategy.eval(benchmark.test_stream)))
    return curve[-1], curve


def _stream_accuracy(metrics: Dict[str, float]) -> float:
    """The test-stream accuracy (with task labels, Avalanche reports one per task: their mean)."""
    keys = [k for k in metrics if k.startswith("Top1_Acc_Stream/eval_phase/test_stream")]
    return float(np.mean([metrics[k] for k in keys]))


SCENARIOS = {"class-IL": False, "task-IL": True}  # name -> task labels


def main(argv: Optional[List[str]] = None) -> Dict[Tuple[str, str], float]:
    """Run the demo and print a table of final average accuracies."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--methods", default="naive,tmc,tme,tmc-seq")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--lr", type=float, default=TANGENT_LR, help="Adam lr of the tangent methods")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help="class-IL and/or task-IL")
    parser.add_argument("--experiences", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--verbose", action="store_true", help="Avalanche's interactive logger")
    parser.add_argument("--cache", type=Path, default=cache_dir() / "examples",
                        help="folder keeping the pre-trained CNN for the next run (default: %(default)s)")
    parser.add_argument("--no-cache", action="store_true", help="pre-train again and keep nothing")
    args = parser.parse_args(argv)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    pre, train, test = load_digits_splits(args.seed)
    print(f"digits: pre-train {len(pre[1])}, continual train {len(train[1])}, test {len(test[1])} images; "
          f"{args.experiences} experiences; {args.epochs} epochs each")
    backbone = pretrain_backbone(*pre, seed=args.seed, cache=None if args.no_cache else args.cache)
    results = {}
    for scenario in args.scenarios.split(","):
        benchmark = make_benchmark(train, test, args.experiences, SCENARIOS[scenario], seed=args.seed)
        for method in args.methods.split(","):
            start = time.time()
            final, curve = run_method(method, benchmark, backbone, epochs=args.epochs,
                                      lr=None if method == "naive" else args.lr,
                                      verbose=args.verbose, seed=args.seed)
            results[(scenario, method)] = final
            print(f"{scenario:9s} {method:8s} final acc {final:.3f}  after each exp "
                  f"{' '.join(f'{a:.2f}' for a in curve)}  ({time.time() - start:.0f}s)")
    return results


if __name__ == "__main__":
    main()
