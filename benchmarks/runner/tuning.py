"""Tuning a run before it is trained (``--tune``, a preset's ``tune``): :func:`tune_config`
chooses each tuning unit's learning rate and epochs on a validation split of the training
data (:mod:`benchmarks.tuning.grid`), training each trial with :func:`benchmarks.runner.groups.run_group`
in the run's job processes, the longest first, and keeping it as a progress file.
"""

import contextlib
import io
import os
import time
from dataclasses import replace
from typing import Dict, List, Sequence, Tuple

from avalanche_tmc import DivergenceError
from benchmarks.methods import TrainConfig, group_named, method_groups, representatives, tuning_unit
from benchmarks.protocol.scenarios import make_scenario
from benchmarks.runner.config import Options, RunConfig, progress_key
from benchmarks.runner.epoch_log import format_seconds
from benchmarks.runner.forked_jobs import run_tasks
from benchmarks.runner.groups import final_accuracies, load_progress, progress_path, run_group, save_progress
from benchmarks.runner.prepare import first_experience_batches
from benchmarks.tuning.grid import Trial, TuningGrid, edges, tune, validation_split

__all__ = ["tune_config"]


def _trial_config(cfg: TrainConfig, unit: str, lr: float, epochs: int) -> TrainConfig:
    """``cfg`` with tuning unit ``unit`` trained at ``lr`` for ``epochs``."""
    return replace(cfg, tuned=dict(cfg.tuned, **{unit: (lr, epochs)}))


def tune_config(run: RunConfig, options: Options, train, top, cfg: TrainConfig, units: Sequence[str], *,
                progress_dir: str) -> Tuple[TrainConfig, List[Trial], Dict[str, Trial]]:
    """``cfg`` with each tuning unit's learning rate and epochs chosen on a validation split
    of ``train`` (:mod:`benchmarks.tuning.grid`), and every trial. Each trial is kept under
    ``progress_dir`` so an interrupted tuning resumes; trials run in ``options.jobs``
    processes."""
    grid = TuningGrid.from_dict(run.tune or {})
    fit, val = validation_split(train, grid.val_fraction, seed=options.data_seed)
    bm = make_scenario(run.scenario, fit, val, run.tasks, seed=options.data_seed, class_order=run.class_order,
                       shards=run.shards)
    print(f"  tuning on a validation split: {len(fit)} train / {len(val)} validation samples (from the training "
          f"set), {len(grid.trials('tangent'))} trials per unit ({', '.join(units)}), "
          + (f"lr x0.1 at {', '.join(f'{f:g}' for f in grid.decay_at)} of the epochs" if grid.decay_at else
             "no learning-rate decay"), flush=True)
    groups = {g.name: g for g in method_groups()}
    for unit in units:  # which rows choose a unit's values, and which rows train with them
        scored = groups[representatives()[unit]]
        also = [g.name for g in groups.values() if tuning_unit(g) == unit and g is not scored]
        print(f"    {unit}: scored by {', '.join(scored.row_names)} (validation accuracy)"
              + (f"; {', '.join(also)} train{'s' if len(also) == 1 else ''} with its values" if also else ""),
              flush=True)
    trial_cfg = replace(cfg, decay_at=grid.decay_at,
                        bn_batches=first_experience_batches(bm, cfg.batch_size) if options.bn_data != "none" else None)
    key = progress_key(run, options, cfg.seed, cfg.mem_size)

    def run_trial(trial: Tuple[str, float, int]) -> Dict[str, float]:
        unit, lr, epochs = trial
        group = groups[representatives()[unit]]
        path = progress_path(progress_dir, dict(key, trial=[unit, lr, epochs], decay_at=grid.decay_at), group)
        rows = None if options.restart else load_progress(path)
        if rows is None:
            try:
                with contextlib.redirect_stdout(io.StringIO()):  # the trial's per-experience lines
                    rows = run_group(group, group.row_names, bm, top, _trial_config(trial_cfg, unit, lr, epochs),
                                     dict(scenario=run.scenario), os.path.join(progress_dir, "tuning-logs"),
                                     components=False)
            except DivergenceError as error:  # a learning rate too high for this unit: scored 0
                print(f"    {unit:13s} lr {lr:g}, {epochs} epochs: diverged ({error})", flush=True)
                rows = [dict(method=m, model="composed", eval_exp="all", after_task=run.tasks, accuracy=0.0)
                        for m in group.row_names]
            save_progress(path, rows)
        accs = final_accuracies(rows, run.tasks)
        print(f"    {unit:13s} lr {lr:g}, {epochs} epochs: validation "
              + "  ".join(f"{m} {a:.3f}" for m, a in accs.items()), flush=True)
        return accs

    chosen, trials = tune(units, grid, run_trial, lambda keys: _in_order(keys, run_trial, options))
    tuned = dict(cfg.tuned, **{u: (t.lr, t.epochs) for u, t in chosen.items()})
    cfg = replace(cfg, decay_at=grid.decay_at, tuned=tuned)
    print("  chosen: " + "; ".join(
        f"{u} lr {t.lr:g}, {t.epochs} epochs (validation {t.score:.3f}"
        + (f"; on the edge of what was tried: {', '.join(edges(t, grid, trials))}"
           if edges(t, grid, trials) else "") + ")"
        for u, t in chosen.items()), flush=True)
    return cfg, trials, chosen


def _cost(trial: Tuple[str, float, int]) -> float:
    """A rough relative cost of a tuning trial, to start the longest first: its epochs times
    the registered cost of the group its unit trains (:attr:`MethodGroup.cost`)."""
    unit, _, epochs = trial
    return epochs * group_named(representatives()[unit]).cost


def _in_order(trials: List[Tuple[str, float, int]], function, options: Options) -> List[Dict[str, float]]:
    """``function`` of every trial over ``options.jobs`` processes, the longest first, the
    results in the order of ``trials``."""
    order = sorted(range(len(trials)), key=lambda i: -_cost(trials[i]))
    started = time.time()

    def finished(count: int) -> None:  # an ETA for this round's trials, from those trained so far
        elapsed = time.time() - started
        print(f"    [{count}/{len(trials)} trials of this round done, {format_seconds(elapsed)} elapsed, ETA "
              f"{format_seconds(elapsed / count * (len(trials) - count))}]", flush=True)

    results = run_tasks(function, [trials[i] for i in order], options.jobs, options.threads, options.deterministic,
                        on_done=finished)
    by_index = dict(zip(order, results))
    return [by_index[i] for i in range(len(trials))]
