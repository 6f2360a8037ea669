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
from avalanche_tmc.files.checkpoint import CheckpointError, maybe_load_checkpoint, save_checkpoint
from avalanche_tmc.files.learned import load_learned, save_learned
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
    import avalanche_tmc.files.checkpoint as module

    assert "trusted files only" in module.__doc__.lower()
    assert "trusted files only" in maybe_load_checkpoint.__doc__.lower()
    assert "trusted files only" in " ".join((ROOT / "README.md").read_text().lower().split())  # across a line break


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


@pytest.mark.parametrize("version, said", [
    (None, "earlier avalanche-tmc .format version 2 or older.*train the strategy again and write the file with "
           "save_learned"),
    ("2", "earlier avalanche-tmc .format version 2.*reads format version 3 only"),
    ("9", "format version 9; this avalanche-tmc reads format version 3 .upgrade avalanche-tmc."),
])
def test_a_learned_state_file_of_another_format_version_is_refused_saying_what_to_do(bm, tmp_path, version, said):
    """Issue 32: learned-state files record the format version (3: the network's classes by
    registered names). One without it (written before, its architecture hashed from module
    paths that have moved) or of another version is refused, the strategy unchanged."""
    import json

    from safetensors.torch import load, save

    from avalanche_tmc.files import FORMAT_VERSION
    from avalanche_tmc.files.signing import metadata_sha256

    path = save_learned(_train(_strategy(), bm.train_stream[:1]), str(tmp_path / "learned.safetensors"))
    data = Path(path).read_bytes()
    metadata = json.loads(data[8:8 + int.from_bytes(data[:8], "little")])["__metadata__"]
    assert metadata["format_version"] == str(FORMAT_VERSION) == "3"
    metadata.pop("format_version")
    if version is not None:
        metadata["format_version"] = version
    metadata["file_sha256"] = metadata_sha256(metadata)
    (tmp_path / "old.safetensors").write_bytes(save(load(data), metadata=metadata))
    strategy = _strategy()
    with pytest.raises(CheckpointError, match=said):
        load_learned(strategy, str(tmp_path / "old.safetensors"))
    assert len(strategy.learned()) == 0
    assert load_learned(strategy, path) == [0]


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


def _unchanged(strategy) -> bool:
    """Nothing learned, no classes recorded, and the model's δ still zero."""
    return (len(strategy.learned()) == 0 and not strategy.learned_classes()
            and all(not t.any() for t in strategy.model.delta.values()))


def test_a_head_only_file_into_a_full_strategy_is_a_checkpoint_error(bm, tmp_path):
    """Issue 30, case 18: load_learned of a TMC-FC (head-only) file into a full TMC strategy raised ValueError and
    left the strategy claiming experiences [0, 1] (train refused, eval raised)."""
    def strategy(linearize):
        torch.manual_seed(0)
        model = TangentModel(TinyResNet(num_classes=3), num_classes=NUM_CLASSES, linearize=linearize)
        return TMCStrategy(model=model, train_mb_size=8, evaluator=quiet_evaluator())

    path = save_learned(_train(strategy("head"), bm.train_stream[:2]), str(tmp_path / "fc.safetensors"))
    full = strategy("all")
    with pytest.raises(CheckpointError, match="linearized parameters"):
        load_learned(full, path)
    assert _unchanged(full)
    _train(full, bm.train_stream[:1])  # and it trains as a fresh one
    assert load_learned(strategy("head"), path) == [0, 1]


def _recrafted(path, out, edit_members=None, edit_tensors=None, edit_identity=None):
    """``path`` (a learned-state file) with its members and/or tensors edited and every hash recomputed."""
    import json

    from safetensors.torch import load, save

    from avalanche_tmc.files import content_sha256
    from avalanche_tmc.files.signing import metadata_sha256

    data = Path(path).read_bytes()
    metadata = json.loads(data[8:8 + int.from_bytes(data[:8], "little")])["__metadata__"]
    tensors = load(data)
    if edit_members is not None:
        metadata["members"] = json.dumps(edit_members(json.loads(metadata["members"])))
    if edit_tensors is not None:
        tensors = edit_tensors(dict(tensors))
    if edit_identity is not None:
        metadata["identity"] = json.dumps(edit_identity(json.loads(metadata["identity"])))
    metadata["content_sha256"] = content_sha256(tensors)
    metadata["file_sha256"] = metadata_sha256(metadata)
    Path(out).write_bytes(save(tensors, metadata=metadata))
    return str(out)


def _reshaped(tensors):
    name = next(n for n in tensors if n.startswith("sum/"))
    return {**tensors, name: torch.zeros(7, 3)}


def _renamed(tensors, old="member/1/", new="member/9/"):
    return {(new + n[len(old):] if n.startswith(old) else n): t for n, t in tensors.items()}


@pytest.mark.parametrize("what, members, tensors", [
    ("a tensor of another shape", None, _reshaped),
    ("a member index out of range", None, _renamed),
    ("a member tensor missing", None, lambda t: {n: v for n, v in t.items() if not n.startswith("member/1/")}),
    ("members not a list", lambda m: {"0": m[0]}, None),
    ("a member without a key", lambda m: [{k: v for k, v in m[0].items() if k != "key"}, m[1]], None),
    ("a member key twice", lambda m: [m[0], dict(m[1], key=m[0]["key"])], None),
    ("a negative weight", lambda m: [dict(m[0], weight=-1.0), m[1]], None),
    ("classes not integers", lambda m: [dict(m[0], classes={"0": ["x"]}), m[1]], None),
    ("a checksum not a hash", lambda m: [dict(m[0], checksum=None), m[1]], None),
    ("a member dropped", lambda m: m[:1], None),
])
def test_crafted_learned_state_files_are_checkpoint_errors(bm, tmp_path, what, members, tensors):
    """Issue 30, case 19: crafted learned-state files (hashes recomputed) raised ValueError with the strategy changed,
    IndexError or KeyError. Every one is a CheckpointError and the strategy is unchanged."""
    path = save_learned(_train(_strategy(), bm.train_stream[:2]), str(tmp_path / "learned.safetensors"))
    crafted = _recrafted(path, tmp_path / "crafted.safetensors", members, tensors)
    strategy = _strategy()
    with pytest.raises(CheckpointError):
        load_learned(strategy, crafted)
    assert _unchanged(strategy), what


def test_learned_state_files_written_before_the_linearized_hash_still_load(bm, tmp_path):
    """Files written before checkpoint_identity recorded the linearized parameters load as before (their
    tensors are checked against the model instead)."""
    trained = _train(_strategy(), bm.train_stream[:1])
    path = save_learned(trained, str(tmp_path / "learned.safetensors"))
    old = _recrafted(path, tmp_path / "old.safetensors",
                     edit_identity=lambda identity: {k: v for k, v in identity.items() if k != "linearized"})
    assert "linearized" not in Path(old).read_bytes().decode("latin-1")
    resumed = _strategy()
    assert load_learned(resumed, old) == [0]
    assert all(torch.equal(resumed.composed_delta[n], t) for n, t in trained.composed_delta.items())


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
        _train(strategy, [exp])
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

    strategy = _train(build(), bm.train_stream[:1])
    assert strategy.optimizer.state and all(s["step"] > 0 for s in strategy.optimizer.state.values())
    save_checkpoint(strategy, str(tmp_path / "ckpt.pkl"))
    resumed, first = maybe_load_checkpoint(build(), str(tmp_path / "ckpt.pkl"))
    assert first == 1
    _train(strategy, bm.train_stream[1:]), _train(resumed, bm.train_stream[1:])
    assert_same_delta(resumed.model.delta, strategy.model.delta)
