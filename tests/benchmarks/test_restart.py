"""A ``--restart`` replaces the output folder's rows whole or not at all (issue 52, item 11):
a restart with other settings stopped once it has claimed the folder (killed, or
interrupted after a method group finished) and then resumed without ``--restart`` must not
report the old run's rows beside the new. The runner's ``main`` with its training replaced
by synthetic rows, one per method."""

import json
import os

import pytest

from benchmarks import report
from benchmarks.runner import outdir
from benchmarks.runner.refusals import Refusal


def _rows(run):
    return [dict(dataset=run.dataset, scenario=run.scenario, tasks=run.tasks, backbone=run.backbone, method=method,
                 model="composed", after_task=run.tasks, eval_exp="all", accuracy=0.5, train_seconds=1.0,
                 eval_seconds=0.1, regime=f"from {run.freeze_until}", trained_params=10, lr=0.01, epochs=run.epochs,
                 tuned="no", setting="", seed=seed) for seed in run.seeds for method in run.methods]


@pytest.fixture
def runner(monkeypatch):
    from benchmarks import run

    monkeypatch.setattr(run, "preflight", lambda runs, options: None)
    monkeypatch.setattr(run, "run_one", lambda config, options, out_dir: (_rows(config), []))
    return run


def _methods(out):
    return {r["method"] for r in report.read_csv(os.path.join(out, "results.csv"))}


def _stopped(runner, monkeypatch, out, argv, killed):
    """``runner.main(argv)`` stopped in its first run once it has claimed the folder: a method
    group finished (its progress file written) and then Ctrl-C, or ``killed`` (no clean-up)."""
    def stopped(config, options, out_dir):
        os.makedirs(os.path.join(out_dir, "progress"), exist_ok=True)
        with open(os.path.join(out_dir, "progress", "tmc-0123456789abcdef.json"), "w", encoding="utf-8") as f:
            json.dump({"rows": _rows(config)[:1]}, f)
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(runner, "run_one", stopped)
        if killed:
            m.setattr(outdir.OutputFolder, "undo", lambda self: False)
        with pytest.raises(KeyboardInterrupt):
            runner.main(argv)


@pytest.mark.parametrize("killed", [False, True], ids=["interrupted-after-a-group", "killed"])
def test_a_stopped_restart_resumed_without_restart_holds_only_the_new_runs_rows(tmp_path, runner, monkeypatch,
                                                                                killed):
    out = str(tmp_path / "out")
    runner.main(["--preset", "offline", "--out", out, "--methods", "tmc,naive"])
    assert _methods(out) == {"tmc", "naive"}
    new = ["--preset", "offline", "--out", out, "--methods", "tmc,ewc"]
    _stopped(runner, monkeypatch, out, new + ["--restart"], killed)
    rows = runner.main(new)  # the resume, without --restart: it goes on with the restart
    assert {r["method"] for r in rows} == _methods(out) == {"tmc", "ewc"}
    with open(os.path.join(out, outdir.STATUS_FILE), encoding="utf-8") as f:
        assert json.load(f)["complete"]
    runner.main(new)  # and the next resume keeps it
    assert _methods(out) == {"tmc", "ewc"}


def test_a_stopped_restart_then_the_old_settings_are_refused_naming_restart(tmp_path, runner, monkeypatch):
    out = str(tmp_path / "out")
    old = ["--preset", "offline", "--out", out, "--methods", "tmc,naive"]
    runner.main(old)
    _stopped(runner, monkeypatch, out, ["--preset", "offline", "--out", out, "--methods", "tmc,ewc", "--restart"],
             killed=True)
    with pytest.raises(Refusal, match="--restart"):  # the folder is the restart's now: never half of each
        runner.main(old)


def test_a_restart_stopped_before_any_group_finished_leaves_the_folder_as_it_was(tmp_path, runner, monkeypatch):
    out = str(tmp_path / "out")
    old = ["--preset", "offline", "--out", out, "--methods", "tmc,naive"]
    runner.main(old)
    with monkeypatch.context() as m:
        m.setattr(runner, "run_one", lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
        with pytest.raises(KeyboardInterrupt):
            runner.main(["--preset", "offline", "--out", out, "--methods", "tmc,ewc", "--restart"])
    assert runner.main(old) and _methods(out) == {"tmc", "naive"}  # kept, nothing replaced
