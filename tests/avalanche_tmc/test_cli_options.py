"""The command line's options from issue 19: separate model and data options, the installed
default factories, ``--logger`` (text, CSV, TensorBoard, WandB offline; a clear message when
a logger's package is missing), and a ``--help`` that imports neither torch nor Avalanche."""

import csv
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from avalanche_tmc.cli import DEFAULT_DATA, DEFAULT_MODEL, EXIT_FACTORY, EXIT_OK, EXIT_USAGE, main
from avalanche_tmc.files import load_component

ROOT = Path(__file__).resolve().parents[2]
QUICK = ["--epochs", "1", "--quiet"]


@pytest.mark.integration
def test_help_imports_neither_torch_nor_avalanche(tmp_path):
    code = ("import sys, contextlib, io\nfrom avalanche_tmc.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
            "    try:\n        main(['train-component', '--help'])\n    except SystemExit:\n        pass\n"
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'avalanche', 'numpy'))\n"
            "print(len(out.getvalue()), heavy[:5])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 0, done.stderr
    size, heavy = done.stdout.split(" ", 1)
    assert int(size) > 1000 and heavy.strip() == "[]", done.stdout
    assert done.stderr == ""  # no warning either


def test_model_and_data_options_go_to_their_own_factory(tmp_path, capsys):
    assert (DEFAULT_MODEL, DEFAULT_DATA) == ("avalanche_tmc.factories:digits_cnn", "avalanche_tmc.factories:digits")
    # n_experiences is the data factory's only: as --data-option it works ...
    assert main(["train-component", "--experience", "1", "--out", str(tmp_path), *QUICK,
                 "--data-option", "n_experiences=2", "--model-option", "head_seed=3"]) == EXIT_OK
    component = load_component(str(tmp_path / "experience-1.safetensors"))
    assert len(component.classes[0]) == 5  # two experiences of five digits
    # ... as --option (both factories) the model factory refuses it, and the message says so
    assert main(["train-component", "--experience", "0", "--out", str(tmp_path / "both"), *QUICK,
                 "--option", "n_experiences=2"]) == EXIT_FACTORY
    assert "unexpected keyword argument 'n_experiences'" in capsys.readouterr().err
    assert main(["train-component", "--experience", "0", "--out", str(tmp_path), *QUICK,
                 "--model-option", "no-equals"]) == EXIT_USAGE
    assert "--model-option takes KEY=VALUE" in capsys.readouterr().err


def test_loggers_write_text_csv_and_tensorboard(tmp_path, capsys):
    logs = tmp_path / "logs"
    assert main(["train-component", "--experience", "0", "--out", str(tmp_path / "out"), *QUICK, "--method", "tmc",
                 "--logger", "text", "--logger", "csv", "--logger", "tensorboard", "--log-dir", str(logs)]) == EXIT_OK
    out = capsys.readouterr().out
    assert "Top1_Acc_Epoch/train_phase/train_stream" in out and "RSL_Loss_Epoch/train_phase" in out
    with open(logs / "csv" / "training_results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 1 and 0 <= float(rows[0]["training_accuracy"]) <= 1 and float(rows[0]["training_loss"]) > 0
    assert list((logs / "tensorboard").glob("events.out.tfevents.*"))
    # a second call into the same directory appends: the first call's row stays
    assert main(["train-component", "--experience", "1", "--out", str(tmp_path / "out"), *QUICK, "--method", "tmc",
                 "--logger", "csv", "--log-dir", str(logs)]) == EXIT_OK
    with open(logs / "csv" / "training_results.csv", newline="") as f:
        again = list(csv.DictReader(f))
    assert again[:1] == rows and len(again) == 2
    # the training-free heads log their (cross-entropy) loss under its name too
    assert main(["train-component", "--experience", "0", "--out", str(tmp_path / "ridge"), *QUICK, "--method",
                 "stats-ridge", "--logger", "text"]) == EXIT_OK
    assert "CE_Loss_Epoch/train_phase" in capsys.readouterr().out


@pytest.mark.integration
@pytest.mark.skipif(importlib.util.find_spec("wandb") is None, reason="wandb is not installed")
def test_wandb_logs_offline(tmp_path):
    env = dict(os.environ, WANDB_SILENT="true", PYTHONPATH=str(ROOT))
    env.pop("WANDB_MODE", None)
    done = subprocess.run([sys.executable, "-m", "avalanche_tmc.cli", "train-component", "--experience", "0",
                           "--out", "out", *QUICK, "--logger", "wandb", "--log-dir", "logs"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = (tmp_path / "logs" / "wandb").glob("offline-run-*/run-*.wandb")  # offline: nothing sent
    assert b"Top1_Acc_Epoch" in run.read_bytes()


def test_a_missing_logger_package_is_named_with_its_install_command(tmp_path, capsys, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    assert main(["train-component", "--experience", "0", "--out", str(tmp_path), *QUICK, "--logger", "wandb"]) \
        == EXIT_USAGE
    assert "--logger wandb needs the wandb package, which is not installed: pip install wandb" in \
        capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # refused before training


def test_evaluate_logs_with_the_same_options(tmp_path, capsys):
    assert main(["train-component", "--experience", "0", "--out", str(tmp_path), *QUICK]) == EXIT_OK
    capsys.readouterr()
    assert main(["evaluate", str(tmp_path / "experience-0.safetensors"), "--json", "--quiet", "--logger", "csv",
                 "--log-dir", str(tmp_path / "logs")]) == EXIT_OK
    report = json.loads(capsys.readouterr().out)
    assert report["per_experience"][0]["accuracy"] > 0.8  # the two digits of experience 0
    assert (tmp_path / "logs" / "csv" / "eval_results.csv").is_file()
