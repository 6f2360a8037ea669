"""The plots a paper can use (issue 52, item 6): ``--plot-format png,pdf,svg`` for the report
and the runner (an unknown format refused in one line, exit 2), PNGs at 300 dpi, a palette
where no two rows of a figure share a hue family (checked against hue angles computed here
with ``colorsys``), task-IL panels that say how untrained tasks are scored, and one step
numbering (``after step`` 1..T, experiences ``exp 0``..) across the plots."""

import colorsys
import itertools
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import report
from benchmarks.protocol.choices import PLOT_FORMATS, plot_formats
from benchmarks.results.plots import HUE_FAMILIES, method_styles, plot_accuracy_curves, plot_components
from tests.benchmarks.test_report import CLASS_RUN, make_row, synthetic_rows

ROOT = Path(__file__).resolve().parents[2]
MAGIC = {"png": b"\x89PNG\r\n\x1a\n", "pdf": b"%PDF-", "svg": b"<?xml"}


def _hue(color: str):
    """(hue in degrees, saturation, value) of a ``#rrggbb`` colour."""
    r, g, b = (int(color[i:i + 2], 16) / 255 for i in (1, 3, 5))
    h, s, v = colorsys.rgb_to_hsv(r, g, b)
    return 360 * h, s, v


def _hue_distance(a: float, b: float) -> float:
    return min(abs(a - b), 360 - abs(a - b))


def test_plot_formats_are_parsed_and_an_unknown_one_is_refused():
    assert PLOT_FORMATS == ("png", "pdf", "svg")
    assert plot_formats("png") == ("png",)
    assert plot_formats(" PDF, svg,pdf ") == ("pdf", "svg")  # case, spaces, repeats
    for bad in ("gif", "png,jpg", "", ","):
        with pytest.raises(ValueError, match="choose from png, pdf, svg"):
            plot_formats(bad)


def test_the_report_writes_every_format_asked_for(tmp_path):
    csv_path = report.write_csv(synthetic_rows(), tmp_path / "run" / "results.csv")
    paths = report.main([str(csv_path), "--plot-format", "pdf,svg"])
    written = sorted(p.name for p in csv_path.parent.iterdir() if p.suffix != ".csv")
    assert written == ["accuracy_curves.pdf", "accuracy_curves.svg", "components_tmc.pdf", "components_tmc.svg",
                       "results.md"]
    for path in csv_path.parent.iterdir():
        if path.suffix in (".pdf", ".svg"):
            assert path.read_bytes().startswith(MAGIC[path.suffix[1:]])
    assert {p.name for p in paths.values()} == set(written)
    pdf = (csv_path.parent / "accuracy_curves.pdf").read_bytes()
    assert b"/FontFile2" in pdf and b"/Type3" not in pdf  # TrueType fonts: a journal's PDF check passes
    assert "<text" in (csv_path.parent / "accuracy_curves.svg").read_text()  # text stays text, editable


def test_the_report_refuses_an_unknown_plot_format_in_one_line_with_exit_2(tmp_path):
    csv_path = report.write_csv(synthetic_rows(), tmp_path / "results.csv")
    done = subprocess.run([sys.executable, "-m", "benchmarks.report", str(csv_path), "--plot-format", "png,gif"],
                          cwd=ROOT, capture_output=True, text=True, env=dict(os.environ, OMP_WAIT_POLICY="PASSIVE"))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines()[-1] == (
        "python -m benchmarks.report: error: argument --plot-format: unknown plot format 'gif': choose from png, "
        "pdf, svg (comma-separated, e.g. png,pdf)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.csv"]  # nothing written


def test_the_runner_refuses_an_unknown_plot_format_and_passes_the_formats_on(tmp_path, monkeypatch, capsys):
    from benchmarks import run
    from tests.benchmarks.test_outdir import _rows

    with pytest.raises(SystemExit) as exit_:
        run.parse_args(["--plot-format", "eps"])
    assert exit_.value.code == 2
    assert "argument --plot-format: unknown plot format 'eps': choose from png, pdf, svg" in capsys.readouterr().err
    monkeypatch.setattr(run, "preflight", lambda runs, options: None)
    monkeypatch.setattr(run, "run_one", lambda config, options, out_dir: (_rows(config), []))
    out = tmp_path / "out"
    run.main(["--preset", "offline", "--out", str(out), "--plot-format", "svg,png"])
    assert (out / "accuracy_curves.svg").is_file() and (out / "accuracy_curves.png").is_file()
    assert not (out / "accuracy_curves.pdf").exists()


def test_pngs_are_300_dpi(tmp_path):
    path = plot_accuracy_curves(synthetic_rows(), tmp_path / "curves.png")
    data = path.read_bytes()
    at = data.index(b"pHYs")
    x_per_metre, y_per_metre, unit = struct.unpack(">IIB", data[at + 4:at + 13])
    assert unit == 1 and x_per_metre == y_per_metre == round(300 / 0.0254)


def test_no_two_rows_of_a_figure_share_a_hue_family():
    """Every pair of chromatic colours at least 35 degrees of hue apart (tab20 gave TMC and TME
    two blues, tab10's red and pink are 41 degrees apart and pale), saturated enough to be no
    pale variant of another, and one achromatic colour at most."""
    families = [color for _, color in HUE_FAMILIES]
    assert len(set(families)) == len(families) >= 9
    chromatic = [_hue(c) for c in families if _hue(c)[1] > 0.1]
    assert len(families) - len(chromatic) <= 1
    assert all(s >= 0.75 and v <= 0.9 for _, s, v in chromatic)  # no pale or washed-out variant
    assert min(_hue_distance(a[0], b[0]) for a, b in itertools.combinations(chromatic, 2)) >= 35
    rows = report.order_methods(["tmc", "tme", "tme-tmc", "tmc-fc", "soup", "ens-l", "ens-sm", "naive", "ewc", "der"])
    styles = method_styles(rows[:len(families)])
    assert len({s.color for s in styles.values()}) == len(styles)  # no family twice
    assert styles["tmc"].color != styles["tme"].color and styles["tmc-fc"].color != styles["naive"].color


def test_rows_beyond_the_hue_families_repeat_one_with_another_line_and_every_row_has_its_own_marker():
    rows = [f"m{i}" for i in range(len(HUE_FAMILIES) + 4)]
    styles = method_styles(rows)
    assert len({(s.color, s.linestyle) for s in styles.values()}) == len(rows)
    assert len({s.marker for s in styles.values()}) == len(rows)
    assert styles[rows[len(HUE_FAMILIES)]].color == styles[rows[0]].color
    assert styles[rows[len(HUE_FAMILIES)]].linestyle != styles[rows[0]].linestyle


def _task_il_rows():
    task_run = ("mnist_like_30", "task", 3, "")
    rows = []
    for method in ("tmc", "lwf"):
        rows += [make_row(task_run, method, "composed", t, "all", 0.5 + 0.1 * t) for t in (1, 2, 3)]
    return rows


def test_the_curves_say_how_untrained_task_il_tasks_are_scored_and_number_the_steps(tmp_path):
    svg = plot_accuracy_curves(_task_il_rows(), tmp_path / "curves.png", formats=("svg",)).read_text()
    assert "after step" in svg and "experiences trained" not in svg
    assert "a task not yet trained is scored alike for every method" in svg
    class_only = [r for r in synthetic_rows() if r["scenario"] == "class"]
    svg = plot_accuracy_curves(class_only, tmp_path / "class.png", formats=("svg",)).read_text()
    assert "not yet trained" not in svg  # no task-IL panel, no caption


def test_the_component_heatmap_names_experiences_as_the_tables_do(tmp_path):
    rows = [r for r in synthetic_rows() if r["dataset"] == CLASS_RUN[0]]
    svg = plot_components(rows, tmp_path / "components.png", formats=("svg",)).read_text()
    assert all(f"exp {e}" in svg for e in range(CLASS_RUN[2]))


def test_the_component_heatmap_says_what_it_averages_and_calls_an_ensemble_one(tmp_path):
    """Issue 59, item 5: a heatmap's cells are means over seeds that each drew their own
    class order (said on the figure); TME's last row is an ensemble, not a composition."""
    rows = [r for r in synthetic_rows() if r["dataset"] == CLASS_RUN[0]]
    seeded = [dict(r, seed=s, data_seed=100 + s) for s in (0, 1, 2) for r in rows]
    svg = plot_components(seeded, tmp_path / "tmc.png", formats=("svg",)).read_text()
    assert "mean over 3 seeds; each drew its own class order or shards" in svg and "vs composed" in svg
    assert "1 seed" in plot_components(rows, tmp_path / "one.png", formats=("svg",)).read_text()
    tme = [dict(r, method="tme") for r in rows if r["method"] == "tmc"]
    svg = plot_components(tme, tmp_path / "tme.png", "tme", formats=("svg",)).read_text()
    assert "vs ensemble" in svg and "vs composed" not in svg
