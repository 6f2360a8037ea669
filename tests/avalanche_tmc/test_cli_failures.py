"""Issue 42, "every failure says what to do": failures that ended in "unexpected error, please
report it" (a traceback, exit 1) get one line and their documented exit code."""

import pytest

from avalanche_tmc.cli import EXIT_FACTORY, main

NEVER = "tests.avalanche_tmc.test_cli_refusals:never"


# ------------------------------------------------------------- a factory module that fails to import


@pytest.mark.parametrize("source", [
    "def model(:\n",  # SyntaxError
    "raise RuntimeError('broken at import')\n",
    "import sys\nsys.exit(3)\n",
    "x = 1 / 0\n",
    "raise KeyError('k')\n",
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
