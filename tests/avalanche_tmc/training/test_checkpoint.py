"""Checkpoints (issue 21): loading checks the strategy type and mode, the architecture and
the base weights and refuses a mismatch naming it, leaving the strategy as it was; an
unreadable checkpoint is a CheckpointError; the learned state round-trips through a file
that loads without unpickling (on the tests' ``device``)."""

import os
import pickle
import warnings
from pathlib import Path

import pytest
import torch

from avalanche_tmc import AnalyticClassifier, AnalyticHeadStrategy, TangentModel, TMCStrategy, TMEStrategy, penultimate
from avalanche_tmc.training.checkpoint import (
    CheckpointError,
    load_learned,
    maybe_load_checkpoint,
    save_checkpoint,
    save_learned,
)
from tests.helpers import NUM_CLASSES, TinyResNet, quiet_evaluator, small_benchmark, tmc

warnings.filterwarnings("ignore", message="No loggers specified")
ROOT = Path(__file__).resolve().parents[3]


def _strategy(cls=TMCStrategy, width=4, seed=0, **kwargs):
    torch.manual_seed(seed)
    model = TangentModel(TinyResNet(width=width, num_classes=3), num_classes=NUM_CLASSES)
    return cls(model=model, lr=1e-2, train_mb_size=8, train_epochs=1, evaluator=quiet_evaluator(), **kwargs)


def _analytic(seed=0, device="cpu"):
    torch.manual_seed(seed)
    model = AnalyticClassifier(penultimate(TinyResNet(num_classes=3)), NUM_CLASSES)
    return AnalyticHeadStrategy(model=model, ridge_lambda=1.0, train_mb_size=8, evaluator=quiet_evaluator(),
                                device=device)


def _train(strategy, experiences):
    for exp in experiences:
        torch.manual_seed(100 + exp.current_experience)
        strategy.train(exp, shuffle=False)
    return strategy


@pytest.fixture(scope="module")
def bm():
    return small_benchmark(n_experiences=4)


@pytest.fixture(scope="module")
def checkpoint(bm, tmp_path_factory, device):
    path = str(tmp_path_factory.mktemp("ckpt") / "tmc.ckpt")
    save_checkpoint(_train(_strategy(device=device), bm.train_stream[:2]), path)
    return path


@pytest.mark.parametrize("build, named", [
    (lambda: _strategy(width=8), "architecture"),
    (lambda: _strategy(TMEStrategy), "strategy type"),
    (lambda: _strategy(seed=1), "pre-trained weights"),
])
def test_a_checkpoint_of_something_else_is_refused_and_the_strategy_kept(checkpoint, build, named):
    """Issue 21: a checkpoint of width 32 resumed into width 16, a TME one into TMC, without a word."""
    strategy = build()
    model, plugin = strategy.model, strategy.tangent_plugin
    with pytest.raises(CheckpointError, match=named):
        maybe_load_checkpoint(strategy, checkpoint)
    assert strategy.model is model and strategy.tangent_plugin is plugin and len(plugin.composition) == 0


def test_the_right_strategy_resumes(checkpoint, bm, device):
    strategy, first = maybe_load_checkpoint(_strategy(device=device), checkpoint)
    assert first == 2 and strategy.tangent_plugin.composition.keys == [0, 1]
    assert {t.device.type for t in strategy.composed_delta.values()} == {device.type}
    assert maybe_load_checkpoint(_strategy(), checkpoint + ".missing")[1] == 0


def test_an_unreadable_checkpoint_is_a_checkpoint_error(checkpoint, tmp_path):
    """Issue 21: a truncated checkpoint gave `OSError: [Errno 22]`."""
    data = Path(checkpoint).read_bytes()
    for keep in (len(data) // 2, 100, 0):
        truncated = tmp_path / f"truncated-{keep}.ckpt"
        truncated.write_bytes(data[:keep])
        strategy = _strategy()
        model = strategy.model
        with pytest.raises(CheckpointError, match="cannot be read"):
            maybe_load_checkpoint(strategy, str(truncated))
        assert strategy.model is model


def test_pickled_checkpoints_are_documented_as_trusted_files_only():
    import avalanche_tmc.training.checkpoint as module

    assert "trusted files only" in module.__doc__.lower()
    assert "trusted files only" in maybe_load_checkpoint.__doc__.lower()
    assert "trusted files only" in (ROOT / "README.md").read_text().lower()


@pytest.mark.parametrize("keep", [True, False])
def test_learned_state_round_trips_without_pickle(bm, tmp_path, keep, device):
    trained = _train(_strategy(keep_components=keep, device=device), bm.train_stream[:2])
    path = save_learned(trained, str(tmp_path / "learned.safetensors"))
    resumed = _strategy(keep_components=keep, device=device)
    assert load_learned(resumed, path) == [0, 1]
    # read on the CPU, put where the strategy learns
    assert {t.device.type for t in resumed.composed_delta.values()} == {device.type}
    for name, value in trained.composed_delta.items():
        assert torch.equal(resumed.composed_delta[name], value), name
    assert dict(resumed.tangent_plugin.task_classes) == dict(trained.tangent_plugin.task_classes)
    # training goes on identically, and forgetting works on the loaded members
    _train(trained, bm.train_stream[2:3])
    _train(resumed, bm.train_stream[2:3])
    for name, value in trained.composed_delta.items():
        assert torch.equal(resumed.composed_delta[name], value), name
    if keep:
        resumed.forget(0)
        trained.forget(0)
        for name, value in trained.composed_delta.items():
            assert torch.allclose(resumed.composed_delta[name], value, rtol=1e-6, atol=1e-8), name


def test_learned_statistics_round_trip(bm, tmp_path, device):
    trained = _train(_analytic(device=device), bm.train_stream[:2])
    path = save_learned(trained, str(tmp_path / "learned.safetensors"))
    resumed = _analytic(device=device)
    assert load_learned(resumed, path) == [0, 1]
    assert {t.device.type for t in resumed.statistics.summed().values()} == {device.type}
    # (the untrained model is where it was built until Avalanche moves it: compared on the CPU)
    assert torch.equal(resumed.model.weight.cpu(), trained.model.weight.cpu())


def test_learned_state_of_something_else_or_edited_is_refused(bm, tmp_path):
    path = save_learned(_train(_strategy(), bm.train_stream[:1]), str(tmp_path / "learned.safetensors"))
    for build, named in ((lambda: _strategy(TMEStrategy), "strategy type"), (lambda: _strategy(width=8),
                                                                              "architecture"),
                         (lambda: _strategy(seed=1), "pre-trained weights"), (_analytic, "strategy type")):
        strategy = build()
        with pytest.raises(CheckpointError, match=named):
            load_learned(strategy, path)
        assert len(strategy.learned()) == 0
    data = bytearray(Path(path).read_bytes())
    data[-3] ^= 0xFF
    (tmp_path / "edited.safetensors").write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="integrity"):
        load_learned(_strategy(), str(tmp_path / "edited.safetensors"))


class _Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_crafted_file_never_runs_code_through_load_learned(tmp_path):
    marker = tmp_path / "code-ran"
    crafted = tmp_path / "crafted.safetensors"
    crafted.write_bytes(pickle.dumps(_Payload(marker)))
    with pytest.raises(CheckpointError):
        load_learned(_strategy(), str(crafted))
    assert not marker.exists()


def test_fifos_are_refused_without_blocking(tmp_path):
    fifo = tmp_path / "ckpt"
    os.mkfifo(fifo)
    with pytest.raises(CheckpointError, match="regular file"):
        maybe_load_checkpoint(_strategy(), str(fifo))
    with pytest.raises(CheckpointError, match="regular file"):
        load_learned(_strategy(), str(fifo))


def test_other_strategies_are_checked_for_type_and_architecture(bm, tmp_path):
    from avalanche.training import Naive

    def naive(width=4):
        torch.manual_seed(0)
        net = TinyResNet(width=width, num_classes=NUM_CLASSES)
        return Naive(model=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1), train_mb_size=8,
                     evaluator=quiet_evaluator())

    path = str(tmp_path / "naive.ckpt")
    trained = naive()
    trained.train(bm.train_stream[0])
    save_checkpoint(trained, path)
    resumed, first = maybe_load_checkpoint(naive(), path)  # trained weights differ from fresh ones: not checked
    assert first == 1
    assert all(torch.equal(a, b) for a, b in zip(resumed.model.state_dict().values(),
                                                 trained.model.state_dict().values()))
    with pytest.raises(CheckpointError, match="architecture"):
        maybe_load_checkpoint(naive(width=8), path)
    with pytest.raises(CheckpointError, match="strategy type"):
        maybe_load_checkpoint(_strategy(), path)


def assert_same_delta(a, b):
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


@pytest.mark.integration
def test_checkpoint_after_two_experiences_resumes_in_a_new_process(tmp_path, device):
    import subprocess
    import sys

    root = str(ROOT)
    ckpt, resumed, full = (str(tmp_path / n) for n in ("ckpt.pkl", "resumed.pt", "full.pt"))
    for mode, out in (("first", ""), ("resume", resumed), ("full", full)):
        done = subprocess.run([sys.executable, "-m", "tests.avalanche_tmc.checkpoint_job", mode, ckpt, out,
                               str(device)], capture_output=True, text=True, cwd=root)
        assert done.returncode == 0, done.stderr[-2000:]
    assert [n for n in os.listdir(tmp_path) if n.endswith(".tmp")] == []  # the atomic write left no temp file
    a, b = torch.load(resumed, map_location="cpu"), torch.load(full, map_location="cpu")
    assert a["keys"] == b["keys"] == [0, 1, 2, 3]
    assert_same_delta(a["delta"], b["delta"])
    for key in b["components"]:
        assert_same_delta(a["components"][key], b["components"][key])


def test_failed_checkpoint_keeps_the_previous_file(tmp_path):
    path = tmp_path / "ckpt.pkl"
    path.write_bytes(b"previous")
    strategy = tmc()
    strategy.unpicklable = (i for i in range(3))
    with pytest.raises(Exception):
        save_checkpoint(strategy, str(path))
    assert path.read_bytes() == b"previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pkl"]
