"""Training and evaluating one method group of a run (:func:`run_group`): Avalanche's
evaluator and loggers (:func:`make_evaluator`), the accuracy rows of every evaluation, each
component alone, and the progress files that keep a finished group's rows so an
interrupted run resumes (``progress_path``, ``load_progress``, ``save_progress``).
"""

import contextlib
import hashlib
import json
import math
import os
import sys
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from avalanche.evaluation.metrics import accuracy_metrics, forgetting_metrics
from avalanche.logging import CSVLogger, InteractiveLogger
from avalanche.training.plugins import EvaluationPlugin
from torch.utils.data import DataLoader

from avalanche_tmc import DivergenceGuardPlugin, experience_seed, find_head, loss_metrics
from avalanche_tmc.arithmetic import cpu_arithmetic
from avalanche_tmc.files.filesystem import atomic_path
from avalanche_tmc.loggers import make_loggers
from benchmarks.methods import MethodGroup, TrainConfig
from benchmarks.methods.strategy import build_strategy, component_forwards, component_row, select_row
from benchmarks.protocol.task_il import EvalOutputs, Outputs, masked_accuracies, task_masked
from benchmarks.runner.epoch_log import EpochProgressPlugin
from benchmarks.runner.folder_files import check_rows, read_json
from benchmarks.runner.gloo_training import make_trainer
from benchmarks.runner.refusals import Refusal

__all__ = ["make_evaluator", "head_parameter_counts", "experience_seed", "run_group", "final_accuracies",
           "progress_path", "load_progress", "save_progress"]


def make_evaluator(out_dir: str, verbose: bool = False, loggers: Sequence[str] = ("csv",)) -> EvaluationPlugin:
    """Avalanche's metrics, logged by the ``loggers`` named (:mod:`avalanche_tmc.loggers`:
    files under ``out_dir``) and, with ``verbose``, Avalanche's interactive logger. Losses
    are named for what they are (``avalanche_tmc.loss_metrics``): a tangent method's RSL
    is ``RSL_Loss_Stream``, TME's ``NLL_Loss_Stream``, a baseline's cross-entropy
    ``CE_Loss_Stream``, never one ``Loss_Stream`` column of different losses. Every column
    the CSV logger writes is measured: training accuracy and loss per epoch, accuracy, loss
    and forgetting per evaluated experience (no validation stream: its columns stay empty)."""
    chosen = make_loggers(loggers, out_dir, os.path.basename(out_dir), text_stream=sys.stdout)
    if verbose:
        chosen.append(InteractiveLogger())
    return EvaluationPlugin(
        accuracy_metrics(epoch=True, experience=True, stream=True),
        loss_metrics(epoch=True, experience=True, stream=True),
        forgetting_metrics(experience=True, stream=True),
        loggers=chosen,
    )


def _test_accuracies(metrics: Dict[str, float], test_stream) -> Dict[str, float]:
    """Per test experience and overall (sample-weighted) accuracy from Avalanche's metrics."""
    accs, total, correct = {}, 0, 0.0
    for exp in test_stream:
        key = (f"Top1_Acc_Exp/eval_phase/{test_stream.name}_stream/Task{exp.task_label:03d}/"
               f"Exp{exp.current_experience:03d}")
        accs[str(exp.current_experience)] = float(metrics[key])
        total += len(exp.dataset)
        correct += float(metrics[key]) * len(exp.dataset)
    accs["all"] = correct / total
    return accs


@torch.no_grad()
def _component_outputs(forward, test_stream, batch_size: int, workers: int = 0, device: str = "cpu") -> Outputs:
    """One component's ``forward`` (on ``device``) over every test experience: its outputs and targets."""
    outputs = {}
    for exp in test_stream:
        batches = [(forward(batch[0].to(device)).cpu(), batch[1])
                   for batch in DataLoader(exp.dataset.eval(), batch_size=batch_size, num_workers=workers)]
        outputs[exp.current_experience] = (torch.cat([o for o, _ in batches]), torch.cat([y for _, y in batches]))
    return outputs


def _unmasked_accuracies(outputs: Outputs, test_stream) -> Dict[str, float]:
    """Accuracy of recorded ``outputs`` per test experience and overall (plain argmax)."""
    accs, total, correct = {}, 0, 0
    for exp in test_stream:
        logits, targets = outputs[exp.current_experience]
        right = int((logits.argmax(1) == targets).sum())
        accs[str(exp.current_experience)] = right / len(targets)
        total, correct = total + len(targets), correct + right
    accs["all"] = correct / total
    return accs


def head_parameter_counts(model, num_classes: int) -> Tuple[int, int]:
    """(parameters of the model's current head, parameters of a new ``num_classes`` head)."""
    head = model.get_submodule(find_head(model))
    new = num_classes * (head.in_features + (1 if head.bias is not None else 0))
    return sum(p.numel() for p in head.parameters()), new


def run_group(group: MethodGroup, rows: Sequence[str], bm, top, cfg: TrainConfig, base_row: Dict[str, Any],
              out_dir: str, *, verbose: bool = False, loggers: Sequence[str] = ("csv",),
              components: bool = True, parallel: int = 1, loader: Optional[Dict[str, Any]] = None,
              progress: bool = False, task_stream=None, label: Optional[str] = None) -> List[Dict[str, Any]]:
    """Train one group over the stream and evaluate each of its rows after every experience
    (and, with ``components``, each component alone at the end); Avalanche's logs go to
    ``out_dir/<group>`` (``verbose``/``loggers``: see :func:`make_evaluator`).
    ``task_stream`` (a class-IL run's :func:`~benchmarks.protocol.scenarios.task_test_stream`):
    every evaluation is also made on it under the task mask (:mod:`benchmarks.protocol.task_il`),
    giving the task-IL rows (``scenario="task"``, ``trained_in="class"``) of the same training.
    ``parallel > 1``: the experiences of a group whose components train independently are
    shared among that many gloo processes (:mod:`benchmarks.runner.gloo_training`). ``loader``: the
    DataLoader arguments of every training and evaluation pass (workers);
    ``progress``: a line per epoch with images/s and an ETA; ``label``: what every line
    calls this training (default ``seed <seed> <rows>``). Every row records the CPU
    arithmetic it was computed with (``arithmetic``: ``avx2`` when pinned)."""
    label = label or f"seed {cfg.seed} {'+'.join(rows)}"
    base_row = dict(base_row, arithmetic=cpu_arithmetic().label)  # what the rows are computed with, measured here
    torch.manual_seed(cfg.seed)
    loader = dict(loader or {})
    strategy = build_strategy(group, top, cfg, make_evaluator(os.path.join(out_dir, group.name), verbose, loggers))
    for plugin in strategy.plugins:  # its warnings and errors say which training they are about
        if isinstance(plugin, DivergenceGuardPlugin):
            plugin.label = label
    if progress and group.family != "training-free":
        stages_count = 1 if group.joint else len(bm.train_stream)
        strategy.plugins.append(EpochProgressPlugin(label, stages_count * strategy.train_epochs))
    train = make_trainer(strategy, group, bm, top, cfg, processes=parallel, loader=loader)
    # with a task stream, one forward pass scores both columns (benchmarks.protocol.task_il)
    recorder = EvalOutputs() if task_stream is not None else None
    if recorder is not None:
        strategy.plugins.append(recorder)
    task_base = dict(base_row, scenario="task", trained_in=base_row["scenario"])
    results, train_seconds = [], 0.0
    stages = [(len(bm.train_stream), bm.train_stream)] if group.joint else [
        (i + 1, exp) for i, exp in enumerate(bm.train_stream)]
    for after_task, data in stages:
        # Each experience's training is seeded by the run's seed and its id: a component is
        # then a function of its own data and seed, whatever was evaluated before it (a
        # DataLoader draws its base seed from the global generator) and whichever process
        # trains it (the library's rule: avalanche_tmc.experience_seed, 1000 * seed + id).
        torch.manual_seed(experience_seed(cfg.seed, 0 if group.joint else data.current_experience))
        start = time.time()
        train(strategy, data)
        train_seconds += time.time() - start
        evaluated = []
        for row in rows:
            select_row(strategy, group, row)
            evaluated += _evaluate(strategy, bm.test_stream, loader, dict(base_row, method=row, after_task=after_task,
                                                                          train_seconds=train_seconds))
            if recorder is not None:
                evaluated += _scored(masked_accuracies(recorder.outputs, task_stream),
                                     dict(task_base, model="composed", method=row, after_task=after_task,
                                          train_seconds=train_seconds))
        results += evaluated
        print(f"  {label:25s} after {after_task}/{len(bm.train_stream)}: "
              + "  ".join(f"{r['method']}{' (task-IL)' if r['scenario'] == 'task' and task_stream else ''} "
                          f"{r['accuracy']:.3f}" for r in evaluated if r["eval_exp"] == "all")
              + f"  (train {train_seconds:.0f}s)", flush=True)
    rises = [rise for plugin in strategy.plugins if isinstance(plugin, DivergenceGuardPlugin)
             for rise in plugin.loss_rises]
    if rises:  # said here and recorded on the rows: the table marks them, never averages them in silently
        where = " ".join(str(experience) for experience, *_ in rises)
        how = "went non-finite" if any(math.isinf(mean) for _, _, mean, _ in rises) else "ended above twice its start"
        rate = f"lr {rises[0][3]:g} as set" if isinstance(rises[0][3], float) else "the lr as set"
        print(f"  {label:25s} WARNING: the training loss {how} in experience(s) {where} "
              f"({rate}): most likely diverged; the table marks the row", flush=True)
        results = [dict(r, loss_rose=where) for r in results]
    if group.describe is not None:
        setting = group.describe(strategy)
        print(f"  {label:25s} {setting}", flush=True)
        results = [dict(r, setting=setting) for r in results]
    getattr(train, "close", lambda: None)()  # a parallel trainer's component files
    for logger in strategy.evaluator.loggers:  # the CSV files, now (a TextLogger's stream is stdout: left open)
        if isinstance(logger, CSVLogger):
            logger.close()
    components_under = component_row(group, rows) if components else None
    if components_under is not None:
        for k, forward in component_forwards(strategy, group).items():
            outputs = _component_outputs(forward, bm.test_stream, cfg.eval_batch_size, loader.get("num_workers", 0),
                                         cfg.device)
            scored = [(masked_accuracies(outputs, bm.test_stream) if base_row["scenario"] == "task"
                       else _unmasked_accuracies(outputs, bm.test_stream), base_row)]
            if task_stream is not None:
                scored.append((masked_accuracies(outputs, task_stream), task_base))
            for accs, row_base in scored:
                results += _scored(accs, dict(row_base, method=components_under, model=f"component-{k}",
                                              after_task=len(bm.train_stream), train_seconds=train_seconds))
    return results


def _scored(accs: Dict[str, float], row: Dict[str, Any], seconds: float = 0.0) -> List[Dict[str, Any]]:
    """One result row (``row`` + accuracy, seconds) per entry of ``accs``."""
    return [dict(row, eval_exp=k, accuracy=a, eval_seconds=seconds) for k, a in accs.items()]


def _evaluate(strategy, stream, loader: Dict[str, Any], row: Dict[str, Any]) -> List[Dict[str, Any]]:
    """``strategy`` evaluated on ``stream``: one result row (``row`` + accuracy, seconds)
    per test experience and one for the whole stream. A task-IL row is evaluated under the
    task mask after every step, the first included (:func:`task_masked`): a task not yet
    trained is scored as the task-IL rows of a class-IL training are, alike for every method,
    never by an argmax over the trained classes (the mask's own default waits for two tasks)."""
    start = time.time()
    masked = task_masked(strategy, stream) if row["scenario"] == "task" else contextlib.nullcontext()
    with masked:
        accs = _test_accuracies(strategy.eval(stream, **loader), stream)
    return _scored(accs, dict(row, model="composed"), time.time() - start)


def progress_path(progress_dir: str, settings: Dict[str, Any], group: MethodGroup) -> str:
    """Where a finished method group's rows are kept, named by everything that decides
    them (the run's settings, the seed, the group and its rows), so a re-run with other
    settings never picks up a stale result."""
    settings = dict(settings, group=group.name)
    key = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return os.path.join(progress_dir, f"{group.name}-{key}.json")


ROW_KEYS = ("dataset", "scenario", "tasks", "method", "model", "after_task", "eval_exp", "accuracy", "seed")
"""What every row of a finished group's progress file holds (the runner writes more)."""


def load_progress(path: str, *, seed: Optional[int] = None,
                  methods: Optional[Sequence[str]] = None) -> Optional[List[Dict[str, Any]]]:
    """The rows of a finished group's progress file, or None when there is none. Refused
    (:class:`~benchmarks.runner.refusals.Refusal` naming it) where it is not the one the
    runner wrote for this group: not ``{"rows": [...]}`` (a bare list, a FIFO), no row, a
    row that is not a result (a NaN accuracy) and, with ``seed`` and ``methods`` (a run's
    group, not a tuning trial), a row missing one of :data:`ROW_KEYS`, of another seed (a
    file copied under another seed's name) or method, or no final row (after the last
    experience, on the whole stream: a file cut short)."""
    advice = "remove it to train that group again, or run with --restart"
    progress = read_json(path, advice)
    if progress is None:
        return None
    if not isinstance(progress, dict) or "rows" not in progress:
        raise Refusal(f"{path}: not a progress file the runner wrote ({{\"rows\": [...]}}): {advice}.")
    rows = check_rows(path, progress["rows"], advice)
    if not rows:
        raise Refusal(f"{path}: holds no row, so no finished group (emptied or cut short): {advice}.")
    if seed is None or methods is None:
        return rows
    for i, row in enumerate(rows):
        missing = [k for k in ROW_KEYS if k not in row]
        why = (f"lacks {missing}" if missing else f"is of seed {row['seed']!r}, not {seed}" if row["seed"] != seed
               else f"is of method {row['method']!r}, not one of {list(methods)}" if row["method"] not in methods
               else None)
        if why:
            raise Refusal(f"{path}: row {i + 1} {why} (edited, copied from another group or seed, or not the "
                          f"runner's): {advice}.")
    last = max(int(r["after_task"]) for r in rows)
    if last != max(int(r["tasks"]) for r in rows) or not any(r["eval_exp"] == "all" and r["after_task"] == last
                                                              for r in rows):
        raise Refusal(f"{path}: has no row after the last experience on the whole stream (cut short): {advice}.")
    return rows


def save_progress(path: str, rows: List[Dict[str, Any]]) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"rows": rows}, f)


def final_accuracies(rows: Sequence[Dict[str, Any]], after_task: int) -> Dict[str, float]:
    """Row name -> composed accuracy on the whole evaluation stream after the last experience."""
    return {r["method"]: r["accuracy"] for r in rows
            if r["model"] == "composed" and r["eval_exp"] == "all" and r["after_task"] == after_task}
