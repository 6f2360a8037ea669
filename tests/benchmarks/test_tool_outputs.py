"""Issue 52, item 11: the offline tools' outputs. The spread, premise, seed-count and test-cost
tools refuse an output that names one of their inputs (as ``compose`` does), never follow a
symlink at their output, refuse names that would break a page, say so when they have nothing
to write, and end a failed write (or a GPU-check folder that cannot be used) in one line,
exit 2, never a traceback."""

import contextlib
import os
import resource

import pytest

from benchmarks.results.files import write_csv
from benchmarks.tools import gpu_check
from benchmarks.tools import spread as spread_tool

FINALS = {"joint": [0.80, 0.84, 0.82], "joint-tangent": [0.79, 0.80, 0.81], "tmc": [0.50, 0.46, 0.48],
          "tmc-fc": [0.70, 0.70, 0.73]}


def _rows(finals=FINALS, seeds=(0, 1, 2), **settings):
    row = dict(dataset="d", scenario="class", tasks=5, backbone="resnet18", model="composed", after_task=5,
               eval_exp="all", train_seconds=1.0, eval_seconds=1.0, regime="r", epochs=5, lr=0.01, tuned="no")
    return [dict(row, method=m, accuracy=a, seed=s, **settings) for m, accs in finals.items()
            for s, a in zip(seeds, accs)]


def _one_line(capsys, *needles):
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err
    return err


@pytest.fixture
def two(tmp_path):
    return write_csv(_rows(), tmp_path / "a.csv"), write_csv(_rows(), tmp_path / "b.csv")


def _exit(main, argv):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    return exit_info.value.code


@pytest.mark.parametrize("how", ["same path", "symlink", "hard link"])
def test_spread_refuses_an_out_that_is_one_of_its_inputs(tmp_path, capsys, two, how):
    a, b = two
    before = a.read_bytes()
    out = {"same path": a, "symlink": tmp_path / "link.csv", "hard link": tmp_path / "hard.csv"}[how]
    if how == "symlink":
        out.symlink_to(a)
    elif how == "hard link":
        os.link(a, out)
    assert _exit(spread_tool.main, [str(a), str(b), "--out", str(out)]) == 2
    _one_line(capsys, "--out names the first results file")
    assert a.read_bytes() == before


def test_an_output_that_is_a_symlink_elsewhere_is_replaced_never_followed(tmp_path, two):
    a, b = two
    other = tmp_path / "other.txt"
    other.write_text("keep me\n")
    out = tmp_path / "spread.csv"
    out.symlink_to(other)
    spread_tool.main([str(a), str(b), "--out", str(out)])
    assert other.read_text() == "keep me\n" and not out.is_symlink() and "spread" in out.read_text()


def test_spread_with_no_seed_in_common_writes_nothing_and_says_so(tmp_path, capsys):
    a = write_csv(_rows(seeds=(0, 1, 2)), tmp_path / "a.csv")
    b = write_csv(_rows(seeds=(3, 4, 5)), tmp_path / "b.csv")
    assert _exit(spread_tool.main, [str(a), str(b), "--out", str(tmp_path / "s.csv")]) == 2
    _one_line(capsys, "no run, method and seed in common", "nothing to write")
    assert not (tmp_path / "s.csv").exists()


@pytest.mark.parametrize("settings, column", [(dict(backbone="resnet50"), "backbone"), (dict(epochs=10), "epochs"),
                                              (dict(lr=0.1), "lr")])
def test_spread_refuses_files_of_another_backbone_or_epoch_count(tmp_path, capsys, settings, column):
    a = write_csv(_rows(), tmp_path / "a.csv")
    b = write_csv(_rows(**settings), tmp_path / "b.csv")
    assert _exit(spread_tool.main, [str(a), str(b), "--out", str(tmp_path / "s.csv")]) == 2
    _one_line(capsys, f": {column} ", "not the same run")
    assert not (tmp_path / "s.csv").exists()
    tuned = write_csv(_rows(tuned="yes", epochs=10), tmp_path / "t.csv")  # tuning may choose otherwise per machine
    assert spread_tool.machine_spread(_rows(tuned="yes"), spread_tool.read_csv(tuned), "A", "B")


def test_spread_names_that_would_break_a_page_are_refused(tmp_path, capsys, two):
    a, b = two
    name = "A\n<!-- end generated -->"
    assert _exit(spread_tool.main, [str(a), str(b), "--names", name, "B", "--out", str(tmp_path / "s.csv")]) == 2
    assert "--names" in capsys.readouterr().err and not (tmp_path / "s.csv").exists()


@contextlib.contextmanager
def file_size_limit():
    """Writes beyond 200 bytes fail with EFBIG (Python ignores SIGXFSZ)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (200, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


def test_a_spread_write_that_fails_is_one_line_naming_the_file(tmp_path, capsys, two):
    a, b = two
    out = tmp_path / "s.csv"
    with file_size_limit():
        assert _exit(spread_tool.main, [str(a), str(b), "--out", str(out)]) == 2
    _one_line(capsys, f"{out}: cannot be written")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.csv", "b.csv"]  # no temporary left behind


# ------------------------------------------------------------------------------------- premise


def _folder(tmp_path, name, rows):
    write_csv(rows, tmp_path / name / "results.csv")
    return tmp_path / name


def test_premise_refuses_a_csv_that_is_a_folder_s_results_file(tmp_path, capsys):
    from benchmarks.results.premise import main

    folder = _folder(tmp_path, "32px", _rows())
    before = (folder / "results.csv").read_bytes()
    assert _exit(main, [str(folder), "--csv", str(folder / "results.csv")]) == 2
    _one_line(capsys, "--csv names the results file of")
    assert (folder / "results.csv").read_bytes() == before


def test_premise_without_premise_rows_writes_no_empty_map(tmp_path, capsys):
    from benchmarks.results.premise import main

    folder = _folder(tmp_path, "32px", _rows({"tmc": [0.5, 0.5, 0.5]}))
    assert _exit(main, [str(folder), "--csv", str(tmp_path / "map.csv")]) == 2
    _one_line(capsys, "has the rows of a premise figure", "nothing to write")
    assert not (tmp_path / "map.csv").exists()


def test_premise_refuses_a_folder_name_that_would_break_a_page(tmp_path, capsys):
    from benchmarks.results.premise import main

    folder = _folder(tmp_path, "x\n<!-- end generated -->", _rows())
    assert _exit(main, [str(folder), "--csv", str(tmp_path / "map.csv")]) == 2
    _one_line(capsys, "rename the folder")
    assert not (tmp_path / "map.csv").exists()


def test_premise_on_a_malformed_results_file_is_one_line(tmp_path, capsys):
    from benchmarks.results.premise import main

    folder = _folder(tmp_path, "32px", _rows())
    (folder / "results.csv").write_text((folder / "results.csv").read_text().replace("0.46", "nan"))
    assert _exit(main, [str(folder)]) == 2
    _one_line(capsys, "accuracy is 'nan'")


def test_a_premise_write_that_fails_is_one_line(tmp_path, capsys):
    from benchmarks.results.premise import main

    folder = _folder(tmp_path, "32px", _rows())
    with file_size_limit():
        assert _exit(main, [str(folder), "--csv", str(tmp_path / "map.csv")]) == 2
    _one_line(capsys, "map.csv: cannot be written")


def test_suite_costs_refuses_an_out_that_is_its_report(tmp_path, capsys):
    from benchmarks.results.suite_costs import main

    report = tmp_path / "fast.xml"
    report.write_text('<testsuite time="1"><testcase classname="tests.a" name="t" time="1"/></testsuite>')
    assert _exit(main, ["--tier", "fast", str(report), "--out", str(report)]) == 2
    _one_line(capsys, "--out names the fast tier's report")
    assert report.read_text().startswith("<testsuite")


# ----------------------------------------------------------------------------------- GPU check


@pytest.fixture
def quick_check(monkeypatch):
    """The dry run with every step and input faked: what is left is the report's writing."""
    monkeypatch.setattr(gpu_check, "_prepare_inputs", lambda workdir, dry_run: None)
    monkeypatch.setattr(gpu_check, "run_step", lambda step, env: gpu_check.StepResult(step, 0, 0.1, ""))
    monkeypatch.setattr(gpu_check, "_gpu_hours", lambda speed, env, steady=None: "")


@pytest.mark.parametrize("what", ["a file", "a symlink loop"])
def test_a_gpu_check_workdir_that_cannot_be_used_is_one_line(tmp_path, capsys, quick_check, what):
    workdir = tmp_path / "work"
    if what == "a file":
        workdir.write_text("x")
    else:
        workdir.symlink_to(tmp_path / "loop")
        (tmp_path / "loop").symlink_to(workdir)
    code = _exit(gpu_check.main, ["--dry-run", "--workdir", str(workdir), "--out", str(tmp_path / "out")])
    assert code == 2
    _one_line(capsys, f"--workdir {workdir}")


def test_a_gpu_check_out_that_is_a_file_is_one_line(tmp_path, capsys, quick_check):
    (tmp_path / "out").write_text("x")
    assert _exit(gpu_check.main, ["--dry-run", "--out", str(tmp_path / "out")]) == 2
    _one_line(capsys, "--out")


def test_the_gpu_check_report_replaces_a_symlink_never_follows_it(tmp_path, quick_check):
    other = tmp_path / "other.md"
    other.write_text("keep me\n")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "cpu-dry-run.md").symlink_to(other)
    path = gpu_check.main(["--dry-run", "--out", str(tmp_path / "out"), "--workdir", str(tmp_path / "work")])
    assert other.read_text() == "keep me\n" and not path.is_symlink() and "Dry run" in path.read_text()


def test_a_gpu_check_report_that_cannot_be_written_is_one_line(tmp_path, capsys, quick_check):
    with file_size_limit():
        code = _exit(gpu_check.main, ["--dry-run", "--out", str(tmp_path / "out"), "--workdir", str(tmp_path / "w")])
    assert code == 2
    _one_line(capsys, "cpu-dry-run.md: cannot be written")
