"""Run the TMC comparison: ``python -m benchmarks.run --preset offline`` (the main job) or
``python -m benchmarks.run --dataset caltech256 --data-root ~/data --scenario class --tasks 10 ...``.

For each run: load the dataset and an ImageNet backbone, optionally freeze and cache its trunk
(:mod:`benchmarks.runner.prepare`), build the Avalanche benchmark, and for every seed train every
method group once, evaluating each row after every experience with Avalanche's ``EvaluationPlugin``;
the (seed, group) pieces run in ``--jobs`` processes (:mod:`benchmarks.runner.forked_jobs`). Writes
``results.csv``, ``results.md`` (the paper's layout and the verdicts, :mod:`benchmarks.results.claims`)
and the plots (``--plot-format``). :func:`preflight` checks a run before any data, :func:`run_one`
runs it, :func:`main` writes the report; :mod:`benchmarks.runner.tuning` tunes.
"""

import os
import shutil
import sys
import time
from dataclasses import replace
from typing import Any, Dict, List, Optional, Sequence, Tuple

if __name__ == "__main__":  # the command's warning policy and its help, before torch and Avalanche load
    from benchmarks.runner import notices

    notices.install()
    if {"-h", "--help"} & set(sys.argv[1:]):
        from benchmarks.runner.arguments import build_parser

        build_parser().parse_args()

import torch

from avalanche_tmc.files.filesystem import check_writable
from benchmarks import report
from benchmarks.datasets.loading import decode_once
from benchmarks.datasets.registry import FOLDER_DATASETS, dataset_label
from benchmarks.methods import MethodGroup, TrainConfig, config_for, groups_for, representatives, tuning_unit
from benchmarks.networks.threads import available_cores
from benchmarks.protocol.scenarios import make_scenario, task_test_stream
from benchmarks.runner import terminal
from benchmarks.runner.arguments import RUN_KEYS, parse_args, resolve, resolve_runs
from benchmarks.runner.config import Options, RunConfig, loader_options, progress_key, regime_label, train_config
from benchmarks.runner.epoch_log import groups_progress
from benchmarks.runner.estimate import estimate_text, estimated_seconds, seconds_per_image
from benchmarks.runner.folder_files import existing_folder
from benchmarks.runner.forked_jobs import run_tasks
from benchmarks.runner.groups import (
    final_accuracies,
    head_parameter_counts,
    load_progress,
    make_evaluator,
    progress_path,
    run_group,
    save_progress,
)
from benchmarks.runner.prepare import first_experience_batches, load_run_dataset, num_classes, prepare
from benchmarks.runner.refusals import Refusal, is_refusal
from benchmarks.runner.terminal import REPLAY_GROUPS, piece_label, schedule_text, tuned_text
from benchmarks.runner.tuning import tune_config
from benchmarks.tuning.grid import Trial, TuningGrid, edges

__all__ = ["RUN_KEYS", "parse_args", "resolve", "resolve_runs", "make_evaluator", "prepare", "head_parameter_counts",
           "run_group", "final_accuracies", "tune_config", "regime_label", "run_one", "main",
           "preflight", "check_backbone", "check_data", "check_tasks", "check_weights"]


def preflight(runs: Sequence[RunConfig], options: Options) -> None:
    """Refuse (:class:`~benchmarks.runner.refusals.Refusal`), before anything is written (no
    output folder, no settings), what would fail later: more threads than cores, options
    that do not go together, unknown methods or backbones, a missing package, weights file
    or dataset, a ``--data-option`` the loader does not take, a class too small for its
    split, a ``--tasks`` the data cannot be split into, a weights file whose hash does not
    match its name or that is not a state dict of the backbone."""
    from avalanche_tmc.training.devices import device_problem

    problem = device_problem(options.device)
    if problem is not None:  # before any data is prepared
        raise Refusal(f"--device {options.device}: {problem}")
    cores = available_cores()
    if options.jobs * options.threads > cores and not options.deterministic:
        raise Refusal(f"--jobs {options.jobs} x --threads {options.threads} = {options.jobs * options.threads} "
                      f"threads on {cores} core(s): lower --jobs or --threads (each job is one process).")
    from benchmarks.datasets.registry import DATASETS

    checked: set = set()  # the (backbone, weights) loaded once
    for run in runs:
        if run.dataset not in DATASETS:
            raise Refusal(f"unknown dataset {run.dataset!r}; valid names: {', '.join(sorted(DATASETS))} "
                          "(python -m benchmarks.datasets says what each needs).")
        try:
            groups_for(list(run.methods))
        except ValueError as error:
            raise Refusal(str(error)) from None
        cached = str(run.freeze_until).lower() not in ("none", "")
        if run.transforms != "square" and cached:
            raise Refusal(f"--transforms {run.transforms} augments images at every epoch, but --freeze-until "
                          f"{run.freeze_until} caches the frozen trunk's features once: use --freeze-until none, or "
                          "--transforms square.")
        if run.transforms != "square" and run.dataset not in FOLDER_DATASETS:
            raise Refusal(f"--transforms {run.transforms} applies to the image-folder datasets "
                          f"({', '.join(FOLDER_DATASETS)}), not to {run.dataset}.")
        if options.decoded_cache and (cached or run.dataset not in FOLDER_DATASETS):
            raise Refusal(f"--decoded-cache caches decoded image files; {run.dataset} with --freeze-until "
                          f"{run.freeze_until} decodes none per batch: drop --decoded-cache.")
        if run.linearize_from and cached:
            raise Refusal(f"--linearize-from {run.linearize_from} with --freeze-until {run.freeze_until}: the trunk "
                          "before --freeze-until is already frozen and cached; give one of them.")
        check_backbone(run, options)
        check_data(run, options)
        check_weights(run, options, checked)


def check_data(run: RunConfig, options: Options) -> None:
    """Refuse a ``--data-option`` the dataset's loader does not take, a dataset that is
    missing here or too small for its split, and a ``--tasks`` the data cannot be split
    into. The dataset is loaded (image folders: listed, nothing decoded; tensor data sets:
    read once, then kept in memory for the run)."""
    from benchmarks.datasets.registry import DATASETS

    taken = [o for o in DATASETS[run.dataset].options() if o not in ("data_root", "image_size", "normalization")]
    unknown = sorted(set(run.data_options) - set(taken))
    if unknown:
        raise Refusal(f"--data-option {', '.join(unknown)}: dataset {run.dataset} takes no such option; its options: "
                      f"{', '.join(taken) or 'none'}.")
    try:
        train, _ = load_run_dataset(run, options.data_root)
    except (TypeError, ValueError) as error:
        if is_refusal(error):
            raise
        options_text = " ".join(f"--data-option {k}={v}" for k, v in run.data_options.items())
        raise Refusal(f"dataset {run.dataset}{' with ' + options_text if options_text else ''}: {error}") from None
    check_tasks(run, train)


def check_tasks(run: RunConfig, train: Any) -> None:
    """Refuse a ``--tasks`` that ``run``'s scenario cannot split ``train`` into (more
    experiences than classes; a domain split of another count; more shards than samples)."""
    classes = len(set(int(t) for t in torch.as_tensor(train.targets).tolist()))
    if run.scenario in ("class", "task") or run.task_il:
        if run.tasks > classes:
            raise Refusal(f"--tasks {run.tasks}: {run.dataset} has {classes} classes, so a {run.scenario}-incremental "
                          f"run has at most {classes} experiences (one class each): lower --tasks.")
    if run.scenario == "data":
        domains = getattr(train, "domains", None)
        if domains is not None:
            count = len(set(int(d) for d in torch.as_tensor(domains).tolist()))
            if run.tasks != count:
                raise Refusal(f"--tasks {run.tasks}: {run.dataset} has {count} domains, one data-incremental "
                              f"experience each: use --tasks {count}.")
        elif run.tasks > len(train):
            raise Refusal(f"--tasks {run.tasks}: {run.dataset} has {len(train)} training samples, fewer than the "
                          "experiences: lower --tasks.")


def check_backbone(run: RunConfig, options: Options) -> None:
    """Refuse an unknown backbone, or one whose package or weights are not on this machine
    (the runner never downloads), or whose weights file is damaged: its SHA-256 does not
    match the hash in its name."""
    from avalanche_tmc.factories.models import WeightsNotFoundError, check_hub_hash
    from benchmarks.datasets.packages import require
    from benchmarks.networks.backbones import (
        TIMM_INSTALL,
        efficientnet_lite0_weights_path,
        find_weights,
        resolve_backbone,
        timm_weights_file,
    )

    try:
        source, name = resolve_backbone(run.backbone)
    except ValueError as error:
        raise Refusal(str(error)) from None
    if options.weights is not None:
        path = os.path.expanduser(options.weights)
        if not os.path.isfile(path):
            raise Refusal(f"--weights {options.weights}: no such file (a state dict saved with "
                          "torch.save(model.state_dict(), path)).")
        check_hub_hash(path)
    elif source == "efficientnet_lite0":
        efficientnet_lite0_weights_path()
    elif source == "torchvision":
        check_hub_hash(find_weights(name, run.imagenet_weights))
    else:
        require("timm", TIMM_INSTALL, f"timm model {name!r}")
        import timm

        try:  # the user's own cache of its pretrained tag (found, not loaded), else how to fill it
            timm_weights_file(timm.create_model(name, pretrained=False), name)
        except WeightsNotFoundError as error:
            raise Refusal(str(error)) from None


def check_weights(run: RunConfig, options: Options, checked: set) -> None:
    """Refuse a ``--weights`` file that is not a state dict of ``run``'s backbone (garbage,
    another network's): the backbone is loaded from it here, once per backbone and file
    (``checked``), so that it fails before the output folder is written, not after."""
    from benchmarks.networks.backbones import load_backbone

    if options.weights is None:
        return
    path = os.path.expanduser(options.weights)
    key = (run.backbone, os.path.abspath(path), run.imagenet_weights)
    if key in checked:
        return
    try:
        load_backbone(run.backbone, weights=path, version=run.imagenet_weights)
    except Exception as error:  # noqa: BLE001  (whatever the file is, it is not these weights)
        if is_refusal(error):
            raise
        why = " ".join(str(error).split())[:300]
        raise Refusal(f"--weights {options.weights}: not a state dict of {run.backbone} ({type(error).__name__}: "
                      f"{why}); save one with torch.save(model.state_dict(), path).") from None
    checked.add(key)


def _hyper_parameters(group: MethodGroup, cfg: TrainConfig, train_size: int) -> Dict[str, Any]:
    """The learning rate and epochs ``group`` trained with, and a replay method's buffer in
    samples and as a fraction of the training set (results columns)."""
    if group.family == "training-free":
        return dict(lr="", epochs=1)
    used = config_for(group, cfg)
    replay = dict(replay_fraction=cfg.mem_size / train_size, replay_buffer=cfg.mem_size) \
        if group.name in REPLAY_GROUPS else {}
    return dict(lr=used.lr_tangent if group.family == "tangent" else used.lr, epochs=used.epochs, **replay)


def run_one(run: RunConfig, options: Options, out_dir: str) -> Tuple[List[Dict[str, Any]], List[Dict]]:
    """All method groups of one (dataset, scenario, tasks, regime) run over its seeds: its
    result rows (one per seed) and, when the run is tuned, its tuning trials."""
    groups = groups_for(list(run.methods))
    train, test, top = prepare(run, data_root=options.data_root, weights=options.weights)
    if options.decoded_cache:  # before the scenario wraps them (preflight: image folders only)
        train, test = (decode_once(d, num_workers=options.workers) for d in (train, test))
    # groups whose training reads task labels (LwF, joint training) train the task-IL column themselves
    task_run = run.replace(scenario="task", task_il=False) if run.task_il else None
    own_task = any(group.task_aware for group, _ in groups) and task_run is not None

    def streams(data_seed: int) -> Tuple[Any, Any, Any]:
        """The scenario, the task-IL test stream and the task-IL scenario of one class order / shards."""
        return (make_scenario(run.scenario, train, test, run.tasks, seed=data_seed, class_order=run.class_order,
                              shards=run.shards),
                task_test_stream(train, test, run.tasks, seed=data_seed, class_order=run.class_order)
                if run.task_il else None,
                make_scenario("task", train, test, run.tasks, seed=data_seed, class_order=run.class_order)
                if own_task else None)

    data_seeds = {seed: options.data_seed + (seed if run.order_by_seed else 0) for seed in run.seeds}
    by_data_seed = {d: streams(d) for d in sorted(set(data_seeds.values()))}
    bm, task_stream, task_bm = by_data_seed[data_seeds[run.seeds[0]]]
    cached = str(run.freeze_until).lower() not in ("none", "")
    loader = {} if cached else loader_options(options)  # cached features are tensors: no decoding to share
    show_progress = options.progress if options.progress is not None else not cached
    classes = num_classes(train)
    bn_batches = first_experience_batches(bm, run.batch_size) if options.bn_data != "none" else None
    cfg = train_config(run, options, num_classes=classes, seed=run.seeds[0], bn_batches=bn_batches,
                       train_size=len(train))
    old_head, new_head = head_parameter_counts(top, classes)
    trained = sum(p.numel() for p in top.parameters()) - old_head + new_head
    label = dataset_label(run.dataset, options.data_root)
    print(f"[{label}] {run.scenario}-incremental, {run.tasks} experiences, {classes} classes, "
          f"{trained / 1e6:.2f} M trained parameters, "
          + ("learning rate and epochs per tuning unit tuned below" if run.tune is not None else
             f"{cfg.epochs} epochs/experience, Adam lr {cfg.lr_tangent} (tangent), SGD lr {cfg.lr} (non-linear)"
             + terminal.capped_text([g for g, _ in groups], cfg)
             + (f", tuned: {tuned_text(run.tuned)}" if run.tuned else "")
             + f", {schedule_text(cfg, per_unit=bool(run.tuned))}")
          + f", batch {cfg.batch_size}, RSL beta {cfg.beta}"
          + (f" (TME: its own components, beta {run.tme_beta})" if run.tme_beta is not None else "")
          + (f", linearized from {run.linearize_from}" if run.linearize_from else "")
          + (f", decay on delta {run.decay:g} ({run.decay_kind})" if run.decay else "")
          + (f", {run.transforms} transforms" if run.transforms != "square" else "")
          + (f", {options.workers} loader workers" if loader else "")
          + (f", autocast {options.amp}" if options.amp else "")
          + (", tangent BatchNorm statistics from the first experience" if cfg.bn_batches is not None else "")
          + (", also evaluated task-incrementally (the same training under the task mask)" if run.task_il else "")
          + terminal.replay_text([g.name for g, _ in groups], cfg.mem_size, len(train))
          + f"; seeds {', '.join(map(str, run.seeds))}; {options.jobs} job(s) x {options.threads} thread(s)"
          + (" (rounds otherwise than one thread: these rows differ from a one-thread run's)"
             if options.threads != 1 else ""),
          flush=True)
    progress_dir = os.path.join(out_dir, "progress")
    trials: List[Trial] = []
    chosen: Dict[str, Trial] = {}
    if run.tune is not None:  # on the first seed's training randomness
        units = [u for u in representatives() if u in {tuning_unit(g) for g, _ in groups}]
        cfg, trials, chosen = tune_config(run, options, train, top, cfg, units, progress_dir=progress_dir)
    base_row = dict(dataset=label, scenario=run.scenario, tasks=run.tasks, backbone=run.backbone,
                    regime=regime_label(run.freeze_until), trained_params=trained,
                    tuned="yes" if trials else (run.tuned_by or "no"))
    pieces = [(seed, group, rows, run) for seed in run.seeds for group, rows in groups]
    if task_bm is not None:
        pieces += [(seed, group, rows, task_run) for seed in run.seeds for group, rows in groups if group.task_aware]
    order = {(seed, group.name, piece_run.scenario): i for i, (seed, group, _, piece_run) in enumerate(pieces)}
    tasks = sorted(pieces, key=lambda t: -t[1].cost)  # the costliest first

    kept: Dict[int, List[Dict[str, Any]]] = {}  # method groups finished by an earlier run
    for i, (seed, group, rows, piece_run) in enumerate(tasks):
        progress = progress_path(progress_dir, progress_key(piece_run, options, seed, cfg.mem_size), group)
        found = None if options.restart else load_progress(progress, seed=seed, methods=rows)
        if found is not None:
            kept[i], name = found, piece_label(seed, rows, piece_run is task_run)
            print(f"  {name:25s} finished by an earlier run: kept from {progress} (--restart to retrain)", flush=True)
    todo = [(group, cfg) for i, (_, group, _, _) in enumerate(tasks) if i not in kept]
    seconds = estimated_seconds(todo, len(train), seconds_per_image(top, bm.train_stream[0].dataset, cfg.batch_size),
                                options.jobs) if todo and cached and cfg.device == "cpu" else None
    print(terminal.plan_text(len(run.seeds), len(groups), len(tasks), len(kept), options.jobs, estimate_text(seconds)),
          flush=True)

    def do(task) -> List[Dict[str, Any]]:
        seed, group, rows, piece_run = task
        seed_cfg = replace(cfg, seed=seed)
        progress = progress_path(progress_dir, progress_key(piece_run, options, seed, cfg.mem_size), group)
        seed_bm, seed_task_stream, seed_task_bm = by_data_seed[data_seeds[seed]]
        own_task_run = piece_run.scenario == "task" and seed_task_bm is not None  # (a copy in a job's process)
        group_rows = run_group(group, rows, seed_task_bm if own_task_run else seed_bm, top, seed_cfg,
                               dict(base_row, scenario=piece_run.scenario, seed=seed, data_seed=data_seeds[seed],
                                    **_hyper_parameters(group, seed_cfg, len(train))),
                               os.path.join(out_dir, "logs", piece_run.label, f"seed{seed}"), verbose=options.verbose,
                               loggers=options.loggers, parallel=options.parallel, loader=loader,
                               progress=show_progress, label=piece_label(seed, rows, piece_run is task_run),
                               task_stream=None if own_task_run or group.task_aware else seed_task_stream)
        save_progress(progress, group_rows)  # a kill after this point does not lose the group
        return group_rows

    started = time.time()

    def finished(count: int) -> None:  # the ETA from the groups trained now, not those kept
        print(f"  [{groups_progress(len(kept) + count, len(tasks), time.time() - started, restored=len(kept))}]",
              flush=True)

    trained = iter(run_tasks(do, [t for i, t in enumerate(tasks) if i not in kept], options.jobs, options.threads,
                             options.deterministic, on_done=finished))
    done = [kept[i] if i in kept else next(trained) for i in range(len(tasks))]
    results = [row for _, rows in sorted(zip(tasks, done), key=lambda td: order[(td[0][0], td[0][1].name,
                                                                                  td[0][3].scenario)])
               for row in rows]
    grid = TuningGrid.from_dict(run.tune or {}) if trials else None
    trial_rows = [dict(dataset=label, scenario=run.scenario, tasks=run.tasks, regime=base_row["regime"],
                       family=t.family, lr=t.lr, epochs=t.epochs, validation_accuracy=t.score,
                       chosen="yes" if chosen.get(t.family) is t else "no",
                       edge=", ".join(edges(t, grid, trials)) if chosen.get(t.family) is t else "",
                       rows=" ".join(f"{m}={a:.4f}" for m, a in t.accuracies.items())) for t in trials]
    return results, trial_rows


def main(argv: Optional[Sequence[str]] = None) -> List[Dict[str, Any]]:
    """Run every run of the preset / command line and write the report; a Ctrl-C raises
    :class:`~benchmarks.runner.terminal.Interrupted` (what was kept, how to resume)."""
    out: List[str] = []  # the output folder, once known
    with terminal.says_what_was_kept(out, argv):
        return _main(argv, out)


def _main(argv: Optional[Sequence[str]], out: List[str]) -> List[Dict[str, Any]]:
    args = parse_args(argv)
    print(terminal.arithmetic_header(args.native_arithmetic), flush=True)  # pinned before torch's first operation
    runs, options = resolve(args)
    preflight(runs, options)
    out_dir = options.out or os.path.join("results", args.preset or dataset_label(runs[0].dataset, options.data_root))
    out.append(out_dir)
    try:  # refused before any training (the library's check, which the command line uses too); nothing is
        # created here: the folder is made when it is claimed, and removed again if nothing was done
        check_writable(existing_folder(out_dir), create=False)
    except OSError as error:
        raise Refusal(f"The output folder {out_dir!r} is not writable ({error.strerror or error}); "
                      "choose another with --out.") from None
    if options.deterministic:  # (the threads of every piece: benchmarks.runner.forked_jobs.run_tasks)
        torch.use_deterministic_algorithms(True)
    start = time.time()
    from benchmarks.runner import outdir  # the folder's lock, settings and status

    with outdir.claim(out_dir, runs, options) as folder:  # one invocation at a time, its settings only
        for name, run in zip(folder.planned, runs):
            kept = folder.kept(name)
            if kept is not None:  # finished by an earlier invocation with these settings: the same rows
                print(f"[{name}] finished by an earlier run: kept from {out_dir} (--restart to retrain)", flush=True)
                folder.finished(name)
                continue
            run_rows, run_trials = run_one(run, options, out_dir)
            folder.finished(name, run_rows, run_trials)
            # keep what is done if a later run fails; results.md and status.json name the runs still missing;
            # results.csv keeps the rows it held (merged, never fewer)
            report.write_report(folder.rows(), out_dir, missing=folder.missing, formats=options.plot_formats)
            if folder.trials():
                report.write_tuning_csv(folder.trials(), os.path.join(out_dir, "tuning.csv"))
        rows, trials = folder.rows(), folder.trials()
        paths = report.write_report(rows, out_dir, formats=options.plot_formats)
        if trials:
            report.write_tuning_csv(trials, os.path.join(out_dir, "tuning.csv"))
        folder.complete()
        # The run is complete: its results are in results.csv and its runs in runs/ (a re-run
        # keeps them; --restart retrains). Progress files only serve to resume an interrupted run.
        shutil.rmtree(os.path.join(out_dir, "progress"), ignore_errors=True)
    # the table, then the verdicts its caption promises below it
    print("\n" + report.markdown_table(rows) + "\n" + terminal.decided_claims(rows, str(paths["markdown"])))
    print(f"\nTotal time {time.time() - start:.0f}s, {options.jobs} job(s) x {options.threads} thread(s) "
          f"({options.device}). Written: {', '.join(str(p) for p in paths.values())}")
    return rows


if __name__ == "__main__":
    sys.exit(terminal.interruptible(main))
