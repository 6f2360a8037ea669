"""Issue 42, "every failure says what to do": failures that ended in "unexpected error, please
report it" (a traceback, exit 1) get one line and their documented exit code."""

import errno
import os
import resource

import pytest

import avalanche_tmc.files as cf
from avalanche_tmc import TangentModel
from avalanche_tmc.cli import EXIT_FACTORY, EXIT_USAGE, main
from avalanche_tmc.files import storage
from tests.helpers import two_silo_components

NEVER = "tests.avalanche_tmc.test_cli_refusals:never"
DATA = "tests.avalanche_tmc.cli_factories:data"


# ------------------------------------------------------------- a factory module that fails to import


@pytest.mark.parametrize("source", [
    "def model(:\n",  # SyntaxError
    "raise RuntimeError('broken at import')\n",
    "import sys\nsys.exit(3)\n",
    "x = 1 / 0\n",
    "raise KeyError('k')\n",
    "def __getattr__(name):\n    raise RuntimeError('no ' + name)\n",  # imports; reading the function fails
    "model = 1\0\n",  # a NUL byte
])
@pytest.mark.parametrize("as_file", [False, True])
def test_a_factory_that_fails_at_import_is_a_factory_error(tmp_path, monkeypatch, capsys, source, as_file):
    """A module named by --model that raised anything but ImportError at import exited 1 with a traceback."""
    package = tmp_path / f"factory_pkg42_{abs(hash((source, as_file)))}"  # a package of its own: not cached
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "broken.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = f"{package / 'broken.py'}:model" if as_file else f"{package.name}.broken:model"
    code = main(["train-component", "--experience", "0", "--out", str(tmp_path / "out"), "--quiet",
                 "--model", spec, "--data", spec])
    err = capsys.readouterr().err
    assert code == EXIT_FACTORY, err
    assert "Traceback" not in err and "unexpected error" not in err
    assert len(err.strip().splitlines()) == 1 and "broken" in err


@pytest.mark.parametrize("name", [".relative:model", "..up.module:model", "a..b:model", "héllo wörld:f"])
def test_a_factory_module_name_that_cannot_be_imported_is_a_factory_error(tmp_path, capsys, name):
    code = main(["train-component", "--experience", "0", "--out", str(tmp_path / "out"), "--quiet",
                 "--model", name, "--data", name])
    err = capsys.readouterr().err
    assert code == EXIT_FACTORY, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


# ------------------------------------------------------------- an OSError while writing


@pytest.fixture()
def files(tmp_path):
    directory = tmp_path / "silo"
    two_silo_components(directory)
    cf.save_component(cf.compose_components([cf.load_component(str(directory / f"experience-{exp}.safetensors"))
                                             for exp in (0, 1)]), str(tmp_path / "composed.safetensors"))
    return directory


def _one_line(err: str) -> str:
    assert "Traceback" not in err and "unexpected error" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("number, reason", [(errno.ENOSPC, "disk is full"), (errno.EROFS, "read-only"),
                                            (errno.EDQUOT, "quota"), (errno.EIO, "check the path")])
@pytest.mark.parametrize("command", ["compose", "forget"])
def test_an_oserror_while_writing_is_one_line_with_exit_2(tmp_path, files, monkeypatch, capsys, number, reason,
                                                          command):
    """A full disk (or any OSError of the write) ended in "unexpected error, please report it"."""
    out = tmp_path / "out.safetensors"

    def full(path, data, **kwargs):
        raise OSError(number, os.strerror(number), path)

    monkeypatch.setattr(storage, "write_atomically", full)
    inputs = ([str(files)] if command == "compose" else
              [str(tmp_path / "composed.safetensors"), str(files / "experience-1.safetensors")])
    assert main([command, *inputs, "--out", str(out), "--quiet"]) == EXIT_USAGE
    line = _one_line(capsys.readouterr().err)
    assert str(out) in line and reason in line and os.strerror(number) in line


def test_the_file_size_limit_is_one_line_with_exit_2(tmp_path, files, capsys):
    """EFBIG from a real file-size limit (Python ignores SIGXFSZ: the write fails with EFBIG)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1000, hard))
    try:
        code = main(["compose", str(files), "--out", str(tmp_path / "big.safetensors"), "--quiet"])
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert code == EXIT_USAGE
    line = _one_line(capsys.readouterr().err)
    assert "file-size limit" in line and "big.safetensors" in line
    assert sorted(os.listdir(tmp_path)) == ["composed.safetensors", "silo"]  # no temporary left behind


def test_a_log_folder_with_a_foreign_file_is_a_usage_error(tmp_path, capsys):
    logs = tmp_path / "logs"
    (logs / "csv").mkdir(parents=True)
    (logs / "csv" / "training_results.csv").write_text("name,value\nsomething,else\n")
    code = main(["train-component", "--experience", "0", "--out", str(tmp_path / "out"), "--quiet",
                 "--model", NEVER, "--data", DATA, "--logger", "csv", "--log-dir", str(logs)])
    assert code == EXIT_USAGE
    line = _one_line(capsys.readouterr().err)
    assert "--log-dir" in line and "training_results.csv" in line
    assert (logs / "csv" / "training_results.csv").read_text() == "name,value\nsomething,else\n"


def test_an_out_ending_in_a_separator_is_a_folder_not_a_file(tmp_path, files, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for out in ("newdir/", str(tmp_path / "other") + os.sep):
        assert main(["compose", str(files), "--out", out, "--quiet"]) == EXIT_USAGE
        assert "is a directory" in _one_line(capsys.readouterr().err)
    assert sorted(os.listdir(tmp_path)) == ["composed.safetensors", "silo"]


# ------------------------------------------------------------- a missing parent folder (B7)


def test_a_missing_parent_folder_is_refused_not_created(tmp_path, files, capsys):
    out = tmp_path / "nonexistent" / "dir" / "c.safetensors"
    assert main(["compose", str(files), "--out", str(out), "--quiet"]) == EXIT_USAGE
    line = _one_line(capsys.readouterr().err)
    assert "does not exist" in line and "mkdir" in line
    assert main(["forget", str(tmp_path / "composed.safetensors"), str(files / "experience-0.safetensors"),
                 "--out", str(tmp_path / "missing" / "c.safetensors"), "--quiet"]) == EXIT_USAGE
    assert "does not exist" in _one_line(capsys.readouterr().err)
    assert main(["train-component", "--experience", "0", "--out", str(tmp_path / "a" / "b"), "--quiet",
                 "--model", NEVER, "--data", NEVER]) == EXIT_USAGE
    assert "does not exist" in _one_line(capsys.readouterr().err)
    assert sorted(os.listdir(tmp_path)) == ["composed.safetensors", "silo"]


def test_a_refused_train_component_leaves_no_empty_output_folder(tmp_path, capsys):
    out = tmp_path / "new"
    assert main(["train-component", "--experience", "9", "--out", str(out), "--quiet",
                 "--model", NEVER, "--data", DATA]) == EXIT_USAGE
    assert "not in the data's training stream" in _one_line(capsys.readouterr().err)
    assert not out.exists()


# ------------------------------------------------------------- numbers out of range, found while parsing (A3)


@pytest.mark.parametrize("flag, value, allowed", [
    ("--seed", "-1", ">= 0 and <= 2147483647"), ("--seed", "1e25", ">= 0 and <= 2147483647"),
    ("--seed", "10000000000000000000000000", ">= 0 and <= 2147483647"),
    ("--seed", "4294967296", ">= 0 and <= 2147483647"),
    ("--lr", "1e300", "3.4e38"), ("--lr", "1e39", "3.4e38"), ("--beta", "1e300", "3.4e38"),
    ("--projection-dim", "1000000", ">= 1 and <= 16384"), ("--projection-dim", "16385", ">= 1 and <= 16384"),
    ("--timeout", "1e300", "604800 (a week)"),
    ("--batch-size", "100000000000000000000", "<= 65536"),
    ("--eval-batch-size", "100000000000000000000", "<= 65536"),
    ("--epochs", "100000000000000000000", "<= 10000"),
])
def test_numbers_out_of_range_are_refused_while_parsing(tmp_path, capsys, flag, value, allowed):
    """`--seed -1` failed in the seeding (exit 1, traceback), `--lr 1e300` in float32, `--projection-dim
    1000000` in memory: refused by argparse (exit 2) with the range, before any factory runs."""
    with pytest.raises(SystemExit) as exit_info:
        main(["train-component", "--experience", "0", "--out", str(tmp_path / "out"), "--quiet", "--model", NEVER,
              "--data", NEVER, f"{flag}={value}"])
    assert exit_info.value.code == EXIT_USAGE
    err = capsys.readouterr().err
    assert allowed in err and flag in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("flag, value", [("--seed", "2147483647"), ("--seed", "0"), ("--lr", "3e38"),
                                         ("--projection-dim", "16384"), ("--timeout", "604800")])
def test_numbers_at_the_ends_of_their_ranges_are_accepted(tmp_path, capsys, flag, value):
    code = main(["train-component", "--experience", "0", "--out", str(tmp_path / "out"), "--quiet", "--model", NEVER,
                 "--data", NEVER, f"{flag}={value}"])
    assert code == EXIT_FACTORY and "factory was called" in capsys.readouterr().err  # parsed: the factory ran


# ------------------------------------------------------------- usage: one line, a hint, "did you mean" (B10)


@pytest.mark.parametrize("argv, said", [
    (["train-component", "--experience", "0"], "the following arguments are required: --out"),
    (["train-component", "--experience", "0", "--out", "x", "--method", "tmx"], "did you mean 'tmc'?"),
    (["train-component", "--experience", "0", "--out", "x", "--lrr", "0.1"], "--lrr (did you mean --lr?)"),
    (["compose", "a", "--out", "b", "--overwite"], "--overwite (did you mean --overwrite?)"),
    (["evaluat", "x"], "did you mean 'evaluate'?"),
    (["inspect", "x", "--jsn"], "--jsn (did you mean --json?)"),
])
def test_usage_errors_are_one_line_and_a_help_hint(capsys, argv, said):
    """A missing --out printed 17 lines of usage with the error last; a misspelled option got no suggestion."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == EXIT_USAGE
    lines = capsys.readouterr().err.strip().splitlines()  # one line, as every refusal of the command line
    assert len(lines) == 1 and said in lines[0] and lines[0].startswith("avalanche-tmc")
    assert "--help" in lines[0] and not any(line.startswith("usage:") for line in lines)


def _help(capsys, *argv):
    with pytest.raises(SystemExit):
        main([*argv, "--help"])
    return capsys.readouterr().out


def test_the_exit_codes_are_listed_once_and_help_shows_no_empty_defaults(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # argparse wraps at hyphens
    top = _help(capsys)
    assert "4  files that do not combine" in top
    for command in ("train-component", "compose", "forget", "inspect", "evaluate"):
        text = _help(capsys, command)
        assert "4  files that do not combine" not in text and "avalanche-tmc --help' lists them" in text, command
        assert "(default: None)" not in text and "(default: False)" not in text and "(default: [])" not in text
    train = " ".join(_help(capsys, "train-component").split())
    assert "stats-ridge, ranpac, ncm: a training-free head" in train and "(default: 0.01)" in train
    assert "(default: 0)" in train  # a default of 0 is shown


def test_evaluate_evaluates_the_tme_ensemble_of_component_files(tmp_path, capsys):
    """evaluate could not evaluate TME: --method tme evaluates the softmax ensemble of the component files, as
    the library's TMEStrategy built from them does."""
    import json
    import warnings

    from avalanche_tmc import TMEStrategy
    from tests.avalanche_tmc import cli_factories

    factories = ["--model", "tests.avalanche_tmc.cli_factories:model", "--data", DATA, "--option", "tasks=3"]
    assert main(["train-component", "--experience", "0", "1", "--out", str(tmp_path / "silo"), "--quiet",
                 "--epochs", "1", *factories]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(tmp_path / "silo"), "--method", "tme", "--json", "--quiet", *factories]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["method"] == "tme" and report["experiences"] == [0, 1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = TMEStrategy.from_components(str(tmp_path / "silo"),
                                                model=TangentModel(cli_factories.model(tasks=3)))
        results = reference.eval(cli_factories.data(tasks=3).test_stream)
    capsys.readouterr()  # (Avalanche's default logger printed)
    accuracy = next(v for k, v in results.items() if k.startswith("Top1_Acc_Stream/eval_phase/test_stream"))
    assert report["accuracy"] == pytest.approx(accuracy, abs=1e-9)
    assert main(["evaluate", str(tmp_path / "silo"), "--json", "--quiet", *factories]) == 0  # the composition
    assert json.loads(capsys.readouterr().out)["method"] == "tmc"
    assert main(["compose", str(tmp_path / "silo"), "--out", str(tmp_path / "c.safetensors"), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(tmp_path / "c.safetensors"), "--method", "tme", "--quiet", *factories]) == EXIT_USAGE
    assert "holds only their sum: give the component files" in _one_line(capsys.readouterr().err)
