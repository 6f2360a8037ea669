"""The runner's output folder (benchmarks.runner.outdir, issue 30 cases 12 and 17): one invocation
at a time (a lock naming the other run's pid), settings that would drop earlier results
refused, and the planned runs still missing named in results.md and status.json. The
functions are called directly; the runner's ``main`` with its training replaced by
synthetic rows."""

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from benchmarks import report
from benchmarks.runner import outdir
from benchmarks.runner.config import Options, RunConfig
from benchmarks.runner.presets import MAIN_REGIME, PRESETS
from benchmarks.runner.refusals import EXIT_REFUSED, Refusal

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _runs(**changes):
    return [RunConfig.from_dict(dict(r, **changes)) for r in PRESETS["offline"]]


def _status(folder):
    with open(os.path.join(folder, outdir.STATUS_FILE), encoding="utf-8") as f:
        return json.load(f)


# ---------------------------------------------------------------------------- case 17: the lock


def test_a_second_claim_on_a_held_folder_is_refused_naming_the_pid(tmp_path):
    out = str(tmp_path / "out")
    with outdir.claim(out, _runs(), Options()):
        with pytest.raises(Refusal, match=rf"Another run \(pid {os.getpid()}\) is writing into .*out.*another --out") \
                as refused:
            with outdir.claim(out, _runs(), Options()):
                pass  # pragma: no cover
        assert refused.value.code == EXIT_REFUSED == 2
    with outdir.claim(out, _runs(), Options()):  # given back at the end of the block
        pass


def test_the_lock_is_given_back_when_the_block_raises(tmp_path):
    out = str(tmp_path / "out")
    with pytest.raises(KeyboardInterrupt):
        with outdir.claim(out, _runs(), Options()):
            raise KeyboardInterrupt
    with outdir.claim(out, _runs(), Options()):
        pass


@pytest.mark.integration
def test_a_lock_held_by_another_process_names_it_and_dies_with_it(tmp_path):
    out = str(tmp_path / "out")
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, time
            from benchmarks.runner import outdir
            from benchmarks.runner.config import Options, RunConfig
            from benchmarks.runner.presets import PRESETS
            with outdir.claim({out!r}, [RunConfig.from_dict(r) for r in PRESETS["offline"]], Options()):
                print("held", flush=True)
                time.sleep(60)
        """)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(Refusal, match=rf"pid {holder.pid}\)"):
            with outdir.claim(out, _runs(), Options()):
                pass  # pragma: no cover
    finally:
        holder.kill()  # killed: the system drops its lock, no stale lock file blocks the next run
        holder.wait()
    with outdir.claim(out, _runs(), Options()):
        pass


# ---------------------------------------------------------------------------- case 17: the settings


def test_other_settings_are_refused_naming_restart_and_another_out(tmp_path):
    out = str(tmp_path / "out")
    with outdir.claim(out, _runs(), Options()):
        pass
    epochs = PRESETS["offline"][0]["epochs"]
    refused = rf"holds results of other settings.*epochs {epochs} -> 3.*--restart.*another --out"
    with pytest.raises(Refusal, match=refused):
        with outdir.claim(out, _runs(epochs=3), Options()):
            pass  # pragma: no cover
    with pytest.raises(Refusal, match="data_seed 0 -> 1"):  # an option of the invocation is a setting too
        with outdir.claim(out, _runs(), Options(data_seed=1)):
            pass  # pragma: no cover
    with pytest.raises(Refusal, match=rf"its run data-emoji_styles-5-{re.escape(MAIN_REGIME)} is not in this"):
        with outdir.claim(out, _runs()[:1], Options()):  # fewer runs: the other's rows would be dropped
            pass  # pragma: no cover
    with outdir.claim(out, _runs(), Options()):  # the same settings: a resume or a re-run
        pass
    with outdir.claim(out, _runs(epochs=3), Options(restart=True)):  # asked for: replaced
        pass
    with open(os.path.join(out, outdir.SETTINGS_FILE), encoding="utf-8") as f:
        held = json.load(f)["runs"]
    assert {name: s["epochs"] for name, s in held.items()} == {
        f"class-mnist_like_30-5-{MAIN_REGIME}": 3, f"data-emoji_styles-5-{MAIN_REGIME}": 3}


def test_added_runs_are_added(tmp_path):
    out = str(tmp_path / "out")
    with outdir.claim(out, _runs()[:1], Options()):
        pass
    with outdir.claim(out, _runs(), Options()) as folder:
        assert list(folder.planned) == [f"class-mnist_like_30-5-{MAIN_REGIME}", f"data-emoji_styles-5-{MAIN_REGIME}"]
    with pytest.raises(Refusal, match="not in this invocation"):  # the folder now holds both
        with outdir.claim(out, _runs()[:1], Options()):
            pass  # pragma: no cover


def test_results_without_a_settings_file_are_not_replaced_silently(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.csv").write_text("x\n")
    with pytest.raises(Refusal, match="results.csv without settings.json.*--restart.*another --out"):
        with outdir.claim(str(out), _runs(), Options()):
            pass  # pragma: no cover
    assert (out / "results.csv").read_text() == "x\n"
    with outdir.claim(str(out), _runs(), Options(restart=True)):
        pass


def test_repeated_labels_get_distinct_names():
    runs = _runs()[:1] * 2
    assert list(outdir.planned_settings(runs, Options())) == [f"class-mnist_like_30-5-{MAIN_REGIME}",
                                                               f"class-mnist_like_30-5-{MAIN_REGIME}#2"]


# ---------------------------------------------------------------------------- case 12: missing runs


def _rows(run: RunConfig):
    return [dict(dataset=run.dataset, scenario=run.scenario, tasks=run.tasks, backbone=run.backbone, method="tmc",
                 model="composed", after_task=run.tasks, eval_exp="all", accuracy=0.5, train_seconds=1.0,
                 eval_seconds=0.1, regime=f"from {run.freeze_until}", trained_params=10, lr=0.01, epochs=1,
                 tuned="no", setting="", seed=seed) for seed in run.seeds]


def test_the_status_names_the_missing_runs_until_all_are_done(tmp_path):
    out = str(tmp_path / "out")
    first, second = (r.label for r in _runs())
    with outdir.claim(out, _runs(), Options()) as folder:
        assert _status(out) == dict(format=1, complete=False, planned=[first, second], finished=[],
                                    missing=[first, second])
        folder.finished(first)
        assert _status(out)["missing"] == [second] and not _status(out)["complete"]
        with pytest.raises(ValueError, match="not finished"):
            folder.complete()
        folder.finished(second)
        folder.complete()
    assert _status(out) == dict(format=1, complete=True, planned=[first, second], finished=[first, second],
                                missing=[])


def test_the_runner_killed_after_its_first_run_leaves_a_report_that_says_what_is_missing(tmp_path, monkeypatch,
                                                                                        capsys):
    from benchmarks import run

    out = str(tmp_path / "out")
    done = []

    def run_one(config, options, out_dir):
        if done:
            raise KeyboardInterrupt  # killed during the second run
        done.append(config.label)
        return _rows(config), []

    monkeypatch.setattr(run, "preflight", lambda runs, options: None)
    monkeypatch.setattr(run, "run_one", run_one)
    with pytest.raises(KeyboardInterrupt):
        run.main(["--preset", "offline", "--out", out])
    first, second = (r.label for r in _runs())
    markdown = open(os.path.join(out, "results.md"), encoding="utf-8").read()
    assert markdown.startswith(report.incomplete_note([second]))
    assert f"missing: {second}" in markdown and first not in markdown.splitlines()[0]
    assert _status(out)["missing"] == [second] and not _status(out)["complete"]
    assert {r["dataset"] for r in report.read_csv(os.path.join(out, "results.csv"))} == {"mnist_like_30"}
    # regenerating the report from the CSV keeps the note (status.json is next to it)
    report.main([os.path.join(out, "results.csv")])
    assert open(os.path.join(out, "results.md"), encoding="utf-8").read().startswith(report.incomplete_note([second]))

    monkeypatch.setattr(run, "run_one", lambda config, options, out_dir: (_rows(config), []))
    run.main(["--preset", "offline", "--out", out])  # the resume: complete
    assert "Incomplete" not in open(os.path.join(out, "results.md"), encoding="utf-8").read()
    assert _status(out)["complete"] and _status(out)["missing"] == []
    assert {r["dataset"] for r in report.read_csv(os.path.join(out, "results.csv"))} == {"mnist_like_30",
                                                                                         "emoji_styles"}
    # and a second invocation with other settings is refused before it replaces anything
    with pytest.raises(Refusal, match="other settings"):
        run.main(["--preset", "offline", "--out", out, "--data-seed", "1"])
    assert _status(out)["complete"]


# ---------------------------------------------------------------------------- issue 42, class 2: re-runs


def test_a_finished_folder_is_kept_and_its_results_csv_never_loses_rows(tmp_path, monkeypatch):
    """The same command on a finished folder trains nothing and returns the same rows; a
    re-run that does train (its run records gone, as in a folder of an earlier version) and
    is killed after its first run leaves results.csv with every row it held (merged, never
    fewer); --restart trains everything again."""
    from benchmarks import run

    out = str(tmp_path / "out")
    trained = []

    def run_one(config, options, out_dir):
        trained.append(config.label)
        return [dict(row, accuracy=0.5 + len(trained) / 100) for row in _rows(config)], []

    monkeypatch.setattr(run, "preflight", lambda runs, options: None)
    monkeypatch.setattr(run, "run_one", run_one)
    first = run.main(["--preset", "offline", "--out", out])
    assert len(trained) == 2
    held = report.read_csv(os.path.join(out, "results.csv"))

    again = run.main(["--preset", "offline", "--out", out])  # finished: kept, nothing trains
    assert len(trained) == 2 and again == first
    assert report.read_csv(os.path.join(out, "results.csv")) == held

    import shutil

    shutil.rmtree(os.path.join(out, outdir.RUNS_DIR))

    def killed_at_second_run(config, options, out_dir):
        if len(trained) > 2:
            raise KeyboardInterrupt
        return run_one(config, options, out_dir)

    monkeypatch.setattr(run, "run_one", killed_at_second_run)
    with pytest.raises(KeyboardInterrupt):
        run.main(["--preset", "offline", "--out", out])
    assert len(trained) == 3
    merged = report.read_csv(os.path.join(out, "results.csv"))
    assert len(merged) == len(held)  # the first run's rows replaced by the new ones, the second's kept
    assert {r["dataset"]: r["accuracy"] for r in merged} == {"mnist_like_30": 0.53, "emoji_styles": 0.52}

    monkeypatch.setattr(run, "run_one", run_one)
    run.main(["--preset", "offline", "--out", out, "--restart"])  # asked for: both train again
    assert len(trained) == 5
    assert {r["dataset"]: r["accuracy"] for r in report.read_csv(os.path.join(out, "results.csv"))} == {
        "mnist_like_30": 0.54, "emoji_styles": 0.55}
