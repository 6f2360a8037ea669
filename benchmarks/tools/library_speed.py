"""The library's frozen trunk against the runner's, timed on one image folder (issue 60)::

    python -m benchmarks.tools.library_speed --data-root ~/my-images --tasks 5 --image-size 64 \
        --start-at blocks.6 --epochs 5 --save docs/results/speed/library-trunk.md

Three ways to train TMC on the same images, split, class order and network (the offline
EfficientNet-Lite0 with its ImageNet weights and a new head seeded by the seed), each
experience seeded as the runner seeds it:

1. **library, no cache**: ``TMCStrategy(TangentModel(net, start_at=...))`` on the images
   (the trunk runs forward on every image of every epoch; ``--skip-uncached`` leaves it out);
2. **library, cached**: :func:`avalanche_tmc.split_network` and
   :func:`avalanche_tmc.frozen_trunk_benchmark`, then ``TMCStrategy(TangentModel(top))`` on
   the features (making them is timed apart);
3. **runner**: ``python -m benchmarks.run --dataset folder --methods tmc`` on the same folder
   (its rows' training seconds).

The images are the runner's (its folder loader, transforms and normalisation) in the
runner's class-incremental scenario for ``--data-seed``, so that all three read the same
data; the same learning rate, epochs, schedule (x0.1 at 1/2 and 3/4 of the epochs), batch
and β throughout. Printed per experience and in all with each path's final accuracy on the
test stream, and written as Markdown with ``--save``. Wall seconds on this machine, the
arithmetic on one thread (the runner's rule): run it on an idle machine.
"""

import argparse
import copy
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import torch

__all__ = ["main"]

ACCURACY = "Top1_Acc_Stream/eval_phase/test_stream"


def _train(strategy: Any, benchmark: Any, seed: int) -> Dict[str, Any]:
    """Train ``strategy`` over ``benchmark`` as the runner does (each experience seeded by
    ``experience_seed``): seconds per experience and the final accuracy on the test stream."""
    from avalanche_tmc import experience_seed

    seconds: List[float] = []
    for experience in benchmark.train_stream:
        torch.manual_seed(experience_seed(seed, experience.current_experience))
        start = time.perf_counter()
        strategy.train(experience)
        seconds.append(time.perf_counter() - start)
    accuracy = strategy.eval(benchmark.test_stream)
    key = next(k for k in accuracy if k.startswith(ACCURACY))
    return dict(seconds=seconds, accuracy=float(accuracy[key]))


def _tmc(model: Any, args: argparse.Namespace) -> Any:
    """TMC with the runner's untuned settings for these arguments."""
    from avalanche.evaluation.metrics import accuracy_metrics
    from avalanche.training.plugins import EvaluationPlugin, LRSchedulerPlugin

    from avalanche_tmc import TMCStrategy
    from benchmarks.methods import TrainConfig
    from benchmarks.methods.builders import schedule_milestones

    strategy = TMCStrategy(model=model, lr=args.lr, beta=args.beta, train_mb_size=args.batch_size,
                           train_epochs=args.epochs, eval_mb_size=256,
                           evaluator=EvaluationPlugin(accuracy_metrics(stream=True), loggers=[]))
    milestones = schedule_milestones(TrainConfig(num_classes=1, epochs=args.epochs, decay_at=(0.5, 0.75)))
    if milestones:
        scheduler = torch.optim.lr_scheduler.MultiStepLR(strategy.optimizer, milestones, gamma=0.1)
        strategy.plugins.append(LRSchedulerPlugin(scheduler, reset_scheduler=True, reset_lr=True))
    return strategy


def _runner(args: argparse.Namespace) -> Dict[str, Any]:
    """The runner's TMC on the folder: its training seconds and final accuracy (seed ``--seed``)."""
    from benchmarks import run

    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        rows = run.main(["--dataset", "folder", "--data-root", str(args.data_root), "--scenario", "class",
                         "--tasks", str(args.tasks), "--image-size", str(args.image_size), "--freeze-until",
                         args.start_at, "--epochs", str(args.epochs), "--lr-tangent", str(args.lr), "--batch-size",
                         str(args.batch_size), "--beta", str(args.beta), "--methods", "tmc", "--seed",
                         str(args.seed), "--data-seed", str(args.data_seed), "--jobs", "1", "--no-task-il",
                         "--out", out])
        wall = time.perf_counter() - start
    final = [r for r in rows if r["method"] == "tmc" and r["model"] == "composed" and r["eval_exp"] == "all"]
    steps = sorted(final, key=lambda r: r["after_task"])
    cumulative = [float(r["train_seconds"]) for r in steps]
    seconds = [b - a for a, b in zip([0.0] + cumulative, cumulative)]
    return dict(seconds=seconds, accuracy=float(steps[-1]["accuracy"]), wall=wall)


def measure(args: argparse.Namespace) -> Dict[str, Dict[str, Any]]:
    """The three paths' seconds per experience and final accuracies (see the module's doc)."""
    from avalanche_tmc import TangentModel, feature_bytes, frozen_trunk_benchmark, replace_head, split_network
    from avalanche_tmc.arithmetic import fixed_threads
    from benchmarks.datasets import load_dataset
    from benchmarks.networks.arithmetic import runner_arithmetic
    from benchmarks.networks.backbones import input_stats, load_backbone
    from benchmarks.protocol.scenarios import make_scenario
    from benchmarks.runner.prepare import num_classes

    runner_arithmetic()
    train, test = load_dataset("folder", data_root=str(args.data_root), image_size=args.image_size,
                               normalization=input_stats("efficientnet_lite0"))  # as the runner loads it
    benchmark = make_scenario("class", train, test, args.tasks, seed=args.data_seed + args.seed)  # the runner's order
    net = replace_head(load_backbone("efficientnet_lite0"), num_classes(train), seed=args.seed).eval()
    results: Dict[str, Dict[str, Any]] = {}
    with fixed_threads(1):
        if not args.skip_uncached:
            whole = TangentModel(copy.deepcopy(net), start_at=args.start_at)
            results["library, no cache"] = _train(_tmc(whole, args), benchmark, args.seed)
        example = torch.stack([train[i][0] for i in range(2)])
        trunk, top = split_network(copy.deepcopy(net), args.start_at, example)
        estimate = feature_bytes(benchmark, trunk)
        start = time.perf_counter()
        cached = frozen_trunk_benchmark(benchmark, trunk)
        making = time.perf_counter() - start
        made = sum(exp.dataset[i][0].nbytes for stream in cached.streams.values() for exp in stream
                   for i in range(len(exp.dataset)))
        results["library, cached"] = dict(_train(_tmc(TangentModel(top), args), cached, args.seed), making=making,
                                          estimate=estimate, made=made)
    results["runner"] = _runner(args)
    return results


def report(results: Dict[str, Dict[str, Any]], args: argparse.Namespace) -> str:
    """The Markdown table of :func:`measure`'s results."""
    runner = sum(results["runner"]["seconds"])
    lines = [f"TMC on `{Path(args.data_root).name}`: {args.tasks} experiences, {args.image_size} px, "
             f"EfficientNet-Lite0 from `{args.start_at}`, {args.epochs} epochs, Adam {args.lr:g}, batch "
             f"{args.batch_size}, β {args.beta:g}, seed {args.seed}; wall seconds, one thread.", "",
             "| path | " + " | ".join(f"exp {i}" for i in range(args.tasks)) + " | training | features made | "
             "x the runner's training | final accuracy |",
             "| --- |" + " ---: |" * (args.tasks + 4)]
    for name, r in results.items():
        total = sum(r["seconds"])
        making = f"{r['making']:.1f}" if "making" in r else "–"
        lines.append(f"| {name} | " + " | ".join(f"{s:.1f}" for s in r["seconds"]) + f" | {total:.1f} | {making} | "
                     f"{total / runner:.2f} | {100 * r['accuracy']:.2f} |")
    cached = results["library, cached"]
    lines += ["", f"The features' size, computed before they were made (feature_bytes): {cached['estimate']:,} bytes; "
              f"the features made: {cached['made']:,} bytes."]
    return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Measure, print the table and write it with ``--save``."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.tools.library_speed", description=__doc__.split("\n\n")[0])
    p.add_argument("--data-root", type=Path, required=True, help="an image folder: one sub-folder per class")
    p.add_argument("--tasks", type=int, default=5)
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--start-at", default="blocks.6", help="the first trained module (the runner's --freeze-until)")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--lr", type=float, default=3e-3, help="Adam learning rate (the runner's untuned tangent rate)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--beta", type=float, default=25.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-seed", type=int, default=0, help="the class order (the runner's --data-seed)")
    p.add_argument("--skip-uncached", action="store_true", help="leave out the library's path without the cache")
    p.add_argument("--save", type=Path, help="also write the table to this Markdown file")
    args = p.parse_args(argv)
    table = report(measure(args), args)
    print(table)
    if args.save is not None:
        args.save.parent.mkdir(parents=True, exist_ok=True)
        args.save.write_text(table, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
