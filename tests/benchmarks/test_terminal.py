"""What the runner prints on the terminal (issue 52, item 5): the decided claims at the end,
the schedule in the header, the ETA after a resume, one line on Ctrl-C, third-party
deprecation notices once, which training a progress line is, and the preparation's progress."""

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from benchmarks.methods import TrainConfig
from benchmarks.runner.epoch_log import groups_progress
from benchmarks.runner.terminal import EXIT_INTERRUPTED, decided_claims, interrupted_message, schedule_text

ROOT = Path(__file__).resolve().parents[2]


def _rows(finals, epochs=20):
    """Final-accuracy rows of one class-IL run: {method: [accuracy per seed]}."""
    return [dict(dataset="d", scenario="class", tasks=2, regime="r", method=m, model="composed", after_task=2,
                 eval_exp="all", accuracy=a, seed=s, epochs=epochs) for m, accs in finals.items()
            for s, a in enumerate(accs)]


def test_the_end_of_a_run_prints_the_decided_claims_and_where_the_others_are():
    rows = _rows({"tmc": [0.60, 0.61, 0.60, 0.61, 0.60], "soup": [0.40, 0.41, 0.40, 0.41, 0.40],
                  "ens-l": [0.55, 0.70, 0.52, 0.68, 0.66]})
    text = decided_claims(rows, "results/x/results.md")
    lines = text.splitlines()
    assert lines[0].startswith("Verdicts: 1 claim decided") and "results/x/results.md" in lines[0]
    assert any("TMC > Soup" in line and "holds" in line and "C-d (2 tasks, r)" in line and "+20.0" in line
               for line in lines[1:])
    assert "Ens-L" not in text  # not resolved: counted in the first line, shown in results.md


def test_a_run_without_verdicts_says_why_at_the_end():
    text = decided_claims(_rows({"tmc": [0.6], "soup": [0.4]}, epochs=1), "out/results.md")
    assert text.startswith("No verdicts: 1 seed (a verdict needs at least 3) and 1 epoch per experience")
    assert decided_claims(_rows({"tmc": [0.6, 0.6, 0.6]}), "out/results.md") == ""  # no claim compares its rows


@pytest.mark.parametrize("cfg, per_unit, text", [
    (TrainConfig(num_classes=2, epochs=4, decay_at=(0.5, 0.75)), False,
     "lr x0.1 from epochs 3 and 4 of 4 (1/2 and 3/4 of the epochs)"),
    (TrainConfig(num_classes=2, epochs=20, decay_at=(0.5, 0.75)), True,
     "lr x0.1 at 1/2 and 3/4 of each unit's epochs"),
    (TrainConfig(num_classes=2, epochs=50, milestones=(25, 40)), False, "lr x0.1 from epochs 26 and 41 of 50"),
    (TrainConfig(num_classes=2, epochs=5), False, "constant learning rate"),
])
def test_the_header_states_the_learning_rate_schedule(cfg, per_unit, text):
    assert schedule_text(cfg, per_unit=per_unit) == text


def test_the_eta_after_a_resume_counts_only_the_groups_trained_now():
    # 4 of 36 restored, 1 trained in 60 s: 31 left at 60 s each
    assert groups_progress(5, 36, 60.0, restored=4) == (
        "5/36 method groups done (4 kept from an earlier run), 1m00s elapsed, ETA 31m00s")
    assert groups_progress(4, 36, 0.0, restored=4).endswith("ETA unknown")


def test_the_interrupt_line_says_what_was_kept_and_the_command_that_resumes(tmp_path):
    out = tmp_path / "out"
    (out / "progress").mkdir(parents=True)
    (out / "runs").mkdir()
    for name in ("tmc-1.json", "joint-2.json"):
        (out / "progress" / name).write_text("{}")
    (out / "runs" / "a.json").write_text("{}")
    line = interrupted_message(str(out), ["--preset", "tiny", "--out", str(out), "--restart"])
    assert "\n" not in line and line.startswith("interrupted: kept 2 finished method groups and 1 finished run in ")
    assert line.endswith(f"resume with: python -m benchmarks.run --preset tiny --out {out}")  # not --restart
    assert interrupted_message(str(tmp_path / "none"), ["--preset", "tiny"]).startswith(
        "interrupted: nothing finished was kept")
    assert EXIT_INTERRUPTED == 130


_NOTICES = textwrap.dedent("""
    import sys
    from benchmarks.runner import notices
    notices.install()  # what python -m benchmarks.run installs
    from avalanche._annotations import deprecated
    from benchmarks.runner.forked_jobs import run_tasks

    @deprecated(0.7, "switch to something else")
    def update(x):
        return x

    def task(x):
        for _ in range(3):
            update(x)
        return x

    print(run_tasks(task, [1, 2, 3, 4], int(sys.argv[1])))
""")


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_third_party_deprecation_notice_is_shown_once_per_run(jobs):
    done = subprocess.run([sys.executable, "-c", _NOTICES, str(jobs)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, OMP_WAIT_POLICY="PASSIVE"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[1, 2, 3, 4]"
    assert done.stderr.count("Call to deprecated function update") == 1, done.stderr


def test_importing_the_runner_changes_no_warning_handling():
    """The policy is the command's (issue 49): importing the package and the runner's modules
    leaves ``warnings.showwarning`` as it was and adds no filter of Avalanche's notices (torch,
    numpy and the library's qpsolvers filter come with their own imports)."""
    code = ("import warnings\nbefore = (warnings.showwarning, list(warnings.filters))\n"
            "import benchmarks, benchmarks.runner.forked_jobs, benchmarks.runner.terminal\n"
            "assert warnings.showwarning is before[0], warnings.showwarning\n"
            "assert not [f for f in warnings.filters if getattr(f[3], 'pattern', f[3]) == 'avalanche']\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr


@pytest.mark.integration
def test_ctrl_c_stops_every_job_and_says_what_was_kept(tmp_path):
    """SIGINT to every process of the run (a terminal's Ctrl-C) while two jobs train: the
    run ends (no worker left), exit 130, one line on stderr and no traceback."""
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "benchmarks.run", "--dataset", "digits", "--data-option", "train_per_class=20",
            "--data-option", "test_per_class=3", "--tasks", "2", "--epochs", "200", "--batch-size", "8",
            "--methods", "tmc,soup,naive", "--seeds", "1", "--jobs", "2", "--progress", "--out", str(out)]
    process = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True, env=dict(os.environ, OMP_WAIT_POLICY="PASSIVE"))
    try:
        for line in process.stdout:  # until both jobs train
            if " epoch 2/200" in line:
                break
        os.killpg(process.pid, signal.SIGINT)
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == EXIT_INTERRUPTED, stderr
    assert "Traceback" not in stderr
    (line,) = [line for line in stderr.splitlines() if line.strip()]
    assert line.startswith("python -m benchmarks.run: interrupted: ") and " with: python -m benchmarks.run --" in line
    with pytest.raises(ProcessLookupError):
        os.killpg(process.pid, 0)  # no process of the run is left


TINY = ["--dataset", "digits", "--data-option", "train_per_class=6", "--data-option", "test_per_class=3",
        "--tasks", "2", "--epochs", "2", "--batch-size", "8", "--jobs", "1", "--seeds", "1"]


@pytest.mark.integration
def test_ctrl_c_in_one_job_is_one_line_and_exit_130(tmp_path, monkeypatch, capsys):
    from benchmarks import run
    from benchmarks.runner.terminal import interruptible

    real_run_group, trained = run.run_group, []

    def interrupted_at_second_group(group, *a, **k):
        if trained:
            raise KeyboardInterrupt
        trained.append(group.name)
        return real_run_group(group, *a, **k)

    monkeypatch.setattr(run, "run_group", interrupted_at_second_group)
    argv = TINY + ["--methods", "tmc,joint", "--no-task-il", "--out", str(tmp_path / "out")]
    assert interruptible(run.main, argv) == EXIT_INTERRUPTED  # (python -m benchmarks.run)
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (f"python -m benchmarks.run: interrupted: kept 1 finished method group in {tmp_path / 'out'}; "
                    f"resume with: python -m benchmarks.run {' '.join(argv)}")


@pytest.mark.integration
def test_the_terminal_says_the_schedule_the_preparation_which_training_and_the_verdicts(tmp_path, capsys):
    from benchmarks import run

    run.main(TINY + ["--methods", "tmc,lwf", "--task-il", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert any(line.startswith("[digits] loading the data") for line in lines)  # the preparation's steps
    assert any("computing the frozen trunk's features" in line for line in lines)
    header = next(line for line in lines if "class-incremental" in line)
    assert "lr x0.1 from epoch 2 of 2 (1/2 and 3/4 of the epochs)" in header
    lwf = [line for line in lines if line.strip().startswith("seed 0 lwf") and " after " in line]
    assert len(lwf) == 4 and sum("(task-labelled training)" in line for line in lwf) == 2
    table_end = out.index("| LwF |")
    assert "No verdicts: 1 seed (a verdict needs at least 3) and 2 epochs per experience" in out[table_end:]


def test_the_plan_is_said_before_any_training():
    """Issue 59, item 6: nothing stated the plan or its size before the work started."""
    from benchmarks.runner.terminal import plan_text

    assert plan_text(3, 4, 14, 2, 2) == ("  plan: 12 trainings (3 seeds x 4 method groups, 2 more on the task-labelled "
                                         "split), 2 at a time; 2 kept from an earlier run; the ETA follows each "
                                         "finished training")
    assert plan_text(1, 1, 1, 0, 1).startswith("  plan: 1 training (1 seed x 1 method group), 1 at a time; the ETA")


def test_the_plans_estimate_is_images_x_epochs_x_cost_at_the_timed_step_and_leaves_the_random_state():
    """Issue 59, item 6: the plan's estimate before any training: one timed SGD step of the
    trained network per image, times each planned training's images, epochs (its own config)
    and its group's relative cost, shared among the jobs; timing it draws no random number."""
    import torch

    from benchmarks.methods import TrainConfig, groups_for
    from benchmarks.runner.estimate import estimate_text, estimated_seconds, seconds_per_image

    groups = {g.name: g for g, _ in groups_for(["tmc", "naive", "ncm"])}
    cfg = TrainConfig(epochs=4, num_classes=3)
    pieces = [(groups["tangent"], cfg), (groups["naive"], cfg), (groups["ncm"], cfg)]
    assert (groups["tangent"].cost, groups["naive"].cost, groups["ncm"].cost) == (3, 2, 1)
    expected = (3 * 4 + 2 * 4 + 1 * 1) * 100 * 0.01 / 2  # a training-free head: one pass, not epochs
    assert estimated_seconds(pieces, 100, 0.01, jobs=2) == pytest.approx(expected)
    assert estimate_text(150.0).startswith("; about 2 min of training estimated")
    assert estimate_text(None) == ""

    data = [(torch.randn(4), i % 3) for i in range(10)]
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 3))
    torch.manual_seed(0)
    before = torch.random.get_rng_state()
    assert seconds_per_image(net, data, batch_size=4) > 0
    assert torch.equal(torch.random.get_rng_state(), before)
    assert seconds_per_image(net, [], batch_size=4) is None
