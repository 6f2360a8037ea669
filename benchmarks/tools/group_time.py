"""Sequential against parallel (gloo processes) wall time of method groups on a preset's
first run, and how far the parallel result is from the sequential one (the numbers of the
README's scale-out section)::

    python -m benchmarks.tools.group_time --preset tiny --groups tangent,stats-ridge --processes 2
"""

import argparse
import time
from typing import Any, Dict

import torch

from avalanche_tmc.distributed import train_parallel
from benchmarks.methods import MethodGroup, TrainConfig, method_groups
from benchmarks.methods.strategy import build_strategy
from benchmarks.protocol.scenarios import make_scenario
from benchmarks.runner.config import Options, RunConfig, train_config
from benchmarks.runner.gloo_training import ParallelTrainer
from benchmarks.runner.prepare import num_classes, prepare
from benchmarks.runner.presets import PRESETS

__all__ = ["time_group", "main"]


def _max_difference(a, b) -> float:
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in a)


def time_group(group: MethodGroup, bm, top, cfg: TrainConfig, processes: int) -> Dict[str, Any]:
    """Wall time of the group's training: in this process (all threads, then one thread)
    and over ``processes`` workers (process start, training, composition, files)."""
    times, states = {}, {}
    threads = torch.get_num_threads()
    for label, n in ((f"sequential, {threads} threads", threads), ("sequential, 1 thread", 1)):
        torch.set_num_threads(n)
        torch.manual_seed(cfg.seed)
        strategy = build_strategy(group, top, cfg, None)
        start = time.time()
        train_parallel(strategy, bm.train_stream, seed=cfg.seed)
        times[label] = time.time() - start
        states[label] = strategy
    torch.set_num_threads(threads)
    trainer = ParallelTrainer(group, bm, top, cfg, processes)
    trainer.run()
    times[f"{processes} processes"] = trainer.seconds
    strategy = build_strategy(group, top, cfg, None)
    trainer(strategy, list(bm.train_stream))
    trainer.close()
    reference = states[f"sequential, {threads} threads"]
    # the composed δ (tangent) or the summed statistics: what each evaluates
    learned, expected = strategy.learned(), reference.learned()
    if strategy.payload == "delta":
        difference = _max_difference(learned.mean(), expected.mean())
    else:
        difference = _max_difference(learned.summed(), expected.summed())
    return dict(times=times, reports=trainer.reports, difference=difference)


def main(argv=None) -> None:
    """``python -m benchmarks.tools.group_time``: sequential vs parallel wall time of method groups
    on a preset's first run (the numbers of the README's scale-out section)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tools.group_time",
                                     description=main.__doc__.split("\n")[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--groups", default="tangent,stats-ridge")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=None, help="tangent epochs (default: the preset's)")
    args = parser.parse_args(argv)
    from benchmarks.networks.arithmetic import runner_arithmetic

    runner_arithmetic()  # the runner's one CPU arithmetic (AVX2), before torch computes
    run = RunConfig.from_dict(PRESETS[args.preset][0])
    train, test, top = prepare(run)
    bm = make_scenario(run.scenario, train, test, run.tasks, seed=0)
    cfg = train_config(run.replace(epochs=args.epochs or run.epochs, tangent_epochs=None, tuned={}), Options(),
                       num_classes=num_classes(train), seed=0)
    groups = {g.name: g for g in method_groups()}
    for name in args.groups.split(","):
        result = time_group(groups[name], bm, top, cfg, args.processes)
        times = result["times"]
        parallel = times[f"{args.processes} processes"]
        print(f"{name} ({len(bm.train_stream)} experiences, {cfg.epochs} epochs): " + ", ".join(
            f"{label} {t:.1f} s" for label, t in times.items()))
        for label, t in times.items():
            if label.startswith("sequential"):
                print(f"  vs {label}: speed-up {t / parallel:.2f}, efficiency {t / (args.processes * parallel):.0%}")
        report = result["reports"][0]
        print("  per rank: " + "; ".join(
            f"rank {i} train {r['train_seconds']:.1f} s, wait {r['wait_seconds']:.1f} s, communicate "
            f"{r['communicate_seconds']:.2f} s" for i, r in enumerate(result["reports"]))
              + f"; all-reduce {report['bytes_reduced']:,} bytes, broadcasts {report['bytes_broadcast']:,} bytes; "
              f"max |parallel - sequential| {result['difference']:.2g}", flush=True)


if __name__ == "__main__":
    main()
