"""Issue 52, item 11: every file the report reads is checked as results.csv is. The newer kinds
(premise map, test costs, tuning, seed count, machine spread) refuse NaN, infinite, negative,
out-of-range and duplicated values and two chosen trials of one unit; a non-numeric cell, a
file that is not UTF-8 and a FIFO in place of a file are one line naming the file (and line),
exit 2, never a traceback or a hang."""

import codecs
import os
import threading

import pytest

from benchmarks import report

HEADERS = {
    "premise-map": "input,dataset,scenario,tasks,regime,seeds,joint,joint_tangent,tmc,tmc_fc,gap,gap_low,gap_high,"
                   "loss,loss_low,loss_high,gain,gain_low,gain_high,premise,seconds_per_seed,kind",
    "test-costs": "tier,module,tests,seconds,kind",
    "tuning": "dataset,scenario,tasks,regime,family,lr,epochs,validation_accuracy,chosen,edge,rows,kind",
    "seed-count": "dataset,scenario,tasks,regime,claim,rival,pilot_seeds,difference,paired_std,pilot_verdict,family,"
                  "cap,delta,seeds_needed,decides,kind",
    "spread": "dataset,scenario,tasks,regime,method,seeds,machine_a,mean_a,machine_b,mean_b,max_seed_difference,"
              "seed_difference_std,kind",
}
ROWS = {
    "premise-map": ["32px,d,class,5,from b,3,71.78,66.17,42.44,42.44,5.61,4.57,6.65,23.72,21.86,25.59,29.33,26.44,"
                    "32.23,not met,30.7,premise-map",
                    "64px,d,class,5,from b,3,70.0,69.0,40.0,30.0,1.0,,,29.0,,,40.0,,,not resolved,12.5,premise-map"],
    "test-costs": ["fast,(wall clock),12,66.6,test-costs", "fast,tests/test_a.py,10,9.6,test-costs"],
    "tuning": ["d,class,5,from b,tangent,0.001,5,0.44,no,,tmc=0.5,tuning",
               "d,class,5,from b,tangent,0.001,10,0.52,yes,,tmc=0.6,tuning"],
    "seed-count": ["d,class,5,from b,TMC > Soup,soup,5,8.567,5.689,not resolved,40,40,2,16,holds or fails,seed-count",
                   "d,task,5,from b,TMC > Soup,soup,5,9.233,1.866,holds,40,40,2,,not within the cap,seed-count"],
    "spread": ["d,class,5,from b,tmc,0 1 2,A,0.45,B,0.46,0.01,0.005,spread",
               "d,class,5,from b,soup,0 1 2,A,0.40,B,0.41,0.02,0.01,spread"],
}


def _file(tmp_path, kind, column=None, value=None, extra=()):
    """A file of ``kind`` whose second row has ``column`` set to ``value`` (and ``extra`` rows after)."""
    header = HEADERS[kind].split(",")
    rows = [r.split(",") for r in ROWS[kind]]
    if column is not None:
        rows[1][header.index(column)] = value
    path = tmp_path / f"{kind}.csv"
    path.write_text("\n".join([HEADERS[kind], *map(",".join, rows), *extra]) + "\n", encoding="utf-8")
    return path


def _refused(path, capsys, message):
    with pytest.raises(report.ReportFileError, match=message):
        report.generated_block(path)
    with pytest.raises(SystemExit) as exit_info:
        report.main([str(path)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert path.name in err


@pytest.mark.parametrize("kind", list(HEADERS))
def test_each_kind_s_valid_file_renders(tmp_path, kind):
    assert report.generated_block(_file(tmp_path, kind)).startswith(("|", "Per claim", "Final accuracy"))


@pytest.mark.parametrize("kind, column, value", [
    ("premise-map", "joint", "nan"), ("premise-map", "tmc", "150"), ("premise-map", "gap", "inf"),
    ("premise-map", "seconds_per_seed", "-3"), ("premise-map", "seeds", "0"), ("premise-map", "premise", "maybe"),
    ("premise-map", "gain_low", "x"), ("premise-map", "tasks", "2.5"),
    ("test-costs", "seconds", "nan"), ("test-costs", "seconds", "-1"), ("test-costs", "tests", "-2"),
    ("test-costs", "tests", "many"), ("test-costs", "seconds", "inf"),
    ("tuning", "lr", "-0.1"), ("tuning", "lr", "nan"), ("tuning", "epochs", "0"), ("tuning", "epochs", "x"),
    ("tuning", "chosen", "perhaps"), ("tuning", "tasks", "inf"),
    ("seed-count", "difference", "nan"), ("seed-count", "difference", "250"), ("seed-count", "paired_std", "-1"),
    ("seed-count", "seeds_needed", "2.5"), ("seed-count", "cap", "1"), ("seed-count", "delta", "0"),
    ("seed-count", "decides", "who knows"), ("seed-count", "family", "inf"),
    ("spread", "seeds", "0 0 1"), ("spread", "seeds", "a b"), ("spread", "tasks", "x"), ("spread", "mean_b", "-0.1"),
])
def test_a_value_out_of_its_kind_s_bounds_is_refused_naming_its_line(tmp_path, capsys, kind, column, value):
    _refused(_file(tmp_path, kind, column, value), capsys, rf"line 3: .*{column} is '{value}'|line 3: {column} is")


@pytest.mark.parametrize("kind", list(HEADERS))
def test_a_duplicated_row_of_any_kind_is_refused(tmp_path, capsys, kind):
    _refused(_file(tmp_path, kind, extra=[ROWS[kind][0]]), capsys, "line 4: a duplicate of line 2")


def test_two_chosen_trials_for_one_tuning_unit_are_refused(tmp_path, capsys):
    path = _file(tmp_path, "tuning", extra=["d,class,5,from b,tangent,0.01,5,0.30,yes,,tmc=0.3,tuning"])
    _refused(path, capsys, "line 4: a duplicate of line 3 .*two chosen trials for one tuning unit")
    other_unit = _file(tmp_path, "tuning", extra=["d,class,5,from b,plain,0.01,5,0.30,yes,,naive=0.3,tuning"])
    assert "plain" in report.generated_block(other_unit)


@pytest.mark.parametrize("encoding, found", [("latin-1", "the byte 0xe9"), ("utf-16", "a UTF-16 byte-order mark")])
def test_a_results_file_that_is_not_utf8_is_one_line_naming_it(tmp_path, capsys, encoding, found):
    """A spreadsheet's Latin-1 or UTF-16 export ended in a UnicodeDecodeError traceback."""
    path = report.write_csv([dict(dataset="caf\u00e9", scenario="class", tasks=1, backbone="b", method="tmc",
                                  model="composed", after_task=1, eval_exp="all", accuracy=0.5, train_seconds=1.0,
                                  eval_seconds=1.0)], tmp_path / "results.csv")
    path.write_bytes(path.read_text(encoding="utf-8").encode(encoding))
    _refused(path, capsys, f"not UTF-8 text \\({found}")


def test_a_utf8_byte_order_mark_is_read(tmp_path):
    path = _file(tmp_path, "test-costs")
    path.write_bytes(codecs.BOM_UTF8 + path.read_bytes())
    assert "| fast |" in report.generated_block(path)


def _release(fifo):
    """Open the FIFO's writer in a thread (a reader that blocks on it gets an empty file, so
    the test ends either way) and return a function that frees that writer."""
    def write():
        with open(fifo, "w"):
            pass

    threading.Thread(target=write, daemon=True).start()
    return lambda: os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))


@pytest.mark.parametrize("which", ["results.csv", "status.json", "page"])
def test_a_fifo_in_place_of_an_input_is_refused_without_blocking(tmp_path, capsys, which):
    """A FIFO in place of the results file, its status.json or the page hung the report."""
    csv = _file(tmp_path, "test-costs")
    results = report.write_csv([dict(dataset="d", scenario="class", tasks=1, backbone="b", method="tmc",
                                     model="composed", after_task=1, eval_exp="all", accuracy=0.5, train_seconds=1.0,
                                     eval_seconds=1.0)], tmp_path / "results.csv")
    page = tmp_path / "page.md"
    target = {"results.csv": results, "status.json": tmp_path / "status.json", "page": page}[which]
    if target.exists():
        target.unlink()
    os.mkfifo(target)
    free = _release(target)
    try:
        with pytest.raises(SystemExit) as exit_info:
            report.main([str(results if which != "page" else csv), "--readme", str(page)])
    finally:
        free()
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "not a regular file" in err and len(err.strip().splitlines()) == 1
