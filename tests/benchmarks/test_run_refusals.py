"""The runner and the report refuse bad input at the boundary and never leave a half-written
file (moved from ``tests/avalanche_tmc/test_reliability.py``: they test ``benchmarks``)."""

import re

import pytest
import torch


@pytest.mark.parametrize("argv, message", [
    (["--beta", "-25"], "--beta: must be in"),
    (["--beta", "nan"], "--beta: must be in"),
    (["--epochs", "-1"], "--epochs: must be at least 1"),
    (["--epochs", "0"], "--epochs: must be at least 1"),
    (["--tasks", "two"], "--tasks: expected a positive integer"),
    (["--batch-size", "0"], "--batch-size: must be at least 1"),
    (["--lr-tangent", "1e30"], r"--lr-tangent: must be in \(0, 1\]"),
    (["--lr-tangent", "-0.001"], "--lr-tangent: must be in"),
    (["--lr", "inf"], r"--lr: must be in \(0, 10\]"),
    (["--milestones", "15,10"], "milestones must be increasing"),
    (["--projection-dim", "0"], "--projection-dim: must be at least 1"),
    (["--projection-dim", "16385"], r"--projection-dim: must be in 1\.\.16384"),
])
def test_runner_refuses_bad_arguments(argv, message, capsys):
    from benchmarks import run

    with pytest.raises(SystemExit):
        run.parse_args(argv)
    assert re.search(message, capsys.readouterr().err)


def test_a_seed_count_that_looks_like_a_seed_asks_for_the_explicit_form(capsys):
    """Issue 59, item 6: ``--seeds 100`` meant as seed 100 started a hundred-seed run. A count
    of 50 or more is refused, naming both explicit forms; the range form runs those seeds."""
    from benchmarks import run

    with pytest.raises(SystemExit) as exit_info:
        run.parse_args(["--seeds", "100"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "100 as a count runs 100 seeds (0-99): write --seeds 0-99 if that is the plan, or --seed 100 for seed " \
           "100 alone" in err
    assert run.parse_args(["--seeds", "100-102"]).seeds == (100, 101, 102)
    assert run.parse_args(["--seeds", "0-99"]).seeds == tuple(range(100))
    assert run.parse_args(["--seeds", "49"]).seeds == tuple(range(49))
    for bad in ("5-3", "1-x", "0-1000"):
        with pytest.raises(SystemExit):
            run.parse_args(["--seeds", bad])
    assert "a range of seeds must be A-B" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--seeds", "100000000"], r"a seed count must be in 1\.\.1000"),
    (["--seeds", "1001"], r"a seed count must be in 1\.\.1000"),
    (["--seeds", ",".join(map(str, range(1001)))], "at most 1000 seeds"),
    (["--seeds", "0,2147483648"], r"seeds must be distinct integers in 0\.\.2147483647"),
    (["--seed", "2147483648"], r"--seed: must be in 0\.\.2147483647"),
    (["--data-seed", "99999999999"], r"--data-seed: must be in 0\.\.2147483647"),
    (["--tasks", "1001"], r"--tasks: must be in 1\.\.1000"),
    (["--epochs", "10001"], r"--epochs: must be in 1\.\.10000"),
    (["--milestones", "5,10001"], "milestones must be at most 10000"),
    (["--batch-size", "65537"], r"--batch-size: must be in 1\.\.65536"),
    (["--image-size", "4097"], r"--image-size: must be in 1\.\.4096"),
    (["--jobs", "257"], r"--jobs: must be in 1\.\.256"),
    (["--threads", "1025"], r"--threads: must be in 1\.\.1024"),
    (["--parallel", "257"], r"--parallel: must be in 1\.\.256"),
    (["--workers", "257"], r"--workers: must be in 0\.\.256"),
])
def test_runner_refuses_counts_beyond_their_documented_bound(argv, message, capsys):
    """Issue 42, class 4: --seeds 100000000 allocated gigabytes and never answered; every
    count-like option has an upper bound (docs/benchmarks.md), a usage error (exit 2)."""
    from benchmarks import run

    with pytest.raises(SystemExit) as exit_info:
        run.parse_args(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert re.search(message, err) and err.count("\n") == 1 and err.startswith("python -m benchmarks.run: error: ")


def test_runner_accepts_counts_at_their_bound():
    from benchmarks import run
    from benchmarks.runner.arguments import MAX_EPOCHS, MAX_SEEDS, MAX_TASKS

    args = run.parse_args(["--seeds", f"0-{MAX_SEEDS - 1}", "--tasks", str(MAX_TASKS), "--epochs", str(MAX_EPOCHS),
                           "--data-seed", "2147483647"])
    assert (len(args.seeds), args.tasks, args.epochs, args.data_seed) == (1000, 1000, 10000, 2**31 - 1)


def test_runner_accepts_good_arguments():
    from benchmarks import run

    args = run.parse_args(["--beta", "5", "--epochs", "2", "--lr-tangent", "1e-3", "--lr", "0.05",
                           "--milestones", "10,15"])
    assert (args.beta, args.epochs, args.lr_tangent, args.lr, args.milestones) == (5.0, 2, 1e-3, 0.05, (10, 15))


def test_report_files_are_written_atomically(tmp_path, monkeypatch):
    from benchmarks import report
    from benchmarks.results import files as results_io

    rows = [dict(dataset="d", scenario="class", tasks=1, backbone="b", method="tmc", model="composed",
                 after_task=1, eval_exp="all", accuracy=0.5, train_seconds=1.0, eval_seconds=0.1)]
    path = report.write_csv(rows, tmp_path / "results.csv")
    before = path.read_bytes()

    class Boom(Exception):
        pass

    def fail_midway(self, _rows):
        raise Boom()

    monkeypatch.setattr(results_io.csv.DictWriter, "writerows", fail_midway)  # the CSV writer of write_csv
    with pytest.raises(Boom):
        report.write_csv(rows * 2, path)
    assert path.read_bytes() == before  # the old file is intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.csv"]  # and no temporary left


def test_runner_checks_the_output_folder_before_training(tmp_path):
    import os

    from benchmarks import run

    file_in_the_way = tmp_path / "file"
    file_in_the_way.write_text("x")
    with pytest.raises(SystemExit, match="not writable"):  # found before any data is loaded
        run.main(["--dataset", "digits", "--out", str(file_in_the_way / "out")])
    locked = tmp_path / "locked"
    locked.mkdir()
    os.chmod(locked, 0o500)
    try:
        if not os.access(locked, os.W_OK):  # (root can write anywhere)
            with pytest.raises(SystemExit, match="not writable"):
                run.main(["--dataset", "digits", "--out", str(locked / "out")])
    finally:
        os.chmod(locked, 0o700)


def test_projection_dim_reaches_the_heads_and_keeps_earlier_folders_settings():
    """``--projection-dim`` is the M of every RanPAC-style head's training config; the default
    M is left out of the settings, so a folder written before the option existed still matches."""
    from benchmarks import run
    from benchmarks.runner.config import DEFAULT_PROJECTION_DIM, Options, progress_key, train_config

    (small,) = run.resolve_runs(run.parse_args(["--dataset", "digits", "--projection-dim", "64"]))
    (default,) = run.resolve_runs(run.parse_args(["--dataset", "digits"]))
    assert train_config(small, Options(), num_classes=10, seed=0).projection_dim == 64
    assert train_config(default, Options(), num_classes=10, seed=0).projection_dim == DEFAULT_PROJECTION_DIM == 2000
    assert progress_key(small, Options(), 0)["projection_dim"] == 64
    assert "projection_dim" not in progress_key(default, Options(), 0)


def test_a_misspelled_preset_gets_a_suggestion():
    from benchmarks import run
    from benchmarks.runner.refusals import Refusal

    with pytest.raises(Refusal, match="Unknown preset 'offlin'; did you mean 'offline'\\? choose from: offline, "):
        run.resolve_runs(run.parse_args(["--preset", "offlin"]))
    with pytest.raises(Refusal) as refused:
        run.resolve_runs(run.parse_args(["--preset", "zzz"]))
    assert "did you mean" not in str(refused.value)


def test_amp_init_scale_reaches_the_float16_plugin_and_is_refused_without_it(capsys):
    """``--amp-init-scale`` (added when the GPU check's 4-step experiences skipped every fp16
    step from 2**16) is the AutocastPlugin's first loss scale; without ``--amp fp16`` it is
    refused; unset, it is absent from the settings so that earlier folders still match."""
    from avalanche_tmc import AutocastPlugin
    from benchmarks import run
    from benchmarks.methods import method_groups
    from benchmarks.methods.strategy import build_strategy
    from benchmarks.runner.config import progress_key, train_config
    from benchmarks.runner.refusals import Refusal
    from tests.helpers import TinyResNet

    args = run.parse_args(["--dataset", "digits", "--amp", "fp16", "--amp-init-scale", "256", "--device", "cpu"])
    (config,), options = run.resolve(args)
    assert options.amp_init_scale == 256.0 and progress_key(config, options, 0)["amp_init_scale"] == 256.0
    cfg = train_config(config, options, num_classes=10, seed=0)
    tangent = next(g for g in method_groups() if g.name == "tangent")
    (plugin,) = [p for p in build_strategy(tangent, TinyResNet(num_classes=2), cfg, None).plugins
                 if isinstance(p, AutocastPlugin)]
    assert plugin.dtype is torch.float16 and plugin.init_scale == 256.0
    (_, default_options) = run.resolve(run.parse_args(["--dataset", "digits", "--amp", "fp16", "--device", "cpu"]))
    assert "amp_init_scale" not in progress_key(config, default_options, 0)
    with pytest.raises(Refusal, match="give it with --amp fp16"):
        run.resolve(run.parse_args(["--dataset", "digits", "--amp", "bf16", "--amp-init-scale", "256"]))
    with pytest.raises(SystemExit):
        run.parse_args(["--amp-init-scale", "0.5"])
    assert "a loss scale in [1, 2**24]" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device: nothing to refuse")
def test_an_unavailable_device_is_refused_before_any_data_is_prepared(tmp_path, monkeypatch):
    """--device cuda on a CPU-only torch: one line and exit 2 from the preflight, before the
    dataset is loaded (on 34da1e0: 29 s of preparation, then a 73-line traceback)."""
    from benchmarks import run
    from benchmarks.runner import prepare

    def never(*args, **kwargs):
        raise AssertionError("data was prepared")

    monkeypatch.setattr(prepare, "load_run_dataset", never)
    monkeypatch.setattr(run, "load_run_dataset", never)
    with pytest.raises(SystemExit) as refused:
        run.main(["--dataset", "digits", "--seeds", "1", "--device", "cuda", "--out", str(tmp_path / "out")])
    assert "--device cuda: no cuda device on this machine" in str(refused.value)
    assert not (tmp_path / "out").exists()


def test_every_tuning_unit_takes_its_own_learning_rate_and_epochs():
    """Issue 59, item 1: TME's components trained at the tangent rate with no flag of their own.
    ``--unit UNIT=LR:EPOCHS`` sets one unit, keeps the preset's others and says so in the note."""
    from benchmarks import run
    from benchmarks.runner.presets import PRESETS

    (main,) = run.resolve_runs(run.parse_args(["--preset", "offline", "--scenario", "class", "--unit", "tme=1e-4:30"]))
    preset = dict(PRESETS["offline"][0]["tuned"])
    assert main.tuned == dict(preset, tme=(1e-4, 30)) and main.tuned_by.endswith("; tme 0.0001 / 30 by --unit")
    (own,) = run.resolve_runs(run.parse_args(["--dataset", "digits", "--unit", "tme=3e-4:5", "--unit", "er=0.01:4"]))
    assert own.tuned == {"tme": (3e-4, 5), "er": (0.01, 4)} and own.tuned_by == "tme 0.0003 / 5, er 0.01 / 4 by --unit"
    for bad, message in (("teme=1e-4:3", "'teme' is not a tuning unit; the units: tangent"),
                         ("tme=1e-4", "expected UNIT=LR:EPOCHS"), ("tme=0:3", r"learning rate must be in \(0, 10\]")):
        with pytest.raises(run.Refusal, match=message):
            run.resolve_runs(run.parse_args(["--unit", bad]))
