"""One results file's verdicts under both margin rules (benchmarks.results.margin_rules,
issue 58's amendment): the same differences and Holm intervals, each rule's margin and verdict,
worked out here from the committed comparisons."""

import pytest

from benchmarks import report
from benchmarks.results import margin_rules
from benchmarks.results.claims import ACROSS_MACHINES, HOLDS
from benchmarks.results.files import write_csv
from benchmarks.results.machine_moves import MACHINE_FILES, UNPINNED_FILES, machine_margin, measured_moves


def _rows(finals, arithmetic="avx2"):
    return [dict(dataset="d", scenario="class", tasks=2, backbone="b", method=m, model="composed", after_task=2,
                 eval_exp="all", accuracy=a, train_seconds=1.0, eval_seconds=1.0, regime="r", seed=s, epochs=20,
                 arithmetic=arithmetic(m) if callable(arithmetic) else arithmetic)
            for m, accs in finals.items() for s, a in enumerate(accs)]


FINALS = {"tmc": [0.50, 0.51, 0.52, 0.50, 0.51], "soup": [0.47, 0.48, 0.49, 0.47, 0.48],
          "ewc": [0.25, 0.23, 0.26, 0.24, 0.25]}


def test_each_cell_has_both_rules_margins_and_verdicts():
    rows = {r["claim"]: r for r in margin_rules.margin_rule_rows(_rows(FINALS))}
    soup, ewc = rows["TMC > Soup"], rows["TMC > EWC"]
    assert float(soup["preregistered_margin"]) == pytest.approx(machine_margin("soup", 5, measured_moves(
        files=MACHINE_FILES)))
    assert (soup["preregistered_verdict"], float(soup["pinned_margin"]), soup["pinned_verdict"]) == (
        ACROSS_MACHINES, 0.0, HOLDS)
    assert ewc["preregistered_verdict"] == ewc["pinned_verdict"] == HOLDS  # 25 points: clear of any margin
    assert soup["difference"] == repr(float(soup["difference"])) and float(soup["difference"]) == pytest.approx(3.0)
    # a row computed with a CPU's own kernels keeps the unpinned comparisons' margin under the amended rule
    native = _rows(FINALS, lambda m: "native:avx512/intel-avx-512" if m == "soup" else "avx2")
    soup = {r["claim"]: r for r in margin_rules.margin_rule_rows(native)}["TMC > Soup"]
    assert float(soup["pinned_margin"]) == pytest.approx(machine_margin("soup", 5, measured_moves(
        files=UNPINNED_FILES))) and soup["pinned_verdict"] == ACROSS_MACHINES


def test_the_tool_writes_a_table_of_both_rules_with_their_counts(tmp_path, capsys):
    results, out = tmp_path / "results.csv", tmp_path / "rules.csv"
    write_csv(_rows(FINALS), results)
    margin_rules.main([str(results), "--out", str(out)])
    block = report.generated_block(out)
    assert block == margin_rules.margin_rules_table(margin_rules.read_margin_rules(out))
    assert "| C-d (2 tasks, r) | TMC > Soup | +3.0, Holm [" in block
    assert "**not resolved across machines** | ±0.0, **holds** |" in block
    assert "* under the pre-registered rule: 2 hold, 0 fails, 0 equivalent, 1 not resolved across machines" in block
    assert "* under the amended rule: 3 hold, 0 fails, 0 equivalent, 0 not resolved across machines" in block
    write_csv(_rows(FINALS, arithmetic=""), results)  # not known to be pinned: both rules alike
    margin_rules.main([str(results), "--out", str(out)])
    assert "Verdicts that differ in bold (0)" in report.generated_block(out)


def test_the_tool_refuses_results_without_verdicts_and_an_out_that_is_its_input(tmp_path, capsys):
    results = tmp_path / "results.csv"
    write_csv(_rows({m: a[:2] for m, a in FINALS.items()}), results)  # 2 seeds: no verdicts
    for out in (tmp_path / "rules.csv", results):
        with pytest.raises(SystemExit) as stop:
            margin_rules.main([str(results), "--out", str(out)])
        assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "give no verdicts" in err and "would replace an input" in err
    assert not (tmp_path / "rules.csv").exists()
