"""The command line honours every documented exit code (issue 21): bad values are usage
errors (2) naming the allowed range, outputs are checked before any training, crafted
files are unusable files (3), a concurrent writer loses with 4, set-up errors of a
parallel run are 6, a closed output pipe ends quietly, and --key-file signs and checks."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save

import avalanche_tmc.files as cf
from avalanche_tmc.cli import (
    EXIT_BAD_FILE,
    EXIT_FACTORY,
    EXIT_INCOMPATIBLE,
    EXIT_OK,
    EXIT_PIPE,
    EXIT_TRAINING,
    EXIT_USAGE,
    main,
)
from avalanche_tmc.cli import compose as compose_command
from avalanche_tmc.files.signing import metadata_sha256
from tests.helpers import two_silo_components

ROOT = Path(__file__).resolve().parents[2]
NEVER = ["--model", "tests.avalanche_tmc.test_cli_refusals:never", "--data",
         "tests.avalanche_tmc.test_cli_refusals:never"]
KEY = b"0123456789abcdef-federation-key"


def never(**options):
    """A factory that must not be reached: the command line had to refuse before."""
    raise AssertionError("the factory was called: the refusal came too late")


@pytest.fixture()
def files(tmp_path):
    directory = tmp_path / "silo"
    two_silo_components(directory)
    return directory


def _train(*extra, out):
    return main(["train-component", "--experience", "0", "--out", str(out), "--quiet", *NEVER, *extra])


@pytest.mark.parametrize("flag, value, allowed", [
    ("--lr", "nan", "positive finite"), ("--lr", "-1", "positive finite"), ("--batch-size", "0", "integer >= 1"),
    ("--beta", "0", "positive finite"), ("--beta", "inf", "positive finite"), ("--timeout", "0", "positive finite"),
    ("--eval-batch-size", "0", "integer >= 1"), ("--projection-dim", "0", "integer >= 1"),
    ("--epochs", "0", "integer >= 1"), ("--epochs", "-1", "integer >= 1"), ("--device", "tpu9", "cpu, cuda"),
    ("--experience", "true", "integer >= 0 or 'all'"), ("--experience", "1.0", "integer >= 0 or 'all'"),
])
def test_bad_values_are_usage_errors_naming_what_is_allowed(tmp_path, capsys, flag, value, allowed):
    """Issue 21: every bad value exited 1 with a traceback ("a bug") instead of 2."""
    with pytest.raises(SystemExit) as exit_info:
        _train(flag, value, out=tmp_path)
    assert exit_info.value.code == EXIT_USAGE
    err = capsys.readouterr().err
    assert allowed in err and flag in err and "Traceback" not in err


@pytest.mark.parametrize("flag, value, allowed", [
    ("--epochs", "10001", "<= 10000"), ("--batch-size", "65537", "<= 65536"),
    ("--eval-batch-size", "100000000", "<= 65536"), ("--projection-dim", "16385", "<= 16384"),
    ("--seed", "2147483648", "<= 2147483647"), ("--seed", "-1", ">= 0"), ("--seed", "1" + "0" * 40, "<= 2147483647"),
    ("--timeout", "1e300", "a week"), ("--experience", "1000", "at most 999"),
])
def test_counts_beyond_their_documented_bound_are_usage_errors(tmp_path, capsys, flag, value, allowed):
    """Issue 42, class 4: every count-like option has an upper bound (docs/reliability.md), refused
    in one line with exit 2 before anything is built."""
    with pytest.raises(SystemExit) as exit_info:
        _train(flag, value, out=tmp_path)
    assert exit_info.value.code == EXIT_USAGE
    err = capsys.readouterr().err
    assert allowed in err and flag in err and "Traceback" not in err
    assert err.count("\n") == 1 and err.startswith("avalanche-tmc train-component: error: ")


def test_the_bounds_of_the_command_line_are_the_librarys():
    from avalanche_tmc.cli import argtypes
    from avalanche_tmc.training.seeding import EXPERIENCES_PER_SEED

    assert argtypes.MAX_EXPERIENCE_ID == EXPERIENCES_PER_SEED - 1
    assert argtypes.EPOCHS("10000") == 10000 and argtypes.SEED("2147483647") == 2**31 - 1


def test_repeated_experiences_and_missing_devices_are_usage_errors(tmp_path, capsys):
    assert main(["train-component", "--experience", "1", "1", "--out", str(tmp_path), *NEVER]) == EXIT_USAGE
    assert "more than once" in capsys.readouterr().err
    assert main(["train-component", "--experience", "all", "1", "--out", str(tmp_path), *NEVER]) == EXIT_USAGE
    if not torch.cuda.is_available():
        assert _train("--device", "cuda:3", out=tmp_path) == EXIT_USAGE
        assert "no cuda device on this machine" in capsys.readouterr().err


def test_unusable_outputs_are_refused_before_training(tmp_path, files, capsys):
    """Issue 21: an unusable --out (a directory, under /proc, a file for train-component) was found after training."""
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    assert _train(out=a_file) == EXIT_USAGE
    assert "is a file" in capsys.readouterr().err
    assert _train(out="/proc/avalanche-tmc-out") == EXIT_USAGE
    assert "cannot be written" in capsys.readouterr().err
    assert main(["compose", str(files), "--out", str(tmp_path)]) == EXIT_USAGE
    assert "is a directory" in capsys.readouterr().err
    assert main(["compose", str(files), "--out", "/proc/composed.safetensors"]) == EXIT_USAGE
    assert main(["forget", str(files / "experience-0.safetensors"), str(files / "experience-0.safetensors"),
                 "--out", str(tmp_path)]) == EXIT_USAGE


def test_an_output_created_meanwhile_is_not_overwritten(tmp_path, files, monkeypatch, capsys):
    """Issue 21: two `compose` without --overwrite both exited 0; the check ran before the write.
    Here the other writer wins in the window between the check and the write."""
    out = tmp_path / "composed.safetensors"
    out.write_bytes(b"the other writer's file")
    # the check passed before it appeared
    monkeypatch.setattr(compose_command, "check_output", lambda path, overwrite: None)
    assert main(["compose", str(files), "--out", str(out)]) == EXIT_INCOMPATIBLE
    assert "exists" in capsys.readouterr().err and out.read_bytes() == b"the other writer's file"
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]


def test_crafted_files_are_unusable_files(tmp_path, files, capsys):
    """Issue 21: crafted files exited 1 instead of 3."""
    data = (files / "experience-1.safetensors").read_bytes()
    length = int.from_bytes(data[:8], "little")
    metadata = json.loads(data[8:8 + length])["__metadata__"]
    from safetensors.torch import load

    tensors = load(data)
    members = json.loads(metadata["members"])
    members[0]["experience"] = 1.0
    metadata["members"] = json.dumps(members)
    metadata["file_sha256"] = metadata_sha256(metadata)
    (tmp_path / "float-id.safetensors").write_bytes(save(tensors, metadata=metadata))
    (tmp_path / "nested.safetensors").write_bytes(len(b"[" * 100000 + b"]" * 100000).to_bytes(8, "little")
                                                  + b"[" * 100000 + b"]" * 100000)
    os.mkfifo(tmp_path / "fifo.safetensors")
    for name in ("float-id", "nested", "fifo"):
        assert main(["inspect", str(tmp_path / f"{name}.safetensors")]) == EXIT_BAD_FILE, name
        assert "Traceback" not in capsys.readouterr().err


def test_key_file_signs_and_checks(tmp_path, files, capsys):
    key = tmp_path / "federation.key"
    key.write_bytes(KEY)
    signed = tmp_path / "signed.safetensors"
    assert main(["compose", str(files), "--out", str(signed), "--key-file", str(key)]) == EXIT_BAD_FILE
    assert "not signed" in capsys.readouterr().err  # a composer holding the key refuses unsigned silo files
    for path in files.iterdir():  # the silos sign what they write
        cf.save_component(cf.load_component(str(path)), str(path), key=KEY)
    assert main(["compose", str(files), "--out", str(signed), "--key-file", str(key)]) == EXIT_OK
    capsys.readouterr()
    assert main(["inspect", str(signed), "--key-file", str(key), "--json"]) == EXIT_OK
    assert json.loads(capsys.readouterr().out)[0]["signed"] is True
    cf.save_component(cf.load_component(str(signed)), str(tmp_path / "unsigned.safetensors"), key=None)
    assert main(["inspect", str(tmp_path / "unsigned.safetensors"), "--key-file", str(key)]) == EXIT_BAD_FILE
    assert "not signed" in capsys.readouterr().err
    key.write_bytes(b"short")
    assert main(["inspect", str(signed), "--key-file", str(key)]) == EXIT_BAD_FILE
    assert "at least 16" in capsys.readouterr().err


@pytest.mark.integration
def test_world_size_without_torchrun_is_a_setup_failure(tmp_path, monkeypatch, capsys):
    """Issue 21: WORLD_SIZE without torchrun exited 1, not 6."""
    for name in ("RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert _train(out=tmp_path) == EXIT_TRAINING
    assert "torchrun" in capsys.readouterr().err


@pytest.mark.integration
def test_a_closed_output_pipe_ends_quietly(files):
    """Issue 21: `inspect DIR | head -1` crashed on BrokenPipe."""
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    env.pop("PYTHONUNBUFFERED", None)  # block-buffered: the write happens when stdout is flushed
    process = subprocess.Popen([sys.executable, "-m", "avalanche_tmc.cli", "inspect", str(files)], cwd=ROOT, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()  # the reader is gone before anything is printed
    err = process.stderr.read().decode()
    assert process.wait(timeout=120) == EXIT_PIPE
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_a_statistics_composition_evaluates_as_the_strategy_built_from_its_files(tmp_path, capsys):
    """evaluate installs any composition through the learner protocol (no strategy-type branches)."""
    from avalanche_tmc import TrainingFreeStrategy
    from avalanche_tmc.models.training_free import TrainingFreeClassifier, penultimate
    from tests.avalanche_tmc import cli_factories

    factories = ["--model", "tests.avalanche_tmc.cli_factories:model", "--data",
                 "tests.avalanche_tmc.cli_factories:data", "--option", "tasks=3", "--quiet"]
    assert main(["train-component", "--experience", "0", "1", "--method", "stats-ridge", "--out", str(tmp_path),
                 *factories]) == EXIT_OK
    composed = str(tmp_path / "composed.safetensors")
    assert main(["compose", str(tmp_path), "--out", composed]) == EXIT_OK
    capsys.readouterr()
    assert main(["evaluate", composed, "--json", *factories]) == EXIT_OK
    report = json.loads(capsys.readouterr().out)
    net = cli_factories.model(tasks=3)
    strategy = TrainingFreeStrategy(model=TrainingFreeClassifier(penultimate(net), 10), evaluator=None)
    strategy.load_components(str(tmp_path / "experience-0.safetensors"))
    strategy.load_components(str(tmp_path / "experience-1.safetensors"))
    bm = cli_factories.data(tasks=3)
    right = total = 0
    with torch.no_grad():
        for exp in bm.test_stream:
            for x, y, *_ in torch.utils.data.DataLoader(exp.dataset, batch_size=256):
                right += int((strategy.model(x).argmax(1) == y).sum())
                total += len(y)
    assert report["experiences"] == [0, 1] and report["accuracy"] == pytest.approx(right / total, abs=1e-9)


@pytest.mark.integration
def test_two_concurrent_composes_one_wins_the_other_exits_4(tmp_path, files):
    """Issue 21: two `compose` processes writing the same --out without --overwrite both exited 0 (10 of 10)."""
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    for attempt in range(3):
        out = tmp_path / f"composed-{attempt}.safetensors"
        command = [sys.executable, "-m", "avalanche_tmc.cli", "compose", str(files), "--out", str(out)]
        processes = [subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                     for _ in range(2)]
        codes = sorted(p.wait(timeout=120) for p in processes)
        assert codes == [EXIT_OK, EXIT_INCOMPATIBLE], (attempt, [p.stderr.read()[-500:] for p in processes])
        assert cf.load_component(str(out)).experiences == [0, 1]
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]


def test_compose_refuses_silos_of_different_weightings_unless_asked(tmp_path, files, capsys):
    """Issue 30, case 7: `compose` of a --weighting samples silo with a mean one exited 0 with weights [16, 1]."""
    path = files / "experience-0.safetensors"
    component = cf.load_component(str(path))
    component.weight = component.members[0]["weight"] = 16.0
    component.settings = dict(weighting="samples")
    cf.save_component(component, str(path))
    one = cf.load_component(str(files / "experience-1.safetensors"))
    one.settings = dict(weighting="mean")
    cf.save_component(one, str(files / "experience-1.safetensors"))
    out = tmp_path / "composed.safetensors"
    assert main(["compose", str(files), "--out", str(out)]) == EXIT_INCOMPATIBLE
    assert "--mixed-weighting" in capsys.readouterr().err and not out.exists()
    assert main(["compose", str(files), "--out", str(out), "--mixed-weighting"]) == EXIT_OK
    assert cf.load_component(str(out)).settings == dict(weighting="mixed")


def test_inspect_without_a_key_says_a_signature_is_not_verified(tmp_path, files, capsys):
    """Issue 30, case 8: `inspect --json` without a key printed "signed": true for a never-verified (all-zero)
    signature."""
    data = (files / "experience-0.safetensors").read_bytes()
    length = int.from_bytes(data[:8], "little")
    metadata = json.loads(data[8:8 + length])["__metadata__"]
    from safetensors.torch import load

    metadata["hmac_sha256"] = "0" * 64  # a signature nobody checked: the hash does not cover it
    forged = tmp_path / "forged.safetensors"
    forged.write_bytes(save(load(data), metadata=metadata))
    key = tmp_path / "federation.key"
    key.write_bytes(KEY)
    key.chmod(0o600)
    signed = cf.save_component(cf.load_component(str(files / "experience-1.safetensors")),
                               str(tmp_path / "signed.safetensors"), key=KEY)
    assert main(["inspect", str(forged), signed, str(files / "experience-0.safetensors"), "--json"]) == EXIT_OK
    shown = [(i["signed"], i["signature"]) for i in json.loads(capsys.readouterr().out)]
    assert shown == [(False, "present, not verified"), (False, "present, not verified"), (False, "absent")]
    assert main(["inspect", str(forged)]) == EXIT_OK
    assert "signature: present, not verified" in capsys.readouterr().out
    assert main(["inspect", signed, "--json", "--key-file", str(key)]) == EXIT_OK
    assert [(i["signed"], i["signature"]) for i in json.loads(capsys.readouterr().out)] == [(True, "verified")]
    assert main(["inspect", str(forged), "--key-file", str(key)]) == EXIT_BAD_FILE


def test_file_names_with_escape_sequences_are_printed_escaped(tmp_path, files, capsys):
    """Issue 30, case 9: a refused file whose name holds terminal escape sequences was echoed raw."""
    evil = tmp_path / "evil\x1b]0;owned\x07\x1b[2J.safetensors"
    evil.write_bytes(b"\x00" * 16)
    assert main(["inspect", str(evil)]) == EXIT_BAD_FILE
    out = tmp_path / "out\x1b[31m.safetensors"
    out.write_bytes(b"x")
    assert main(["compose", str(files), "--out", str(out)]) == EXIT_INCOMPATIBLE
    assert main(["compose", str(tmp_path / "none\x1b[2J"), "--out", str(tmp_path / "o.safetensors")]) != EXIT_OK
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err and err.count("\\x1b") >= 3, err


def test_an_output_that_is_an_input_is_refused(tmp_path, files, capsys):
    """Issue 30, case 16: `compose A B --out A --overwrite` replaced the only copy of experience 0's component
    by the composition. The same file by another path, a symlink or a hard link is refused too (exit 2)."""
    a, b = files / "experience-0.safetensors", files / "experience-1.safetensors"
    original = a.read_bytes()
    (tmp_path / "link.safetensors").symlink_to(a)
    os.link(a, tmp_path / "hard.safetensors")
    for out in (a, files / ".." / "silo" / "experience-0.safetensors", tmp_path / "link.safetensors",
                tmp_path / "hard.safetensors"):
        assert main(["compose", str(a), str(b), "--out", str(out), "--overwrite"]) == EXIT_USAGE, out
        assert "is the input file" in capsys.readouterr().err
    assert main(["compose", str(files), "--out", str(b), "--overwrite"]) == EXIT_USAGE  # an input by its directory
    composed = tmp_path / "composed.safetensors"
    assert main(["compose", str(files), "--out", str(composed)]) == EXIT_OK
    assert main(["forget", str(composed), str(b), "--out", str(b), "--overwrite"]) == EXIT_USAGE
    assert main(["forget", str(composed), str(b), "--out", str(composed), "--overwrite"]) == EXIT_USAGE
    assert a.read_bytes() == original and cf.load_component(str(b)).experience == 1


# ---------------------------------------------------------------------------- refusals before the network (issue 31)


def missing_data(**options):
    """A data factory whose data set is missing (as a classic benchmark's factory without its files)."""
    raise FileNotFoundError("no data set here")


MISSING_DATA = "tests.avalanche_tmc.test_cli_refusals:missing_data"
NEVER_MODEL = "tests.avalanche_tmc.test_cli_refusals:never"


def test_unknown_experiences_are_refused_before_the_model_is_built(tmp_path, capsys):
    """Issue 31, item 8: `--experience 7` of the 5-experience digits; the default model factory pre-trains a
    network, so it must not run before the ids are checked against the data."""
    code = main(["train-component", "--experience", "0", "7", "--out", str(tmp_path), "--quiet", "--model",
                 NEVER_MODEL])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    assert "[7] are not in the data's training stream (ids [0, 1, 2, 3, 4])" in err
    assert "factory was called" not in err and not list(tmp_path.iterdir())


def test_missing_data_is_found_before_the_model_is_built(tmp_path, files, capsys):
    """Issue 31, item 8: evaluate built (and pre-trained) the network before calling the data factory."""
    for command in (["evaluate", str(files)], ["train-component", "--experience", "0", "--out", str(tmp_path)]):
        assert main([*command, "--quiet", "--model", NEVER_MODEL, "--data", MISSING_DATA]) == EXIT_FACTORY
        err = capsys.readouterr().err
        assert "no data set here" in err and "factory was called" not in err, err


@pytest.mark.integration
def test_a_missing_device_is_refused_before_avalanche_is_imported(tmp_path):
    """Issue 31, item 8: `--device cuda` on a machine without it took Avalanche's import (seconds) first: only
    torch is needed to know. (In a fresh process: this one imported Avalanche long ago.)"""
    device = "cuda:63"
    if torch.cuda.device_count() > 63:
        pytest.skip("this machine has the device")
    script = ("import sys; from avalanche_tmc.cli import main; "
              f"code = main(['train-component', '--experience', '0', '--out', {str(tmp_path)!r}, '--device', "
              f"{device!r}, *{NEVER!r}]); "
              "print(sorted(m for m in sys.modules if m.split('.')[0] == 'avalanche')); sys.exit(code)")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONWARNINGS="ignore"))
    assert done.returncode == EXIT_USAGE, done.stderr
    assert "no cuda device on this machine" in done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout  # no Avalanche module was imported


# ---------------------------------------------------------------------------- issue 42, class 8

TINY_FACTORIES = ["--model", "tests.avalanche_tmc.cli_factories:model", "--data",
                  "tests.avalanche_tmc.cli_factories:data", "--option", "tasks=3", "--quiet"]


@pytest.fixture()
def stats_files(tmp_path):
    """Two training-free component files of the tiny digits factories (fast to train) and their composition."""
    silo = tmp_path / "silo"
    assert main(["train-component", "--experience", "0", "1", "--method", "stats-ridge", "--out", str(silo),
                 *TINY_FACTORIES]) == EXIT_OK
    assert main(["compose", str(silo), "--out", str(tmp_path / "composed.safetensors")]) == EXIT_OK
    return silo, tmp_path / "composed.safetensors"


def test_forget_and_train_component_print_paths_with_control_characters_escaped(tmp_path, stats_files, capsys):
    silo, composed = stats_files
    capsys.readouterr()
    crafted = tmp_path / "out\x1b[2J\x07.safetensors"
    assert main(["forget", str(composed), str(silo / "experience-1.safetensors"), "--out", str(crafted)]) == EXIT_OK
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "out\\x1b[2J\\x07.safetensors" in out
    silo2 = tmp_path / "silo\x1b]0;owned\x07"
    assert main(["train-component", "--experience", "2", "--method", "stats-ridge", "--out", str(silo2),
                 *TINY_FACTORIES]) == EXIT_OK
    out = capsys.readouterr().out
    assert "wrote" in out and "\x1b" not in out and "\x07" not in out and "silo\\x1b]0;owned\\x07" in out


def _talking_factories(tmp_path):
    path = tmp_path / "talking.py"
    path.write_text("import os\nfrom tests.avalanche_tmc import cli_factories\n"
                    "print('loading the factories')\n"
                    "def model(**options):\n"
                    "    print('building the model', flush=True)\n"
                    "    os.write(1, b'from file descriptor 1\\n')\n"
                    "    net = cli_factories.model(**options)\n"
                    "    net.register_forward_pre_hook(lambda *_: print('a forward while evaluating'))\n"
                    "    return net\n"
                    "def data(**options):\n"
                    "    print('loading the data')\n"
                    "    return cli_factories.data(**options)\n")
    return ["--model", f"{path}:model", "--data", f"{path}:data", "--option", "tasks=3", "--quiet"]


def test_evaluate_json_stdout_holds_only_the_json_when_a_factory_prints(tmp_path, stats_files, capfd):
    _, composed = stats_files
    capfd.readouterr()
    assert main(["evaluate", str(composed), "--json", *_talking_factories(tmp_path)]) == EXIT_OK
    out, err = capfd.readouterr()
    report = json.loads(out)  # nothing but the JSON
    assert report["experiences"] == [0, 1]
    for said in ("loading the factories", "building the model", "from file descriptor 1", "loading the data",
                 "a forward while evaluating"):
        assert said in err
    print("after")  # standard output is back where it was
    assert capfd.readouterr().out == "after\n"
    assert main(["evaluate", str(composed), "--json", "--logger", "text", "--log-dir", str(tmp_path / "logs"),
                 *_talking_factories(tmp_path)]) == EXIT_OK
    out, err = capfd.readouterr()
    assert json.loads(out)["experiences"] == [0, 1] and "Top1_Acc" in err  # Avalanche's text logger on stderr


@pytest.mark.parametrize("where", ["model", "data", "import"])
@pytest.mark.parametrize("code", ["0", "3", "None"])
def test_a_factory_calling_sys_exit_is_a_factory_error(tmp_path, stats_files, capsys, where, code):
    """A factory calling sys.exit(0) ended the command with exit 0 and nothing written."""
    _, composed = stats_files
    path = tmp_path / "exiting.py"
    path.write_text("import sys\nfrom tests.avalanche_tmc import cli_factories\n"
                    + (f"sys.exit({code})\n" if where == "import" else "")
                    + f"def model(**options):\n    {'sys.exit(' + code + ')' if where == 'model' else 'pass'}\n"
                    "    return cli_factories.model(**options)\n"
                    f"def data(**options):\n    {'sys.exit(' + code + ')' if where == 'data' else 'pass'}\n"
                    "    return cli_factories.data(**options)\n")
    factories = ["--model", f"{path}:model", "--data", f"{path}:data", "--option", "tasks=3", "--quiet"]
    capsys.readouterr()
    assert main(["evaluate", str(composed), "--json", *factories]) == EXIT_FACTORY
    out, err = capsys.readouterr()
    assert out == "" and f"called sys.exit({code})" in err and "remove the call to sys.exit" in err
    assert main(["train-component", "--experience", "2", "--method", "stats-ridge", "--out", str(tmp_path / "o"),
                 *factories]) == EXIT_FACTORY
    assert not (tmp_path / "o" / "experience-2.safetensors").exists()


@pytest.mark.parametrize("how", ["--key-file", "environment"])
def test_a_fifo_key_file_is_an_unusable_file_not_a_hang(tmp_path, files, capsys, monkeypatch, how):
    """Issue 42, class 4: a FIFO named as the key file blocked the command for ever."""
    import threading

    fifo = tmp_path / "key.fifo"
    os.mkfifo(fifo)
    extra = ["--key-file", str(fifo)] if how == "--key-file" else []
    if how == "environment":
        monkeypatch.setenv("AVALANCHE_TMC_KEY_FILE", str(fifo))
    codes = []
    thread = threading.Thread(target=lambda: codes.append(
        main(["compose", str(files), "--out", str(tmp_path / "c.safetensors"), *extra])), daemon=True)
    thread.start()
    thread.join(30)
    if thread.is_alive():  # blocked opening the FIFO: let it go, then fail
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(10)
        pytest.fail("the command blocked on a FIFO key file")
    assert codes == [EXIT_BAD_FILE]
    assert "not a regular file" in capsys.readouterr().err and not (tmp_path / "c.safetensors").exists()
