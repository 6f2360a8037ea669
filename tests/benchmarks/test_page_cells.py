"""Issue 52, item 11: what a generated block shows can never break its page. A cell holding a
line break and the end marker (a dataset name, a premise input, a machine name) or an HTML
comment marker is refused with one line naming the file and line, and nothing is written; a
block that would change the page's blocks is refused before the page is written. The block
of an unfinished results folder says it is incomplete."""

import json

import pytest

from benchmarks import report
from benchmarks.results.files import ReportFileError, write_csv
from benchmarks.results.readme_blocks import update_readme

PAGE = ("# Results\n\n<!-- generated from results.csv by: python -m benchmarks.report results.csv --readme page.md -->"
        "\n<!-- end generated -->\n\nThe text after the block.\n")


def _rows(dataset="d"):
    return [dict(dataset=dataset, scenario="class", tasks=2, backbone="b", method=m, model="composed", after_task=2,
                 eval_exp="all", accuracy=a, seed=s, train_seconds=1.0, eval_seconds=1.0)
            for m, accs in {"tmc": [0.5, 0.6], "ewc": [0.2, 0.3]}.items() for s, a in enumerate(accs)]


def _page(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    return page


@pytest.mark.parametrize("dataset", ["d\n<!-- end generated -->\n", "d\r<!-- end generated -->", "d<!-- hidden",
                                     "d --> e", "d\x1b[31m"])
def test_a_cell_that_could_break_the_page_is_refused_and_nothing_is_written(tmp_path, capsys, dataset):
    csv = write_csv(_rows(dataset), tmp_path / "results.csv")
    page = _page(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        report.main([str(csv), "--readme", str(page)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and len(err.strip().splitlines()) == 1 and "line 2: the dataset cell" in err
    assert page.read_text() == PAGE and not (tmp_path / "results.md").exists()


@pytest.mark.parametrize("kind, header, row", [
    ("spread", "dataset,scenario,tasks,regime,method,seeds,machine_a,mean_a,machine_b,mean_b,max_seed_difference,"
               "seed_difference_std,kind", 'd,class,5,r,tmc,0,"A\n<!-- end generated -->",0.4,B,0.4,0.0,0.0,spread'),
    ("premise-map", "input,dataset,scenario,tasks,regime,seeds,joint,joint_tangent,tmc,tmc_fc,gap,gap_low,gap_high,"
                    "loss,loss_low,loss_high,gain,gain_low,gain_high,premise,seconds_per_seed,kind",
     '"x\n<!-- end generated -->",d,class,5,r,1,70,69,40,30,1,,,29,,,40,,,not resolved,12,premise-map'),
])
def test_a_cell_of_another_kind_with_the_end_marker_is_refused(tmp_path, kind, header, row):
    path = tmp_path / f"{kind}.csv"
    path.write_text(f"{header}\n{row}\n")
    with pytest.raises(ReportFileError, match="line 2: the .* cell .* holds a control character"):
        report.generated_block(path)


@pytest.mark.parametrize("block", ["| a |\n<!-- end generated -->\n| b |",
                                   "<!-- generated from other.csv by: x -->\n| a |",
                                   "```\n| a |"])
def test_a_block_that_would_change_the_page_s_blocks_is_refused(tmp_path, block):
    """Whatever the block's source: one that ends a block early, opens another or an unclosed
    code fence (which swallows the end marker) is never written into the page."""
    page = _page(tmp_path)
    with pytest.raises(ReportFileError, match="would break the page's blocks: nothing was written"):
        update_readme(page, "results.csv", block)
    assert page.read_text() == PAGE


def test_the_block_of_an_unfinished_folder_says_it_is_incomplete(tmp_path):
    csv = write_csv(_rows(), tmp_path / "results.csv")
    (tmp_path / "status.json").write_text(json.dumps({"complete": False, "missing": ["C-d (2 tasks), seed 2"]}))
    page = _page(tmp_path)
    report.main([str(csv), "--readme", str(page)])
    block = page.read_text().split("--readme page.md -->\n", 1)[1]
    assert block.startswith("\n**Incomplete: 1 planned run(s) missing: C-d (2 tasks), seed 2.**")
    (tmp_path / "status.json").write_text(json.dumps({"complete": True, "missing": []}))
    assert not report.generated_block(csv).startswith("**Incomplete")


def test_a_status_file_whose_missing_runs_would_break_the_page_is_refused(tmp_path):
    csv = write_csv(_rows(), tmp_path / "results.csv")
    (tmp_path / "status.json").write_text(json.dumps({"complete": False, "missing": ["x\n<!-- end generated -->"]}))
    with pytest.raises(ReportFileError, match="status.json: 'missing' is not a list of runs"):
        report.generated_block(csv)
