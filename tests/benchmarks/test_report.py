"""Result tables and plots (benchmarks.report) on synthetic rows."""

from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from benchmarks import report
from benchmarks.report import (
    COLUMNS,
    accuracy_index,
    final_accuracy,
    main,
    markdown_table,
    method_info,
    order_methods,
    plot_accuracy_curves,
    plot_components,
    plot_regimes,
    read_csv,
    regime_tables,
    timing_table,
    write_csv,
    write_report,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
CLASS_RUN = ("mnist_like_30", "class", 5, "from blocks.6")
DATA_RUN = ("emoji_like", "data", 3, "")
# Final accuracies; "mystery" (unknown) is first here but must come last in the table.
FINAL = {
    CLASS_RUN: {"mystery": 0.3, "tmc": 0.8123, "tme": 0.8456, "soup": 0.7001, "ens-l": 0.83,
                "naive": 0.2, "er": 0.55, "joint": 0.95},
    DATA_RUN: {"mystery": 0.4, "tmc": 0.9, "tme": 0.88, "naive": 0.9125, "er": 0.85,
               "joint": 0.97, "joint-tangent": 0.96},
}


def make_row(run, method, model, after_task, eval_exp, accuracy) -> Dict[str, object]:
    dataset, scenario, tasks, regime = run
    return dict(dataset=dataset, scenario=scenario, tasks=tasks, backbone="resnet18", method=method,
                model=model, after_task=after_task, eval_exp=eval_exp, accuracy=accuracy,
                train_seconds=1.5 * after_task, eval_seconds=0.25, regime=regime, trained_params=1000,
                lr=0.001 if method in ("tmc", "tme") else 0.01, epochs=5, tuned="yes" if regime else "no",
                setting="", seed=0, trained_in="", data_seed=0, arithmetic="avx2", replay_fraction="", loss_rose="",
                final_average_accuracy="", average_incremental_accuracy="", forgetting="", backward_transfer="",
                replay_buffer="")


def synthetic_rows() -> List[Dict[str, object]]:
    """Curves for every method, per-experience accuracies after T, TMC components alone."""
    rows = []
    for run, finals in FINAL.items():
        tasks = run[2]
        for method, final in finals.items():
            steps = [tasks] if method.startswith("joint") else range(1, tasks + 1)
            rows += [make_row(run, method, "composed", t, "all", final - 0.01 * (tasks - t)) for t in steps]
            rows += [make_row(run, method, "composed", tasks, str(e), final) for e in range(tasks)]
        rows += [make_row(run, "tmc", f"component-{k}", tasks, str(e), 0.9 if e == k else 0.1)
                 for k in range(tasks) for e in range(tasks)]
    return rows


def parse_table(md: str) -> Tuple[List[str], Dict[str, Dict[str, str]], List[str]]:
    """(header, {method name: {column: cell}}, method names in order) of the markdown table."""
    lines = [line.strip().strip("|").split("|") for line in md.splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0]]
    body = [[c.strip() for c in line] for line in lines[2:]]
    return header, {cells[0]: dict(zip(header, cells)) for cells in body}, [cells[0] for cells in body]


@pytest.fixture(scope="module")
def rows():
    return synthetic_rows()


@pytest.fixture(scope="module")
def table(rows):
    return parse_table(markdown_table(rows))


def assert_png(path: Path) -> None:
    assert path.is_file() and path.stat().st_size > 0
    assert path.read_bytes()[:8] == PNG_MAGIC


def test_csv_round_trip(rows, tmp_path):
    path = write_csv(rows, tmp_path / "nested" / "dir" / "results.csv")
    lines = path.read_text().splitlines()
    assert lines[0] == ",".join(COLUMNS) + ",kind" and all(line.endswith(",results") for line in lines[1:])
    assert read_csv(path) == rows


def test_the_report_reads_a_file_s_kind_from_the_file_never_from_its_header(rows, tmp_path):
    """Every CSV of the runner says what it holds in its last column; a results file whose
    kind column was edited to another kind, or one without the column, is refused rather
    than guessed (a tuning file with a results-like header, say)."""
    from benchmarks.results.files import csv_kind, write_rows_csv

    assert csv_kind(write_csv(rows, tmp_path / "r.csv")) == "results"
    assert csv_kind(report.write_tuning_csv([dict(dataset="d", lr=0.1)], tmp_path / "t.csv")) == "tuning"
    assert csv_kind(write_rows_csv([dict(protocol="head", seed=0)], tmp_path / "v.csv", ("protocol", "seed"),
                                   "variance")) == "variance"
    edited = tmp_path / "edited.csv"
    edited.write_text((tmp_path / "r.csv").read_text().replace(",results\n", ",tuning\n", 1))
    with pytest.raises(report.ReportFileError, match="does not say one of"):
        csv_kind(edited)
    with pytest.raises(report.ReportFileError, match="a tuning file, not a results file"):
        read_csv(write_rows_csv(rows, tmp_path / "mislabelled.csv", COLUMNS, "tuning"))
    bare = tmp_path / "bare.csv"
    bare.write_text(",".join(COLUMNS) + "\n")
    with pytest.raises(report.ReportFileError, match="kind"):
        report.generated_block(bare)
    with pytest.raises(ValueError, match="kind must be one of"):
        write_rows_csv([], tmp_path / "x.csv", ("a",), "guess")


def test_csv_written_before_the_regime_and_tuning_columns_still_reads(rows, tmp_path):
    old_columns = COLUMNS[:COLUMNS.index("regime")]
    path = tmp_path / "old.csv"
    path.write_text(",".join(old_columns) + "\n" + ",".join(str(rows[0][c]) for c in old_columns) + "\n")
    (old,) = read_csv(path)
    assert {c: old[c] for c in old_columns} == {c: rows[0][c] for c in old_columns}
    assert old["regime"] == old["lr"] == old["tuned"] == ""
    assert markdown_table([old])  # and the table still renders


def test_table_names_the_regime_and_the_learning_rate_and_epochs_of_each_tuning_unit(rows):
    """A family's values, and those of each method tuned for itself (ER, the paragons)."""
    md = markdown_table(rows)
    assert "C-mnist_like_30 (5 tasks, from blocks.6)" in md and "D-emoji_like (3 tasks) |" in md
    settings = [line for line in md.splitlines() if line.startswith("- Learning rate / epochs")]
    assert settings == [
        "- Learning rate / epochs per experience, C-mnist_like_30 (5 tasks, from blocks.6): tangent 0.001 / 5, "
        "tme 0.001 / 5, non-linear 0.01 / 5, er 0.01 / 5, joint 0.01 / 5 (chosen on a validation split of the "
        "training data, see tuning.csv)",
        "- Learning rate / epochs per experience, D-emoji_like (3 tasks): tangent 0.001 / 5, tme 0.001 / 5, "
        "non-linear 0.01 / 5, er 0.01 / 5, joint 0.01 / 5, joint-tangent 0.01 / 5 (set by the run)",
    ]


def test_regime_table_lists_each_regime_and_the_best_library_method_against_joint(rows):
    assert regime_tables(rows) == ""  # one regime per dataset here
    head_only = [dict(r, regime="from classifier", trained_params=10,
                      accuracy=r["accuracy"] - (0.5 if r["method"] == "tmc" else 0.0))
                 for r in rows if r["scenario"] == "class"]
    text = regime_tables(rows + head_only)
    assert "| Method | from classifier (1e-05 M) | from blocks.6 (0.001 M) |" in text
    assert "| TMC | 31.23 | 81.23 |" in text
    # ER (a baseline) is not the library's; TME (84.56) is, and joint is 95.00
    assert "from blocks.6: TME 84.56 vs joint 95.00 (-10.44)" in text
    without_joint = [r for r in rows + head_only if r["method"] != "joint"]
    assert "| TMC | 31.23 | 81.23 |" in regime_tables(without_joint)
    assert "vs joint" not in regime_tables(without_joint)  # no joint row: no comparison line


def test_regime_plot_only_when_a_dataset_ran_in_several_regimes(rows, tmp_path):
    assert plot_regimes(rows, tmp_path / "none.png") is None
    head_only = [dict(r, regime="from classifier", trained_params=10) for r in rows if r["scenario"] == "class"]
    curve = plot_regimes(rows + head_only, tmp_path / "regimes.png")
    assert_png(curve)
    assert "regimes" in write_report(rows + head_only, tmp_path / "report")


def test_method_info_costs_and_unknown():
    assert {m: method_info(m)[1] for m in ("soup", "ens-l", "tmc", "tme", "er", "ewc", "ranpac")} == {
        "soup": "O(1)", "ens-l": "O(T)", "tmc": "O(1)", "tme": "O(T)", "er": "O(1) + buffer 300",
        "ewc": "O(1), 2x params", "ranpac": "O(1) (M×M)"}
    assert method_info("tmc")[3] and not method_info("tmc-seq")[3]
    assert method_info("mystery") == ("mystery", "?", "?", False)


def test_table_rows_and_columns(table):
    header, _, names = table
    assert header == ["Method", "C-mnist_like_30 (5 tasks, from blocks.6)", "D-emoji_like (3 tasks)",
                      "Inference/Memory", "Replay buffer", "Parallel tasks"]
    assert names == ["TMC", "TME", "Soup", "Ens-L", "Naive", "ER", "Joint", "Joint-Tangent", "mystery"]


def test_table_numbers_emphasis_and_missing(table):
    _, cells, _ = table
    c, d = "C-mnist_like_30 (5 tasks, from blocks.6)", "D-emoji_like (3 tasks)"
    # Best O(1) is bold (joint paragons excluded), best O(T) italic, others plain.
    assert [cells[m][c] for m in ("TMC", "TME", "Soup", "Ens-L", "ER", "Joint", "mystery")] == [
        "**81.23**", "*84.56*", "70.01", "83.00", "55.00", "95.00", "30.00"]
    assert [cells[m][d] for m in ("Naive", "TMC", "TME", "Joint", "Joint-Tangent")] == [
        "**91.25**", "90.00", "*88.00*", "97.00", "96.00"]
    assert cells["Soup"][d] == cells["Ens-L"][d] == cells["Joint-Tangent"][c] == "–"
    assert [cells["ER"][k] for k in ("Inference/Memory", "Replay buffer", "Parallel tasks")] == [
        "O(1) + buffer 300", "300 samples", "no"]
    assert [cells["mystery"][k] for k in ("Inference/Memory", "Replay buffer", "Parallel tasks")] == ["?", "?", "no"]


def test_paragon_notes(rows):
    """A run whose paragons are both in the premise table (with TMC or TMC-FC) does not
    repeat them in a note; one with Joint alone keeps its note."""
    md = markdown_table(rows)
    assert "- Paragon, C-mnist_like_30 (5 tasks, from blocks.6): Joint 95.00" in md
    assert "- Paragon, D-emoji_like (3 tasks)" not in md  # Joint and Joint-Tangent: in the premise table
    from benchmarks.results.premise import premise_table

    assert "| D-emoji_like (3 tasks) | 97.0 | 96.0 | 90.0 | – | +1.0 | +6.0 | – | not resolved |" in premise_table(rows)


def test_duplicate_rows_are_averaged(rows):
    extra = dict(rows[0], accuracy=rows[0]["accuracy"] + 0.1)
    index = accuracy_index([rows[0], extra])
    assert list(index.values()) == [pytest.approx(rows[0]["accuracy"] + 0.05)]
    assert final_accuracy(accuracy_index(rows), DATA_RUN, "tmc") == 0.9


def test_write_report_files(rows, tmp_path):
    paths = write_report(rows, tmp_path / "out")
    assert set(paths) == {"csv", "markdown", "curves", "components_tmc"}
    written = paths["markdown"].read_text(encoding="utf-8")
    assert written.startswith(report.readme_block(rows)) and written.endswith(report.timing_table(rows))
    # one seed decides nothing: the difference, no verdict, and why
    assert "| TMC > Soup | +11.2 (1 seed) | not run |" in written and "holds" not in written
    assert "No verdicts: 1 seed (a verdict needs at least 3)." in written and "5 epochs" not in written
    assert read_csv(paths["csv"]) == rows
    for key in ("curves", "components_tmc"):
        assert_png(paths[key])


def test_plots_without_component_rows(rows, tmp_path):
    composed_only = [r for r in rows if r["model"] == "composed"]
    assert plot_components(composed_only, tmp_path / "none.png") is None
    assert plot_components(rows, tmp_path / "soup.png", method="soup") is None
    assert not list(tmp_path.iterdir())
    assert_png(plot_accuracy_curves(composed_only, tmp_path / "curves.png"))


def test_main_regenerates_next_to_csv(rows, tmp_path, capsys):
    csv_path = write_csv(rows, tmp_path / "run" / "results.csv")
    paths = main([str(csv_path)])
    assert set(paths) == {"markdown", "curves", "components_tmc"}
    assert all(p.parent == csv_path.parent for p in paths.values())
    assert "| TMC |" in capsys.readouterr().out


def _seed_rows(accuracies):
    """One run, one method, final accuracy per seed."""
    return [dict(dataset="d", scenario="class", tasks=1, backbone="b", method="tmc", model="composed", after_task=1,
                 eval_exp="all", accuracy=a, train_seconds=0.0, eval_seconds=0.0, regime="", trained_params="",
                 lr="", epochs="", tuned="", setting="", seed=s) for s, a in enumerate(accuracies)]


def test_several_seeds_show_mean_and_sample_std_and_round_trip(tmp_path):
    rows = _seed_rows([0.40, 0.46, 0.37])
    assert report.seed_count(rows) == 3
    mean, std, n = report.accuracy_spread(rows)[(("d", "class", 1, ""), "tmc", "composed", 1, "all")]
    assert (mean, std, n) == (pytest.approx(0.41), pytest.approx(0.0458258, abs=1e-6), 3)
    table = report.markdown_table(rows)
    assert "| TMC | **41.0 ± 4.6** |" in table and "over 3 seeds" in table
    report.write_csv(rows, tmp_path / "r.csv")
    assert [r["seed"] for r in report.read_csv(tmp_path / "r.csv")] == [0, 1, 2]


def test_readme_block_is_rewritten_from_its_results_file_and_checked(tmp_path):
    rows = _seed_rows([0.40, 0.46, 0.37])
    readme = tmp_path / "README.md"
    begin = ("<!-- generated from results/r.csv by: python -m benchmarks.report results/r.csv --readme README.md -->")
    readme.write_text(f"# x\n\n{begin}\nstale 12.3\n{report.GENERATED_END}\n\nafter\n")
    (tmp_path / "results").mkdir()
    report.write_csv(rows, tmp_path / "results" / "r.csv")
    block = report.generated_block(tmp_path / "results" / "r.csv")
    assert block == report.readme_block(report.read_csv(tmp_path / "results" / "r.csv"))
    assert report.update_readme(readme, "results/r.csv", block, check=True) is False
    report.main([str(tmp_path / "results" / "r.csv"), "--readme", str(readme)])  # the README's command
    text = readme.read_text()
    assert "stale" not in text and "41.0 ± 4.6" in text and text.endswith(f"{report.GENERATED_END}\n\nafter\n")
    assert report.update_readme(readme, "results/r.csv", block, check=True) is True
    other = report.readme_block(_seed_rows([0.40, 0.46, 0.38]))
    assert report.update_readme(readme, "results/r.csv", other, check=True) is False
    with pytest.raises(ValueError, match="no block generated from results/other.csv"):
        report.update_readme(readme, "results/other.csv", block)


def test_timing_table_is_the_mean_over_seeds_of_each_methods_training_and_evaluation():
    rows = _seed_rows([0.4, 0.5])
    rows[0].update(train_seconds=10.0, eval_seconds=1.0)
    rows[1].update(train_seconds=20.0, eval_seconds=3.0)
    assert "| TMC | 15 / 2 |" in report.timing_table(rows)


def test_variance_table_is_the_std_per_protocol_and_method(tmp_path):
    path = tmp_path / "variance.csv"
    path.write_text("protocol,seed,method,accuracy,kind\nhead,0,tmc,0.40,variance\nhead,1,tmc,0.46,variance\n"
                    "head,2,tmc,0.37,variance\norder,0,tmc,0.40,variance\norder,1,tmc,0.40,variance\n"
                    "order,2,tmc,0.40,variance\n")
    table = report.generated_block(path)
    assert "| head | 4.6 |" in table and "| order | 0.0 |" in table and "over 3 seeds" in table


def test_tuning_table_shows_each_choice_its_spread_and_the_edge_flag(tmp_path):
    trials = [dict(dataset="d", scenario="class", tasks=2, regime="from b", family="tangent", lr=lr, epochs=e,
                   validation_accuracy=acc, chosen=chosen, edge=edge, rows="")
              for lr, e, acc, chosen, edge in ((1e-3, 5, 0.40, "no", ""), (1e-2, 20, 0.55, "yes", "largest epochs"))]
    report.write_tuning_csv(trials, tmp_path / "tuning.csv")
    table = report.generated_block(tmp_path / "tuning.csv")
    assert "| C-d (2 tasks, from b) | tangent | 0.01 | 20 | 55.0 | 40.0–55.0 (2) | largest epochs |" in table


# ---------------------------------------------------------------------------- issue 30, cases 10, 11, 13, 14


def _two_method_rows():
    """TMC on seeds 0-2, Soup on seeds 0 and 2 only (seed 1 missing)."""
    rows = _seed_rows([0.40, 0.46, 0.37])
    soup = [dict(r, method="soup", accuracy=a) for r, a in zip(rows, [0.30, 0.0, 0.32]) if r["seed"] != 1]
    return rows + soup


def test_a_cell_with_fewer_seeds_than_the_caption_says_how_many():
    table = report.markdown_table(_two_method_rows())
    assert "over 3 seeds" in table
    assert "| TMC | **41.0 ± 4.6** |" in table  # all three seeds: no mark
    assert "| Soup | 31.0 ± 1.4 (2 seeds) |" in table  # mean ± std of 0.30 and 0.32, from 2 seeds
    one = [r for r in _two_method_rows() if not (r["method"] == "soup" and r["seed"] == 2)]
    assert "| Soup | 30.00 (1 seed) |" in report.markdown_table(one)
    assert "(1 seed)" not in report.markdown_table(_seed_rows([0.4]))  # a one-seed table marks nothing


def _cut(path, keep):
    data = path.read_bytes()
    path.write_bytes(data[:keep])


def test_a_results_file_cut_mid_line_is_refused_with_one_line_and_exit_2(tmp_path, capsys):
    rows = _two_method_rows()
    path = report.write_csv(rows, tmp_path / "results.csv")
    lines = path.read_bytes().splitlines(keepends=True)
    _cut(path, sum(map(len, lines[:-1])) + 20)  # the last row cut after 20 characters
    with pytest.raises(report.ReportFileError, match=r"results\.csv, line 6: .*cut"):
        report.read_csv(path)
    with pytest.raises(SystemExit) as exit_info:
        main([str(path)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "line 6" in err and "Traceback" not in err
    assert not (tmp_path / "results.md").exists()  # nothing made from it


@pytest.mark.parametrize("edit, message", [
    (lambda text: text[:-1], "cut"),  # the last row without its line end: cut inside its last field
    (lambda text: text.replace("\r\n", ",extra\r\n", 2).replace("kind,extra", "kind", 1),
     "line 2: 30 fields"),
    (lambda text: text.replace("0.46", "0.4x6"), "line 3: accuracy"),
    (lambda text: text.replace(",tasks,", ",taskz,", 1), "unknown column"),
    (lambda text: text.replace(",method,", ",", 1), "lacks the column"),
    (lambda text: "", "empty"),
])
def test_malformed_results_files_are_refused(tmp_path, edit, message):
    path = report.write_csv(_seed_rows([0.40, 0.46, 0.37]), tmp_path / "results.csv")
    path.write_bytes(edit(path.read_bytes().decode()).encode())
    with pytest.raises(report.ReportFileError, match=message):
        report.read_csv(path)


def test_a_cut_tuning_or_variance_file_is_refused(tmp_path):
    path = tmp_path / "variance.csv"
    path.write_text("protocol,seed,method,accuracy\nhead,0,tmc,0.40\nhead,1,tm")
    with pytest.raises(report.ReportFileError, match="line 3: .*cut"):
        report.generated_block(path)


# ---------------------------------------------------------------------------- issue 42, class 5


@pytest.mark.parametrize("accuracy", ["nan", "inf", "-inf", "-0.01", "1.5", "46"])
def test_an_accuracy_that_is_not_a_fraction_is_refused_naming_its_line(tmp_path, capsys, accuracy):
    """NaN, infinite or out-of-range accuracies were averaged into the table (and bolded as the best)."""
    path = report.write_csv(_two_method_rows(), tmp_path / "results.csv")
    path.write_text(path.read_text().replace("0.46", accuracy, 1))
    with pytest.raises(report.ReportFileError, match=r"results\.csv, line 3: accuracy is .*not a fraction in \[0, 1\]"):
        report.read_csv(path)
    with pytest.raises(SystemExit) as exit_info:
        main([str(path)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "results.csv, line 3" in err and "Traceback" not in err
    assert not (tmp_path / "results.md").exists()


def test_the_bounds_of_an_accuracy_are_accepted(tmp_path):
    rows = report.read_csv(report.write_csv(_seed_rows([0.0, 1.0, 0.5]), tmp_path / "results.csv"))
    assert [r["accuracy"] for r in rows] == [0.0, 1.0, 0.5]


def test_a_duplicated_row_is_refused_naming_both_lines(tmp_path, capsys):
    """Duplicates were averaged into the table while the verdicts paired by seed."""
    path = report.write_csv(_two_method_rows(), tmp_path / "results.csv")
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines + [lines[2].replace("0.46", "0.99")]))  # seed 1 of TMC again, another accuracy
    with pytest.raises(report.ReportFileError, match=r"results\.csv, line 7: a duplicate of line 3"):
        report.read_csv(path)
    with pytest.raises(SystemExit) as exit_info:
        main([str(path)])
    assert exit_info.value.code == 2 and "line 7: a duplicate of line 3" in capsys.readouterr().err


@pytest.mark.parametrize("body, message", [
    ("head,0,tmc,0.40,variance\nhead,1,tmc,nan,variance\n", "line 3: accuracy is 'nan'"),
    ("head,0,tmc,0.40,variance\nhead,1,tmc,1.2,variance\n", "line 3: accuracy is '1.2'"),
    ("head,0,tmc,0.40,variance\nhead,0,tmc,0.41,variance\n", "line 3: a duplicate of line 2"),
    ("head,0,tmc,0.40,variance\nhead,1,tmc,x,variance\n", "line 3: accuracy is 'x', not a number"),
])
def test_a_variance_file_with_a_bad_accuracy_or_a_duplicate_is_refused(tmp_path, body, message):
    path = tmp_path / "variance.csv"
    path.write_text("protocol,seed,method,accuracy,kind\n" + body)
    with pytest.raises(report.ReportFileError, match=message):
        report.generated_block(path)


def test_a_tuning_file_with_a_bad_validation_accuracy_is_refused(tmp_path):
    trials = [dict(dataset="d", scenario="class", tasks=2, regime="from b", family="tangent", lr=lr, epochs=5,
                   validation_accuracy=acc, chosen="no", edge="", rows="") for lr, acc in ((1e-3, 0.4), (1e-2, "inf"))]
    report.write_tuning_csv(trials, tmp_path / "tuning.csv")
    with pytest.raises(report.ReportFileError, match=r"tuning\.csv, line 3: validation_accuracy is 'inf'"):
        report.generated_block(tmp_path / "tuning.csv")


BEGIN_R = "<!-- generated from results/r.csv by: python -m benchmarks.report results/r.csv --readme README.md -->"
BEGIN_S = "<!-- generated from results/s.csv by: python -m benchmarks.report results/s.csv --readme README.md -->"


def _page(tmp_path, text, newline="\n"):
    (tmp_path / "results").mkdir(exist_ok=True)
    report.write_csv(_seed_rows([0.40, 0.46, 0.37]), tmp_path / "results" / "r.csv")
    report.write_csv(_seed_rows([0.20, 0.26, 0.17]), tmp_path / "results" / "s.csv")
    readme = tmp_path / "README.md"
    readme.write_bytes(text.replace("\n", newline).encode())
    return readme


def _block(tmp_path, name="r"):
    return report.generated_block(tmp_path / "results" / f"{name}.csv")


def test_markers_quoted_in_a_fenced_code_example_are_not_a_block(tmp_path):
    example = f"```markdown\n{BEGIN_R}\n(the table)\n{report.GENERATED_END}\n```\n"
    readme = _page(tmp_path, f"# x\n\nAdd:\n\n{example}\n{BEGIN_R}\nstale\n{report.GENERATED_END}\n")
    report.update_readme(readme, "results/r.csv", _block(tmp_path))
    text = readme.read_text()
    assert example in text  # the example as it was
    assert text.count("41.0 ± 4.6") == 1 and "stale" not in text
    assert text.index("41.0 ± 4.6") > text.index(example) + len(example)
    only_example = _page(tmp_path, f"# x\n\n~~~\n{BEGIN_R}\n{report.GENERATED_END}\n~~~\n")
    before = only_example.read_bytes()
    with pytest.raises(ValueError, match="no block generated from results/r.csv"):
        report.update_readme(only_example, "results/r.csv", _block(tmp_path))
    assert only_example.read_bytes() == before


@pytest.mark.parametrize("fence, inner", [
    ("```", "    ```"),  # indented 4 spaces: content, not the closing fence
    ("```", "\t```"),  # a tab is 4 columns of indentation
    ("```", "``` not the end"),  # text after it
    ("````", "```"),  # shorter than the opening fence
    ("```", "~~~"),  # the other character
    ("~~~", "    ~~~"),
    ("~~~~", "~~~ x"),
    ("~~~", "```"),
])
def test_a_fence_marker_quoted_inside_a_code_block_does_not_end_it(tmp_path, fence, inner):
    """Issue 42, class 6: CommonMark's closing fence (at most 3 spaces of indentation, the
    same character at least as many times, nothing but spaces after it); a line that is
    content of the code block left the quoted markers after it read as a block."""
    from tests.doc_pages import fences

    example = f"{fence}markdown\n{inner}\n{BEGIN_R}\nquoted\n{report.GENERATED_END}\n{fence}\n"
    readme = _page(tmp_path, f"# x\n\n{example}\n{BEGIN_R}\nstale\n{report.GENERATED_END}\n")
    assert [b[0] for b in report.find_generated_blocks(readme.read_text())] == [9]  # 0-based: line 10
    assert [(start, end) for start, end, _ in fences(readme.read_text())] == [(3, 8)]
    report.update_readme(readme, "results/r.csv", _block(tmp_path))
    text = readme.read_text()
    assert example in text and "stale" not in text and text.count("41.0 ± 4.6") == 1


@pytest.mark.parametrize("fence, closing", [("```", "   ```"), ("```", "```   "), ("```", "`````"),
                                            ("~~~", "  ~~~~ \t"), ("````", "````")])
def test_a_closing_fence_may_be_indented_3_spaces_longer_and_followed_by_spaces(tmp_path, fence, closing):
    from benchmarks.results.readme_blocks import closes_fence

    assert closes_fence(closing, fence)
    readme = _page(tmp_path, f"{fence}\ncode\n{closing}\n{BEGIN_R}\nstale\n{report.GENERATED_END}\n")
    assert [b[0] for b in report.find_generated_blocks(readme.read_text())] == [3]


def test_every_block_generated_from_one_file_is_rewritten(tmp_path):
    readme = _page(tmp_path, f"{BEGIN_R}\nstale one\n{report.GENERATED_END}\n\nmiddle\n\n"
                             f"{BEGIN_R}\nstale two\n{report.GENERATED_END}\n")
    block = _block(tmp_path)
    assert report.update_readme(readme, "results/r.csv", block, check=True) is False
    report.update_readme(readme, "results/r.csv", block)
    text = readme.read_text()
    assert "stale" not in text and text.count("41.0 ± 4.6") == 2 and "\nmiddle\n" in text
    assert report.update_readme(readme, "results/r.csv", block, check=True) is True
    # the second block stale again: the check says so, and the rewrite fixes it
    second = text.rindex("41.0 ± 4.6")
    readme.write_text(text[:second] + "40.0" + text[second + 4:])
    assert report.update_readme(readme, "results/r.csv", block, check=True) is False
    report.update_readme(readme, "results/r.csv", block)
    assert readme.read_text() == text


@pytest.mark.parametrize("layout", ["before another block", "at the end"])
def test_a_block_without_its_end_marker_is_refused_and_nothing_is_written(tmp_path, layout):
    if layout == "before another block":
        text = f"{BEGIN_R}\nold table\n\nHand-written text.\n\n{BEGIN_S}\nold\n{report.GENERATED_END}\n"
    else:
        text = f"{BEGIN_S}\nold\n{report.GENERATED_END}\n\n{BEGIN_R}\nold table\n\nHand-written text.\n"
    readme = _page(tmp_path, text)
    before = readme.read_bytes()
    for name in ("r", "s"):
        with pytest.raises(report.ReportFileError, match=r"README\.md, line \d+: the block generated from "
                                                         r"results/r\.csv has no end marker"):
            report.update_readme(readme, f"results/{name}.csv", _block(tmp_path, name))
    assert readme.read_bytes() == before


def test_an_end_marker_without_a_block_is_refused(tmp_path):
    readme = _page(tmp_path, f"{BEGIN_R}\nold\n{report.GENERATED_END}\n\ntext\n{report.GENERATED_END}\n")
    with pytest.raises(report.ReportFileError, match="line 6: an end marker without a block"):
        report.update_readme(readme, "results/r.csv", _block(tmp_path))


def test_rewriting_writes_through_a_symlink_and_keeps_mode_and_line_endings(tmp_path):
    readme = _page(tmp_path, f"# x\n\n{BEGIN_R}\nstale\n{report.GENERATED_END}\n\nafter\n", newline="\r\n")
    target = tmp_path / "real.md"
    readme.rename(target)
    readme.symlink_to(target.name)
    target.chmod(0o600)
    report.main([str(tmp_path / "results" / "r.csv"), "--readme", str(readme)])
    assert readme.is_symlink() and readme.resolve() == target.resolve()
    data = target.read_bytes()
    assert "41.0 ± 4.6".encode() in data and b"stale" not in data
    assert data.count(b"\n") == data.count(b"\r\n") > 10  # every line still ends in CRLF
    assert data.endswith(b"\r\n\r\nafter\r\n")
    assert target.stat().st_mode & 0o777 == 0o600
    assert report.update_readme(readme, "results/r.csv", _block(tmp_path), check=True) is True
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary file left


def test_the_main_job_table_has_a_column_per_scenario_and_a_cell_per_promised_row():
    """Rows of the main preset's methods in class-IL, its task-IL evaluation (reused
    training) and data-IL: three columns, every promised row with a number in each (TMC-Seq
    in data-IL only), the reuse said in the notes and the timing table."""
    from benchmarks.runner.presets import MAIN_SEEDS, PRESETS

    class_run, data_run = PRESETS["offline"]
    promised = {"class": class_run["methods"].split(","), "task": class_run["methods"].split(","),
                "data": data_run["methods"].split(",")}
    assert {"tmc", "tme", "soup", "ens-l", "ens-sm", "naive", "er", "lwf", "ewc", "der", "joint"} <= set(
        promised["class"]) and "tmc-seq" in promised["data"]
    rows = []
    for scenario, methods in promised.items():
        run = ("d", scenario, 5, "from blocks.4")
        for method in methods:
            for seed in MAIN_SEEDS:
                row = make_row(run, method, "composed", 5, "all", 0.5 + 0.01 * seed)
                rows.append(dict(row, seed=seed, trained_in="class" if scenario == "task" else ""))
    header, cells, _ = parse_table(markdown_table(rows))
    columns = ["C-d (5 tasks, from blocks.4)", "T-d (5 tasks, from blocks.4)", "D-d (5 tasks, from blocks.4)"]
    assert header[1:4] == columns
    for scenario, column in zip(("class", "task", "data"), columns):
        for method in order_methods(promised["data"] + promised["class"]):
            cell = cells[method_info(method)[0]][column]
            assert (cell == "–") == (method not in promised[scenario]), (method, column, cell)
            if method in promised[scenario]:
                assert cell.strip("*").startswith("52.0 ± 1.6"), cell
    table = markdown_table(rows)
    assert "- T-d (5 tasks, from blocks.4): the rows are C-d (5 tasks, from blocks.4)'s training" in table
    timing = parse_table(timing_table(rows).split("\n\n", 1)[1])[1]
    assert timing["TMC"]["T-d (5 tasks, from blocks.4)"].startswith("C-IL's / ")
    assert timing["TMC"]["C-d (5 tasks, from blocks.4)"] == "8 / 0"


def test_the_readme_summary_is_a_few_rows_of_the_table_and_the_verdicts_count(tmp_path):
    """Issue 59, item 7: README.md shows one small generated table (--summary): the
    representative rows it has, one column per scenario, the count line of the verdicts; the
    full table stays in the results page. A summary of another kind of file is refused."""
    from benchmarks.results.summary import SUMMARY_METHODS, summary_block

    rows = synthetic_rows()
    block = summary_block(rows)
    table = [line for line in block.splitlines()
             if line.startswith("| ") and not line.startswith(("| Method", "| ---"))]
    shown = [line.split(" | ")[0][2:] for line in table]
    expected = [report.method_info(m)[0] for m in SUMMARY_METHODS if m in {r["method"] for r in rows}]
    assert shown == expected and len(shown) < len({r["method"] for r in rows})
    assert block.splitlines()[0].startswith("| Method | class-IL, ")
    full = report.markdown_table(rows)
    for line in table:  # the same cells as the full table's
        name, *cells = line[2:-2].split(" | ")
        assert any(all(c in full_line for c in cells) for full_line in full.splitlines() if name in full_line)
    path = report.write_tuning_csv([dict(dataset="d", lr=0.1)], tmp_path / "t.csv")
    with pytest.raises(report.ReportFileError, match="--summary is the small table of a results file"):
        report.generated_block(path, summary=True)


def test_the_report_says_which_files_it_overwrote(rows, tmp_path, capsys):
    """Issue 59, item 8: re-making a report replaced an edited results.md and the plots without
    a word; the second run names each file it overwrote."""
    path = write_csv(rows, tmp_path / "results.csv")
    report.main([str(path)])
    assert "(overwritten)" not in capsys.readouterr().out
    (tmp_path / "results.md").write_text("my notes\n", encoding="utf-8")
    report.main([str(path)])
    out = capsys.readouterr().out
    assert f"markdown: {tmp_path / 'results.md'} (overwritten)" in out and "accuracy_curves.png (overwritten)" in out
