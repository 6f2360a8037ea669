"""Issue 42, "every failure says what to do": the runner's and the report's failures that
ended in a traceback get one line and exit code 2, found before anything is written."""

import re

import pytest


@pytest.mark.parametrize("argv, message", [
    (["--seed", "-1"], "--seed: must be at least 0"),
    (["--seed", "1e25"], "--seed: expected a non-negative integer"),
    (["--seed", "10000000000000000000000000"], r"--seed: must be in 0\.\.4294967295"),
    (["--data-seed", "4294967296"], r"--data-seed: must be in 0\.\.4294967295"),
    (["--seeds", "99999999999"], r"--seeds: a seed count must be in 1\.\.1000"),
    (["--seeds", "0,4294967296"], r"--seeds: seeds must be distinct integers in 0\.\.4294967295"),
    (["--image-size", "1000000"], r"--image-size: must be in 1\.\.4096"),
])
def test_numbers_out_of_range_are_refused_while_parsing(argv, message, capsys):
    from benchmarks import run

    with pytest.raises(SystemExit) as exit_info:
        run.parse_args(argv)
    assert exit_info.value.code == 2
    assert re.search(message, capsys.readouterr().err)
