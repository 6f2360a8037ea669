"""Checkpoints (issue 21): loading checks the strategy type and mode, the architecture and
the base weights and refuses a mismatch naming it, leaving the strategy as it was; an
unreadable checkpoint is a CheckpointError (on the tests' ``device``). Learned-state files:
``test_learned.py``."""

import os
import warnings
from pathlib import Path

import pytest
import torch

from avalanche_tmc import TangentModel, TMCStrategy, TMEStrategy
from avalanche_tmc.files.checkpoint import CheckpointError, maybe_load_checkpoint, save_checkpoint
from avalanche_tmc.files.learned import load_learned, save_learned
from tests.avalanche_tmc.files.common import small_strategy, train_unshuffled
from tests.helpers import NUM_CLASSES, TinyResNet, quiet_evaluator, small_benchmark, tmc

warnings.filterwarnings("ignore", message="No loggers specified")
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def bm():
    return small_benchmark(n_experiences=4)


@pytest.fixture(scope="module")
def checkpoint(bm, tmp_path_factory, device):
    path = str(tmp_path_factory.mktemp("ckpt") / "tmc.ckpt")
    save_checkpoint(train_unshuffled(small_strategy(device=device), bm.train_stream[:2]), path)
    return path


@pytest.mark.parametrize("build, named", [
    (lambda: small_strategy(width=8), "architecture"),
    (lambda: small_strategy(TMEStrategy), "strategy type"),
    (lambda: small_strategy(seed=1), "pre-trained weights"),
])
def test_a_checkpoint_of_something_else_is_refused_and_the_strategy_kept(checkpoint, build, named):
    """Issue 21: a checkpoint of width 32 resumed into width 16, a TME one into TMC, without a word."""
    strategy = build()
    model, plugin = strategy.model, strategy.tangent_plugin
    with pytest.raises(CheckpointError, match=named):
        maybe_load_checkpoint(strategy, checkpoint)
    assert strategy.model is model and strategy.tangent_plugin is plugin and len(plugin.composition) == 0


def test_the_right_strategy_resumes(checkpoint, bm, device):
    strategy, first = maybe_load_checkpoint(small_strategy(device=device), checkpoint)
    assert first == 2 and strategy.tangent_plugin.composition.keys == [0, 1]
    assert {t.device.type for t in strategy.composed_delta.values()} == {device.type}
    assert maybe_load_checkpoint(small_strategy(), checkpoint + ".missing")[1] == 0


def test_an_unreadable_checkpoint_is_a_checkpoint_error(checkpoint, tmp_path):
    """Issue 21: a truncated checkpoint gave `OSError: [Errno 22]`."""
    data = Path(checkpoint).read_bytes()
    for keep in (len(data) // 2, 100, 0):
        truncated = tmp_path / f"truncated-{keep}.ckpt"
        truncated.write_bytes(data[:keep])
        strategy = small_strategy()
        model = strategy.model
        with pytest.raises(CheckpointError, match="cannot be read"):
            maybe_load_checkpoint(strategy, str(truncated))
        assert strategy.model is model


def test_pickled_checkpoints_are_documented_as_trusted_files_only():
    import avalanche_tmc.files.checkpoint as module

    assert "trusted files only" in module.__doc__.lower()
    assert "trusted files only" in maybe_load_checkpoint.__doc__.lower()
    assert "trusted files only" in " ".join((ROOT / "README.md").read_text().lower().split())  # across a line break


def test_fifos_are_refused_without_blocking(tmp_path):
    fifo = tmp_path / "ckpt"
    os.mkfifo(fifo)
    with pytest.raises(CheckpointError, match="regular file"):
        maybe_load_checkpoint(small_strategy(), str(fifo))
    with pytest.raises(CheckpointError, match="regular file"):
        load_learned(small_strategy(), str(fifo))


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
        maybe_load_checkpoint(small_strategy(), path)


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


# ---------------------------------------------------------------------------- sizes (issue 31, item 3)


def _wide(cls, **kwargs):
    """A strategy on a network of about 300k parameters: a checkpoint's size is then its tensors'."""
    torch.manual_seed(0)
    network = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 512), torch.nn.ReLU(),
                                  torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 3))
    return cls(model=TangentModel(network, num_classes=NUM_CLASSES), lr=1e-2, train_mb_size=8, train_epochs=1,
               evaluator=quiet_evaluator(), **kwargs)


@pytest.mark.parametrize("cls, keep", [(TMEStrategy, True), (TMCStrategy, False)])
def test_checkpoints_hold_the_components_not_the_optimizer_state_or_gradients(tmp_path, cls, keep):
    """Issue 31: a ResNet-18 TME checkpoint was 7 networks after 1 experience, 11 after 5
    (Adam's two moments, the last gradients and a full tensor of zeros besides the state).
    Now: the network, the model's δ, the running sum (its zero template is one element per
    tensor), and one δ per kept component; the learned-state file: the sum and the kept
    components."""
    bm = small_benchmark(n_experiences=4)
    strategy = _wide(cls, keep_components=keep)
    network = strategy.base_network()
    delta = sum(t.numel() * t.element_size() for t in strategy.model.delta.values())
    base = sum(t.numel() * t.element_size() for t in network.state_dict().values())
    assert delta > 1_000_000 and base >= delta
    slack = delta // 4  # pickle and safetensors headers, the benchmark's tensors, the plugins
    sizes = {}
    for exp in bm.train_stream:
        train_unshuffled(strategy, [exp])
        done = exp.current_experience + 1
        if done in (1, 4):
            assert not strategy.optimizer.state and all(p.grad is None for p in strategy.model.delta_params)
            save_checkpoint(strategy, str(tmp_path / "ckpt.pkl"))
            save_learned(strategy, str(tmp_path / "learned.safetensors"))
            sizes[done] = [os.path.getsize(tmp_path / n) for n in ("ckpt.pkl", "learned.safetensors")]
            kept = done if keep else 0
            assert base + (2 + kept) * delta <= sizes[done][0] <= base + (2 + kept) * delta + slack
            assert (1 + kept) * delta <= sizes[done][1] <= (1 + kept) * delta + slack
    growth = sizes[4][0] - sizes[1][0]
    assert abs(growth - (3 * delta if keep else 0)) <= slack  # one δ per kept component, never a network more


def test_the_optimizer_state_of_a_continuing_optimizer_is_kept(tmp_path):
    """Without reset_optimizer_state (the next member goes on with Adam's moments) the state
    stays, in memory and in the checkpoint, and resumes bit for bit."""
    from avalanche.training.templates import SupervisedTemplate

    from avalanche_tmc import TangentPlugin

    bm = small_benchmark(n_experiences=2)

    def build():
        torch.manual_seed(0)
        model = TangentModel(TinyResNet(num_classes=3), num_classes=NUM_CLASSES)
        return SupervisedTemplate(model=model, optimizer=torch.optim.Adam(model.delta_params, lr=1e-2),
                                  train_mb_size=8, evaluator=quiet_evaluator(),
                                  plugins=[TangentPlugin(reset_optimizer_state=False)])

    strategy = train_unshuffled(build(), bm.train_stream[:1])
    assert strategy.optimizer.state and all(s["step"] > 0 for s in strategy.optimizer.state.values())
    save_checkpoint(strategy, str(tmp_path / "ckpt.pkl"))
    resumed, first = maybe_load_checkpoint(build(), str(tmp_path / "ckpt.pkl"))
    assert first == 1
    train_unshuffled(strategy, bm.train_stream[1:]), train_unshuffled(resumed, bm.train_stream[1:])
    assert_same_delta(resumed.model.delta, strategy.model.delta)
