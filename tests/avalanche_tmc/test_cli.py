"""The ``avalanche-tmc`` command line, end to end in subprocesses on a tiny model (the
federated story: two silos, a composer, a forgotten silo component; and the same training
under torchrun), then every documented exit code."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

from avalanche_tmc import TangentModel
from avalanche_tmc.cli import (
    EXIT_BAD_FILE,
    EXIT_FACTORY,
    EXIT_INCOMPATIBLE,
    EXIT_OK,
    EXIT_TRAINING,
    EXIT_USAGE,
    FactoryError,
    load_factory,
    main,
)
from avalanche_tmc.files import compose_components, composed_delta, load_component
from tests.avalanche_tmc import cli_factories

ROOT = Path(__file__).resolve().parents[2]
FACTORIES = ["--model", "tests.avalanche_tmc.cli_factories:model", "--data", "tests.avalanche_tmc.cli_factories:data",
             "--option", "tasks=3"]
TRAIN = ["--epochs", "2", "--lr", "1e-2", "--batch-size", "16", "--quiet", *FACTORIES]


def _cli(*args, launcher=None, timeout=240, cwd=ROOT):
    # the test factories are found through PYTHONPATH: the command line never imports from
    # its working directory
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", PYTHONWARNINGS="ignore", PYTHONPATH=str(ROOT))
    command = launcher or [sys.executable, "-m", "avalanche_tmc"]
    done = subprocess.run([*command, *map(str, args)], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    return done


def _ok(done):
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    return done.stdout


def _accuracy(delta, bm) -> float:
    model = TangentModel(cli_factories.model(tasks=3))
    right = total = 0
    with torch.no_grad():
        for exp in bm.test_stream:
            for x, y, *_ in DataLoader(exp.dataset, batch_size=256):
                right += int((model.forward_with(x, delta).argmax(1) == y).sum())
                total += len(y)
    return right / total


SILOS = (("train-component", "--experience", "0", "--out", "silo_a", *TRAIN),
         ("train-component", "--experience", "1", "2", "--out", "silo_b", *TRAIN),
         ("compose", "silo_a", "silo_b", "--out", "composed.safetensors"))
"""Silo A trains experience 0, silo B experiences 1 and 2, a composer composes them (paths
relative to the silos' folder)."""


def _in(root: Path, args) -> list:
    return [str(root / a) if a.startswith(("silo_", "composed")) else a for a in args]


@pytest.fixture(scope="module")
def silos(tmp_path_factory):
    """:data:`SILOS` run as a user runs them, each command in its own process."""
    root = tmp_path_factory.mktemp("federated")
    train_a, train_b, compose = (_in(root, args) for args in SILOS)
    assert "wrote" in _ok(_cli(*train_a))
    _ok(_cli(*train_b))
    assert "experiences [0, 1, 2]" in _ok(_cli(*compose))
    return root


@pytest.fixture(scope="module")
def silos_here(tmp_path_factory):
    """:data:`SILOS` through the command line's ``main`` in this process (the exit-code test
    needs the files, not the processes)."""
    root = tmp_path_factory.mktemp("federated_here")
    assert all(main(_in(root, args)) == EXIT_OK for args in SILOS)
    return root


@pytest.mark.integration
def test_two_silos_compose_and_the_composition_is_evaluated(silos):
    files = [load_component(str(silos / d / f"experience-{e}.safetensors"))
             for d, e in (("silo_a", 0), ("silo_b", 1), ("silo_b", 2))]
    composition = load_component(str(silos / "composed.safetensors"))
    expected = compose_components(files)
    assert composition.experiences == [0, 1, 2]
    assert all(torch.equal(composition.tensors[n], expected.tensors[n]) for n in expected.tensors)
    report = json.loads(_ok(_cli("evaluate", silos / "composed.safetensors", "--json", "--quiet", *FACTORIES)))
    bm = cli_factories.data(tasks=3)
    assert report["samples"] == sum(len(e.dataset) for e in bm.test_stream)
    assert report["accuracy"] == pytest.approx(_accuracy(composed_delta(composition), bm), abs=1e-9)
    assert report["accuracy"] > 0.5  # the 10 digits in 3 experiences: far above chance (0.1)
    # a silo's file is the same computation wherever it runs (seed + experience id)
    from avalanche_tmc import TMCStrategy
    from avalanche_tmc.distributed import train_parallel

    here = TMCStrategy(model=TangentModel(cli_factories.model(tasks=3)), lr=1e-2, train_mb_size=16, train_epochs=2,
                       evaluator=None)
    train_parallel(here, bm.train_stream[:1], seed=0)
    for name, value in here.components[0].items():
        assert torch.allclose(files[0].tensors[name], value, rtol=1e-4, atol=1e-6)


@pytest.mark.integration
def test_forgetting_one_silo_component_equals_composing_the_rest(silos):
    out = _ok(_cli("forget", silos / "composed.safetensors", silos / "silo_b" / "experience-2.safetensors",
                   "--out", silos / "rest.safetensors"))
    assert "experiences [0, 1]" in out
    rest = load_component(str(silos / "rest.safetensors"))
    expected = compose_components([load_component(str(silos / "silo_a" / "experience-0.safetensors")),
                                   load_component(str(silos / "silo_b" / "experience-1.safetensors"))])
    assert rest.experiences == [0, 1] and rest.weight == expected.weight
    for name, value in expected.tensors.items():
        assert torch.allclose(rest.tensors[name], value, rtol=1e-5, atol=1e-7)
    # the installed console script reads it
    script = Path(sys.executable).with_name("avalanche-tmc")
    info = json.loads(_ok(_cli("inspect", silos / "rest.safetensors", "--json", launcher=[str(script)])))
    assert info[0]["kind"] == "composition" and info[0]["experiences"] == [0, 1]
    assert info[0]["base"]["head_size"] == 10
    assert info[0]["classes"] == {str(task): classes for task, classes in rest.classes.items()}


@pytest.mark.integration
def test_train_component_under_torchrun_shares_the_experiences(silos, tmp_path):
    start = time.time()
    done = _cli("train-component", "--experience", "all", "--out", tmp_path, *TRAIN,
                launcher=[sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m",
                          "avalanche_tmc"])
    out = _ok(done)
    assert "(rank 0)" in out and "(rank 1)" in out and time.time() - start < 200
    # only rank 0 prints: every file once (both ranks' files), the assignment once
    assert sorted(line.split()[1] for line in out.splitlines() if line.startswith("wrote ")) == [
        str(tmp_path / f"experience-{e}.safetensors") for e in range(3)]
    assert out.count("experiences on 2 processes") == 1
    for directory, exp in (("silo_a", 0), ("silo_b", 1), ("silo_b", 2)):
        parallel = load_component(str(tmp_path / f"experience-{exp}.safetensors"))
        alone = load_component(str(silos / directory / f"experience-{exp}.safetensors"))
        assert parallel.base == alone.base and parallel.members[0]["classes"] == alone.members[0]["classes"]
        for name, value in alone.tensors.items():  # same data and seed; 1 vs 2 threads
            assert torch.allclose(parallel.tensors[name], value, rtol=1e-4, atol=1e-6)


def test_help_describes_the_commands_and_exit_codes(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for word in ("train-component", "compose", "forget", "inspect", "evaluate", "exit codes", "4  files that do not"):
        assert word in text
    with pytest.raises(SystemExit) as exit_info:
        main(["train-component", "--help"])
    assert "--experience" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:
        main(["compose"])  # a missing argument: argparse's usage error
    assert exit_info.value.code == EXIT_USAGE


def test_exit_codes(silos_here, tmp_path, capsys):
    silos = silos_here
    composed = str(silos / "composed.safetensors")
    assert main(["inspect", composed]) == EXIT_OK
    # 2: an experience the data does not have; 4: an output that exists (as when another writer won)
    assert main(["train-component", "--experience", "7", "--out", str(tmp_path), *TRAIN]) == EXIT_USAGE
    assert "not in the data's training stream" in capsys.readouterr().err
    assert main(["compose", str(silos / "silo_a"), "--out", composed]) == EXIT_INCOMPATIBLE
    # 3: a truncated file
    truncated = tmp_path / "truncated.safetensors"
    truncated.write_bytes(Path(composed).read_bytes()[:100])
    assert main(["inspect", str(truncated)]) == EXIT_BAD_FILE
    assert "truncated" in capsys.readouterr().err
    # 4: a component of another base model, a file forgotten that is not in the composition
    assert main(["train-component", "--experience", "2", "--out", str(tmp_path / "wide"), *TRAIN, "--option",
                 "width=8"]) == EXIT_OK
    assert main(["compose", str(silos / "silo_a"), str(tmp_path / "wide"), "--out",
                 str(tmp_path / "x.safetensors")]) == EXIT_INCOMPATIBLE
    assert "linearized parameters differ" in capsys.readouterr().err
    assert main(["forget", composed, str(tmp_path / "wide" / "experience-2.safetensors"), "--out",
                 str(tmp_path / "y.safetensors")]) == EXIT_INCOMPATIBLE
    assert main(["evaluate", composed, "--quiet", *FACTORIES, "--option", "width=8"]) == EXIT_INCOMPATIBLE
    # without --model: the default digits CNN is not the network the files were trained on (was: exit 1,
    # "No parameter is linearized", from linearizing the file's names on it)
    capsys.readouterr()
    for method in ("tmc", "tme"):
        assert main(["evaluate", *map(str, (silos / "silo_a").glob("*.safetensors")), "--method", method, "--quiet",
                     *FACTORIES[2:4]]) == EXIT_INCOMPATIBLE
        refused = capsys.readouterr().err
        assert "was trained on a torch.nn.modules.container.Sequential network; the network of" in refused
    # 5: a factory that cannot be imported or rejects an option
    assert main(["evaluate", composed, "--model", "no_such_module:model", *FACTORIES[2:]]) == EXIT_FACTORY
    assert "Cannot import 'no_such_module'" in capsys.readouterr().err
    assert main(["evaluate", composed, *FACTORIES, "--option", "colour=1"]) == EXIT_FACTORY
    # 6: training diverges
    assert main(["train-component", "--experience", "0", "--out", str(tmp_path / "diverged"), *TRAIN,
                 "--lr", "1e30"]) == EXIT_TRAINING
    assert "diverged" in capsys.readouterr().err
    assert not (tmp_path / "diverged" / "experience-0.safetensors").exists()


# third-party packages the command imports after it starts (a file shadowing the standard
# library, or anything the interpreter imports before the command runs, is Python's own
# `python -m` behaviour: `python -P` or the console script avoid it)
PLANTED = ("sklearn", "safetensors", "tqdm", "pandas", "joblib", "threadpoolctl", "cloudpickle", "avalanche",
           "torchvision", "timm")


@pytest.mark.integration
@pytest.mark.parametrize("launcher", ["console script", "python -m avalanche_tmc", "python -m avalanche_tmc.cli"])
def test_modules_planted_in_the_working_directory_never_run(silos, tmp_path, launcher):
    """A folder holding files named like the packages the command imports: evaluating a
    component there (factories from an installed module and from a file named by path)
    runs none of them (issue 30, case 1)."""
    for name in PLANTED:
        (tmp_path / f"{name}.py").write_text(f"open({str(tmp_path / 'RAN')!r}, 'a').write('{name} ')\n"
                                             "raise SystemExit('planted module ran')\n")
    (tmp_path / "my_factories.py").write_text((ROOT / "tests/avalanche_tmc/cli_factories.py").read_text())
    command = {"console script": [str(Path(sys.executable).with_name("avalanche-tmc"))],
               "python -m avalanche_tmc": [sys.executable, "-m", "avalanche_tmc"],
               "python -m avalanche_tmc.cli": [sys.executable, "-m", "avalanche_tmc.cli"]}[launcher]
    for factories in (FACTORIES, ["--model", "./my_factories.py:model", "--data", "./my_factories.py:data",
                                  "--option", "tasks=3"]):
        report = json.loads(_ok(_cli("evaluate", silos / "composed.safetensors", "--json", "--quiet", *factories,
                                     launcher=command, cwd=tmp_path)))
        assert report["samples"] == sum(len(e.dataset) for e in cli_factories.data(tasks=3).test_stream)
    assert not (tmp_path / "RAN").exists(), (tmp_path / "RAN").read_text()


def test_a_factory_module_in_the_working_directory_is_named_by_its_path(tmp_path, monkeypatch):
    (tmp_path / "my_factories.py").write_text("def model():\n    return 'from the file'\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    with pytest.raises(FactoryError, match=r"does not import from the working directory.*\./my_factories\.py:model"):
        load_factory("my_factories:model")
    assert load_factory("./my_factories.py:model")() == "from the file"
    assert load_factory(f"{tmp_path / 'my_factories.py'}:model")() == "from the file"
    with pytest.raises(FactoryError, match="No factory file"):
        load_factory("./missing.py:model")
    with pytest.raises(FactoryError, match="has no function 'data'"):
        load_factory("./my_factories.py:data")
    (tmp_path / "broken.py").write_text("raise RuntimeError('broken on import')\n")
    with pytest.raises(FactoryError, match="broken on import"):
        load_factory("./broken.py:model")
