"""The method registry (benchmarks.methods): every method declared once, and complete.

Each registered group is built on a tiny network and made to evaluate as each of its
rows; training every method end to end is tests/test_benchmark_run.py's job (it runs
every registered method)."""

import pytest
from avalanche.training.plugins import EvaluationPlugin
from avalanche.training.templates import SupervisedTemplate

from avalanche_tmc import Adaptation
from baselines import BUILTIN_METHODS
from benchmarks import methods
from benchmarks.methods import (
    Row,
    TrainConfig,
    catalogue,
    groups_for,
    joint_methods,
    method_groups,
    method_names,
    register_method,
    registry,
)
from benchmarks.methods.strategy import build_strategy, component_forwards, component_row, select_row
from benchmarks.report import cost_class, method_info
from tests.helpers import TinyResNet


def test_table_order_is_registration_order_with_the_paper_rows_first_and_joint_last():
    names = method_names()
    assert len(set(names)) == len(names)
    # the paper's methods lead the tables (TMC's group, with the ensemble of its components, then TME's)
    assert names[:4] == ("tmc", "tme-tmc", "tme", "tmc-seq")
    assert joint_methods() == ("joint", "joint-tangent") == names[-2:]  # the paragons close them
    assert set(BUILTIN_METHODS) <= set(names)  # every Avalanche baseline has a row


def test_every_row_has_a_label_and_a_cost_class():
    labels = [method_info(m)[0] for m in method_names()]
    assert len(set(labels)) == len(labels)
    for name in method_names():
        expected = (None,) if name in joint_methods() else ("O(1)", "O(T)")
        assert cost_class(name) in expected


@pytest.mark.parametrize("group", method_groups(), ids=lambda g: g.name)
def test_every_group_builds_and_selects_each_row(group):
    cfg = TrainConfig(num_classes=5, milestones=(1,))
    strategy = build_strategy(group, TinyResNet(num_classes=3), cfg, EvaluationPlugin(loggers=[]))
    assert isinstance(strategy, SupervisedTemplate)
    for row in group.row_names:
        select_row(strategy, group, row)
    assert component_forwards(strategy, group) == {}  # nothing trained yet
    # components are reported under their row only when that row was asked for
    others = tuple(r for r in group.row_names if r != group.component_row)
    assert component_row(group, others) is None
    assert component_row(group, group.row_names) == group.component_row
    if group.component_row is not None:
        assert component_row(group, (group.component_row,)) == group.component_row


def test_a_tuned_unit_overrides_its_family_and_self_tuned_groups_keep_their_own_values():
    from dataclasses import replace

    from benchmarks.methods import config_for, tuning_unit

    groups = {g.name: g for g in method_groups()}
    cfg = TrainConfig(num_classes=5, lr_tangent=1e-3, lr=0.01, epochs=5, tangent_epochs=7)
    assert [tuning_unit(groups[n]) for n in ("tangent", "tmc-fc", "independent", "lwf", "joint", "der")] == [
        "tangent", "tangent", "non-linear", "non-linear", "joint", "der"]
    # untuned: the family values (the tangent family's own epochs)
    assert (config_for(groups["tmc-fc"], cfg).epochs, config_for(groups["joint"], cfg).epochs) == (7, 5)
    tuned = replace(cfg, tuned={"tangent": (3e-3, 10), "non-linear": (0.03, 20), "joint": (0.1, 5)})
    assert (config_for(groups["tmc-seq"], tuned).lr_tangent, config_for(groups["tmc-seq"], tuned).epochs) == (3e-3, 10)
    assert (config_for(groups["lwf"], tuned).lr, config_for(groups["lwf"], tuned).epochs) == (0.03, 20)
    assert (config_for(groups["joint"], tuned).lr, config_for(groups["joint"], tuned).epochs) == (0.1, 5)
    # DER is tuned for itself: without its own values it keeps the run's, not non-linear's
    assert (config_for(groups["der"], tuned).lr, config_for(groups["der"], tuned).epochs) == (0.01, 5)


def test_groups_for_keeps_only_requested_rows_and_refuses_unknown_ones():
    chosen = groups_for(["tme-tmc", "joint", "soup"])
    assert [(g.name, rows) for g, rows in chosen] == [("tangent", ("tme-tmc",)), ("independent", ("soup",)),
                                                      ("joint", ("joint",))]
    assert component_row(chosen[0][0], ["tme-tmc"]) is None  # TMC's components go under "tmc" only
    (tme, rows), = groups_for(["tme"])  # the paper's TME: its own group and components
    assert (tme.name, rows, component_row(tme, ["tme"])) == ("tme", ("tme",), "tme")
    with pytest.raises(ValueError, match="Unknown method"):
        groups_for(["tmc", "icarl"])


def test_register_method_refuses_duplicates_and_inconsistent_groups(monkeypatch):
    monkeypatch.setattr(registry, "_GROUPS", dict(registry._GROUPS))
    monkeypatch.setattr(registry, "_ROWS", dict(registry._ROWS))
    with pytest.raises(ValueError, match="already registered"):
        register_method("tmc-again", Row("tmc", "TMC", "O(1)"))
    with pytest.raises(ValueError, match="select"):
        register_method("pair", Row("a", "A", "O(1)"), Row("b", "B", "O(1)"))
    with pytest.raises(ValueError, match="component_row"):
        register_method("one", Row("c", "C", "O(1)"), components=lambda s: {}, component_row="d")

    @register_method("new", Row("new", "New", "O(1) (new)", parallel=True))
    def build(top, cfg, common):  # pragma: no cover - never trained here
        raise AssertionError

    assert methods.method_row("new").label == "New" and method_names()[-1] == "new"
    assert method_info("new") == ("New", "O(1) (new)", "none", True)


def test_each_avalanche_baseline_is_the_group_its_entry_declares():
    """The baselines' groups are made from their ``@baseline`` entries (baselines/builtin.py):
    one group each, in their order, closing the table, with the entry's row and settings."""
    from baselines.builtin import registered_baselines

    entries = registered_baselines()
    groups = {g.name: g for g in method_groups()}
    assert [e.name for e in entries] == list(BUILTIN_METHODS) == [g.name for g in method_groups()][-len(entries):]
    for entry in entries:
        group = groups[entry.name]
        assert group.rows == (Row(entry.name, entry.label, entry.memory, replay=entry.replay),)
        assert (group.cost, group.tuning, group.joint) == (entry.cost, entry.tuning, entry.joint)
        assert group.family == ("tangent" if entry.tangent else "non-linear")
        assert group.task_aware == (entry.task_aware or entry.joint)
    assert methods.method_row("der") == Row("der", "DER", "O(1) + buffer 300", replay="300 samples + logits")
    assert [g.name for g in method_groups() if g.task_aware] == ["lwf", "joint", "joint-tangent"]


def test_the_adaptation_setting_says_what_was_chosen_or_that_there_was_no_choice():
    from types import SimpleNamespace

    one = Adaptation("none")
    alone = SimpleNamespace(adaptation_scores=[], adaptation_choice=one, adapted_on=0)
    assert catalogue._describe_adaptation(alone).endswith("(the only candidate)")
    layer = Adaptation("none", layer="stages.blocks_4")
    chosen = SimpleNamespace(adaptation_scores=[(one, 0.5), (layer, 0.75)], adaptation_choice=layer, adapted_on=0)
    assert catalogue._describe_adaptation(chosen) == (
        "adapted on experience 0: none (pre-trained features); features: pooled stages.blocks_4 (validation 0.750, "
        "best of 2 candidates; pre-trained features at the head's input: 0.500)")


def test_a_group_says_how_it_is_tuned_and_what_it_costs_where_it_is_registered():
    """Scheduling and tuning read the registry: no other table lists groups."""
    groups = {g.name: g for g in method_groups()}
    assert groups["der"].cost > groups["naive"].cost > groups["slda"].cost == 1
    assert {g.name for g in groups.values() if g.tuning == "self"} == {"tme", "er", "der", "joint", "joint-tangent"}
    build = lambda top, cfg, common: None  # noqa: E731
    with pytest.raises(ValueError, match="nothing to tune"):
        register_method("free-tuned", Row("free-tuned", "F", "O(1)"), family="training-free", tuning="self")(build)
    with pytest.raises(ValueError, match="already has a representative"):
        register_method("second-rep", Row("second-rep", "S", "O(1)"), family="tangent", tuning="represents")(build)
    assert "free-tuned" not in method_names() and "second-rep" not in method_names()


def test_an_untuned_tme_trains_at_the_tangent_rate_capped_at_what_its_tuning_chose():
    """Issue 59, item 1: TME's components trained at the tangent family's untuned 3e-3 and
    diverged (15% on their own experience); its tuning chose 3e-4 in every scenario. Untuned,
    TME's rate is the tangent rate capped at 3e-4; tuned or set by --unit, its own; TMC's is
    never capped."""
    from benchmarks.methods import TrainConfig, config_for, group_named
    from benchmarks.runner.terminal import capped_text

    tme, tangent = group_named("tme"), group_named("tangent")
    cfg = TrainConfig(num_classes=10, seed=0, lr_tangent=3e-3)
    assert config_for(tme, cfg).lr_tangent == 3e-4 and config_for(tangent, cfg).lr_tangent == 3e-3
    assert config_for(tme, TrainConfig(num_classes=10, seed=0, lr_tangent=1e-4)).lr_tangent == 1e-4
    tuned = TrainConfig(num_classes=10, seed=0, lr_tangent=3e-3, tuned={"tme": (3e-3, 7)})
    assert (config_for(tme, tuned).lr_tangent, config_for(tme, tuned).epochs) == (3e-3, 7)
    assert capped_text([tangent, tme], cfg).startswith(", TME Adam lr 0.0003 (the tangent rate capped")
    assert capped_text([tangent, tme], tuned) == ""
