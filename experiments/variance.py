"""Where the seed-to-seed spread of the main job comes from: ``python -m experiments.variance``.

For the composition groups of class-incremental main job (TMC and the ensemble of its
components, Soup/Ens-L/Ens-SM,
with the preset's tuned settings), three protocols of ``--seeds`` runs each, every other
source of randomness held at seed 0:

* ``head``: only the new head's initialisation varies (``TrainConfig.head_seed``);
* ``order``: only the minibatch order varies (the experiences' seeds);
* ``classes``: only the class order of the scenario varies (``--data-seed``);

and prints the sample standard deviation of each row's final accuracy per protocol
(percentage points). Writes ``variance.csv`` under ``--out``.
"""

import os
from dataclasses import replace
from typing import Dict, List

from benchmarks.methods import method_groups
from benchmarks.protocol.scenarios import make_scenario
from benchmarks.results.files import VARIANCE_COLUMNS, write_rows_csv
from benchmarks.results.intervals import mean_std
from benchmarks.run import final_accuracies, run_group
from benchmarks.runner.config import Options, RunConfig, train_config
from benchmarks.runner.forked_jobs import available_cores, run_tasks
from benchmarks.runner.prepare import num_classes, prepare
from benchmarks.runner.presets import PRESETS
from experiments.common import preset_parser

__all__ = ["PROTOCOLS", "measure", "main"]

PROTOCOLS = ("head", "order", "classes")
GROUPS = ("tangent", "independent")


def measure(run: Dict, seeds: int, out_dir: str, *, data_root=None, weights=None, jobs: int = 1) -> List[Dict]:
    """One row per (protocol, seed, method): the final accuracy on the whole test stream."""
    config = RunConfig.from_dict(run)
    train, test, top = prepare(config, data_root=data_root, weights=weights)
    cfg = train_config(config, Options(), num_classes=num_classes(train), seed=0)
    groups = {g.name: g for g in method_groups()}
    # the class orders of the "classes" protocol (seed 0: the main job's)
    scenarios = {s: make_scenario(config.scenario, train, test, config.tasks, seed=s) for s in range(seeds)}
    tasks = [(protocol, seed, name) for protocol in PROTOCOLS for seed in range(seeds) for name in GROUPS
             if not (protocol != "head" and seed == 0)]  # seed 0 of every protocol is the same run

    def one(task):
        protocol, seed, name = task
        seeded = replace(cfg, seed=seed if protocol == "order" else 0, head_seed=seed if protocol == "head" else 0)
        group = groups[name]
        rows = run_group(group, group.row_names, scenarios[seed if protocol == "classes" else 0], top, seeded,
                         dict(scenario=config.scenario), os.path.join(out_dir, "logs"), components=False)
        return final_accuracies(rows, config.tasks)

    finals = dict(zip(tasks, run_tasks(one, tasks, jobs)))
    rows = []
    for protocol in PROTOCOLS:
        for seed in range(seeds):
            for name in GROUPS:
                accs = finals[(protocol if seed else "head", seed, name)]
                rows += [dict(protocol=protocol, seed=seed, method=m, accuracy=a) for m, a in accs.items()]
    return rows


def main(argv=None) -> List[Dict]:
    """Measure and print the spread per protocol and row."""
    parser = preset_parser(__doc__)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--out", default="results/variance")
    parser.add_argument("--jobs", type=int, default=available_cores())
    args = parser.parse_args(argv)
    from benchmarks.networks.arithmetic import runner_arithmetic

    runner_arithmetic()  # the runner's one CPU arithmetic (AVX2), before torch computes
    run = next(r for r in PRESETS[args.preset] if r["scenario"] == "class")
    rows = measure(run, args.seeds, args.out, data_root=args.data_root, weights=args.weights, jobs=args.jobs)
    os.makedirs(args.out, exist_ok=True)
    write_rows_csv(rows, os.path.join(args.out, "variance.csv"), VARIANCE_COLUMNS, "variance")
    methods = list(dict.fromkeys(r["method"] for r in rows))
    print(f"Standard deviation of the final accuracy over {args.seeds} seeds (points), one source varied at a time:")
    print("| protocol | " + " | ".join(methods) + " |\n|---|" + "---:|" * len(methods))
    for protocol in PROTOCOLS:
        stds = [100 * mean_std([r["accuracy"] for r in rows if r["protocol"] == protocol and r["method"] == m])[1]
                for m in methods]
        print(f"| {protocol} | " + " | ".join(f"{s:.1f}" for s in stds) + " |")
    return rows


if __name__ == "__main__":
    main()
