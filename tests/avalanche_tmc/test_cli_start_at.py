"""``train-component --start-at MODULE`` (issue 52, item 8): the component file holds δ of
that module's parameters and all after it, as the library's ``start_at`` selects them; a
wrong name lists the valid ones, and the option is refused where it does not apply."""

import contextlib

import pytest
import torch

from avalanche_tmc import TangentModel
from avalanche_tmc.cli import EXIT_OK, EXIT_USAGE, main
from avalanche_tmc.files import load_component
from tests.avalanche_tmc import cli_factories
from tests.avalanche_tmc.test_cli import TRAIN


def test_start_at_linearizes_that_module_and_those_after_it(tmp_path):
    assert main(["train-component", "--experience", "0", "--out", str(tmp_path / "a"), "--start-at", "2",
                 *TRAIN]) == EXIT_OK
    component = load_component(str(tmp_path / "a" / "experience-0.safetensors"))
    names = [n for n, _ in cli_factories.model(tasks=3).named_parameters()]
    assert names == ["1.weight", "1.bias", "2.weight", "2.bias", "4.weight", "4.bias"]
    assert sorted(component.tensors) == sorted(names[2:])  # the BatchNorm (module 2) and the head, not module 1
    assert tuple(TangentModel(cli_factories.model(tasks=3), start_at="2").linearized_names) == tuple(names[2:])
    assert all(torch.isfinite(t).all() for t in component.tensors.values())


def test_a_wrong_module_lists_the_valid_ones(tmp_path, capsys):
    code = main(["train-component", "--experience", "0", "--out", str(tmp_path / "b"), "--start-at", "layer9",
                 *TRAIN])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE and "--start-at 'layer9' names no module" in err and "valid names: 1, 2, 4." in err
    assert not (tmp_path / "b" / "experience-0.safetensors").exists()


@pytest.mark.parametrize("argv, message", [
    (["--method", "tmc-fc", "--start-at", "2"], "applies to --method tmc"),
    (["--start-at", "2..x"], "dotted words"),
])
def test_start_at_is_refused_where_it_does_not_apply(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) if "dotted" in message else contextlib.nullcontext():  # argparse exits itself
        code = main(["train-component", "--experience", "0", "--out", str(tmp_path / "c"), *argv, *TRAIN])
        assert code == EXIT_USAGE
    assert message in capsys.readouterr().err


def test_the_library_lists_the_valid_names_too():
    with pytest.raises(ValueError, match=r"start_at='layer9' names no parameter of the model; valid names: 1, 2, 4\."):
        TangentModel(cli_factories.model(tasks=3), start_at="layer9")

