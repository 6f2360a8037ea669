"""Experiences trained in parallel by torchrun processes, composed on every process.

Each process of a ``torchrun`` job builds the same strategy (``TMCStrategy`` on the
installed digits CNN) and the same stream (scikit-learn's digits, 5 class-incremental
experiences); :func:`avalanche_tmc.train_parallel` shares the experiences among the
processes (gloo on CPU), trains each on one process seeded by ``avalanche_tmc.experience_seed(seed, id)``,
and composes the components on every process through ``torch.distributed``. Rank 0 prints
who trained what and the composition's accuracy, and (``--out``) writes it as a file.
Without torchrun the same script trains the experiences one after the other in one process:
the composition is the same (``tests/examples/test_torchrun_parallel.py`` compares the two).

Run: ``torchrun --standalone --nproc_per_node=2 -m examples.torchrun_parallel [--out FILE]``
(or ``python -m torch.distributed.run ...``; about 25 s of CPU time), or
``python -m examples.torchrun_parallel`` for the sequential run.
"""

import argparse
import sys
from typing import List, Optional

import torch
from torch.utils.data import DataLoader

from avalanche_tmc import (
    TangentModel,
    TMCStrategy,
    compose_components,
    init_parallel,
    save_component,
    shutdown_parallel,
    strategy_components,
    train_parallel,
)
from avalanche_tmc.factories import digits, digits_cnn


def accuracy(model: TangentModel, stream) -> float:
    """Top-1 accuracy of ``model`` (its composition installed) on every test experience."""
    model.eval()
    right = total = 0
    with torch.no_grad():
        for exp in stream:
            for x, y, *_ in DataLoader(exp.dataset, batch_size=256):
                right += int((model(x).argmax(1) == y).sum())
                total += len(y)
    return right / total


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2, help="training epochs per experience")
    parser.add_argument("--out", help="write the composition (on rank 0) to this .safetensors file")
    args = parser.parse_args(argv)
    # Avalanche after avalanche_tmc (imported above): its optional QP-solver warning is filtered
    from avalanche.evaluation.metrics import accuracy_metrics
    from avalanche.logging import TextLogger
    from avalanche.training.plugins import EvaluationPlugin

    rank, world = init_parallel()  # (0, 1) without torchrun
    # Avalanche's way: loggers in the main process only (rank 0 prints the training accuracy of each epoch)
    loggers = [TextLogger(sys.stdout)] if rank == 0 else None
    try:
        bm = digits()  # the same stream on every process
        strategy = TMCStrategy(model=TangentModel(digits_cnn()), lr=1e-2, train_epochs=args.epochs,
                               evaluator=EvaluationPlugin(accuracy_metrics(epoch=True), loggers=loggers))
        report = train_parallel(strategy, bm.train_stream, seed=0)
        if rank == 0:
            print(f"{world} process(es): " + "; ".join(f"rank {r} trained experiences {ids}"
                                                       for r, ids in report.assignment.items()))
            if args.out:
                composition = compose_components(strategy_components(strategy))
                save_component(composition, args.out, overwrite=True)
                print(f"wrote {args.out}")
            print(f"composition of experiences {sorted(strategy.components)}: accuracy "
                  f"{accuracy(strategy.model, bm.test_stream):.4f}")
    finally:
        shutdown_parallel()


if __name__ == "__main__":
    main()
