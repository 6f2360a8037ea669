"""Learned-state files (issues 21, 30, 32): what a strategy learned round-trips through a
file that loads without unpickling (on the tests' ``device``); a file of something else,
edited, crafted or of another format version is a CheckpointError naming what is wrong,
the strategy left as it was."""

import os
import pickle
import warnings
from pathlib import Path

import pytest
import torch

from avalanche_tmc import TangentModel, TMCStrategy, TMEStrategy
from avalanche_tmc.files.checkpoint import CheckpointError
from avalanche_tmc.files.learned import load_learned, save_learned
from tests.avalanche_tmc.files.common import nothing_learned, small_strategy, small_training_free, train_unshuffled
from tests.helpers import NUM_CLASSES, TinyResNet, quiet_evaluator, small_benchmark

warnings.filterwarnings("ignore", message="No loggers specified")


@pytest.fixture(scope="module")
def bm():
    return small_benchmark(n_experiences=4)


@pytest.mark.parametrize("keep", [True, False])
def test_learned_state_round_trips_without_pickle(bm, tmp_path, keep, device):
    trained = train_unshuffled(small_strategy(keep_components=keep, device=device), bm.train_stream[:2])
    path = save_learned(trained, str(tmp_path / "learned.safetensors"))
    resumed = small_strategy(keep_components=keep, device=device)
    assert load_learned(resumed, path) == [0, 1]
    # read on the CPU, put where the strategy learns
    assert {t.device.type for t in resumed.composed_delta.values()} == {device.type}
    for name, value in trained.composed_delta.items():
        assert torch.equal(resumed.composed_delta[name], value), name
    assert dict(resumed.tangent_plugin.task_classes) == dict(trained.tangent_plugin.task_classes)
    # training goes on identically, and forgetting works on the loaded members
    train_unshuffled(trained, bm.train_stream[2:3])
    train_unshuffled(resumed, bm.train_stream[2:3])
    for name, value in trained.composed_delta.items():
        assert torch.equal(resumed.composed_delta[name], value), name
    if keep:
        resumed.forget(0)
        trained.forget(0)
        for name, value in trained.composed_delta.items():
            assert torch.allclose(resumed.composed_delta[name], value, rtol=1e-6, atol=1e-8), name


def test_learned_statistics_round_trip(bm, tmp_path, device):
    trained = train_unshuffled(small_training_free(device=device), bm.train_stream[:2])
    path = save_learned(trained, str(tmp_path / "learned.safetensors"))
    resumed = small_training_free(device=device)
    assert load_learned(resumed, path) == [0, 1]
    assert {t.device.type for t in resumed.statistics.summed().values()} == {device.type}
    # (the untrained model is where it was built until Avalanche moves it: compared on the CPU)
    assert torch.equal(resumed.model.weight.cpu(), trained.model.weight.cpu())


def test_learned_state_of_something_else_or_edited_is_refused(bm, tmp_path):
    path = save_learned(train_unshuffled(small_strategy(), bm.train_stream[:1]), str(tmp_path / "learned.safetensors"))
    for build, named in ((lambda: small_strategy(TMEStrategy), "strategy type"),
                         (lambda: small_strategy(width=8), "architecture"),
                         (lambda: small_strategy(seed=1), "pre-trained weights"),
                         (small_training_free, "strategy type")):
        strategy = build()
        with pytest.raises(CheckpointError, match=named):
            load_learned(strategy, path)
        assert len(strategy.learned()) == 0
    data = bytearray(Path(path).read_bytes())
    data[-3] ^= 0xFF
    (tmp_path / "edited.safetensors").write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="integrity"):
        load_learned(small_strategy(), str(tmp_path / "edited.safetensors"))


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

    path = save_learned(train_unshuffled(small_strategy(), bm.train_stream[:1]), str(tmp_path / "learned.safetensors"))
    data = Path(path).read_bytes()
    metadata = json.loads(data[8:8 + int.from_bytes(data[:8], "little")])["__metadata__"]
    assert metadata["format_version"] == str(FORMAT_VERSION) == "3"
    metadata.pop("format_version")
    if version is not None:
        metadata["format_version"] = version
    metadata["file_sha256"] = metadata_sha256(metadata)
    (tmp_path / "old.safetensors").write_bytes(save(load(data), metadata=metadata))
    strategy = small_strategy()
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
        load_learned(small_strategy(), str(crafted))
    assert not marker.exists()


def test_a_head_only_file_into_a_full_strategy_is_a_checkpoint_error(bm, tmp_path):
    """Issue 30, case 18: load_learned of a TMC-FC (head-only) file into a full TMC strategy raised ValueError and
    left the strategy claiming experiences [0, 1] (train refused, eval raised)."""
    def strategy(linearize):
        torch.manual_seed(0)
        model = TangentModel(TinyResNet(num_classes=3), num_classes=NUM_CLASSES, linearize=linearize)
        return TMCStrategy(model=model, train_mb_size=8, evaluator=quiet_evaluator())

    path = save_learned(train_unshuffled(strategy("head"), bm.train_stream[:2]), str(tmp_path / "fc.safetensors"))
    full = strategy("all")
    with pytest.raises(CheckpointError, match="linearized parameters"):
        load_learned(full, path)
    assert nothing_learned(full)
    train_unshuffled(full, bm.train_stream[:1])  # and it trains as a fresh one
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
    # issue 42, A4: odd tensor names (int('²') fails; int('١') is 1) and weights whose sum overflows
    ("a member index that is a superscript", None, lambda t: _renamed(t, new="member/\u00b2/")),
    ("a member index in Arabic-Indic digits", None, lambda t: _renamed(t, new="member/\u0661/")),
    ("a member index with a sign", None, lambda t: _renamed(t, new="member/+1/")),
    ("weights whose sum overflows", lambda m: [dict(m[0], weight=1.7e308), dict(m[1], weight=1.7e308)], None),
    ("an integer weight beyond float's range", lambda m: [dict(m[0], weight=10 ** 400), m[1]], None),
    ("a class id beyond any head", lambda m: [dict(m[0], classes={"0": [10 ** 30]}), m[1]], None),
])
def test_crafted_learned_state_files_are_checkpoint_errors(bm, tmp_path, what, members, tensors):
    """Issue 30, case 19: crafted learned-state files (hashes recomputed) raised ValueError with the strategy changed,
    IndexError or KeyError. Every one is a CheckpointError and the strategy is unchanged."""
    path = save_learned(train_unshuffled(small_strategy(), bm.train_stream[:2]), str(tmp_path / "learned.safetensors"))
    crafted = _recrafted(path, tmp_path / "crafted.safetensors", members, tensors)
    strategy = small_strategy()
    with pytest.raises(CheckpointError):
        load_learned(strategy, crafted)
    assert nothing_learned(strategy), what


def test_a_learned_state_file_without_the_linearized_hash_is_refused(bm, tmp_path):
    """Every file of format version 3 records the linearized parameters (those written before
    it are refused by their version): one without them is edited, and refused."""
    trained = train_unshuffled(small_strategy(), bm.train_stream[:1])
    path = save_learned(trained, str(tmp_path / "learned.safetensors"))
    old = _recrafted(path, tmp_path / "old.safetensors",
                     edit_identity=lambda identity: {k: v for k, v in identity.items() if k != "linearized"})
    assert "linearized" not in Path(old).read_bytes().decode("latin-1")
    resumed = small_strategy()
    with pytest.raises(CheckpointError, match="its linearized parameters .* differs"):
        load_learned(resumed, old)
    assert nothing_learned(resumed)


def _member_edited(tensors, change, index=1):
    prefix = f"member/{index}/"
    return {n: (change(t) if n.startswith(prefix) else t) for n, t in tensors.items()}


def _checksum_recomputed(index=1, change=lambda t: 3 * t):
    """The members' entry with member ``index``'s checksum made from its edited tensors."""
    def edit(members, path):
        from safetensors.torch import load

        from avalanche_tmc.composition.additive import tensors_sha256

        tensors = load(Path(path).read_bytes())
        prefix = f"member/{index}/"
        edited = {n[len(prefix):]: change(t) for n, t in tensors.items() if n.startswith(prefix)}
        return [dict(m, checksum=tensors_sha256(edited)) if i == index else m for i, m in enumerate(members)]
    return edit


@pytest.mark.parametrize("cls", [TMCStrategy, TMEStrategy])
@pytest.mark.parametrize("what, change, recompute, message", [
    ("all-NaN", lambda t: torch.full_like(t, float("nan")), True, "kept member 1 is not finite"),
    ("tripled", lambda t: 3 * t, False, "kept member 1's tensors do not match its recorded checksum"),
    ("tripled, its checksum recomputed", lambda t: 3 * t, True, "kept member 1 does not add up with the others"),
    ("negated, its checksum recomputed", lambda t: -t, True, "kept member 1 does not add up with the others"),
])
def test_kept_members_that_disagree_with_the_file_are_refused_naming_the_member(bm, tmp_path, cls, what, change,
                                                                                 recompute, message):
    """Issue 42, class 7: kept components that disagreed with the composed sum or their own
    recorded checksums (all-NaN, tripled; hashes recomputed) were loaded."""
    path = save_learned(train_unshuffled(small_strategy(cls), bm.train_stream[:3]), str(tmp_path / "l.safetensors"))
    edit_members = (lambda members: _checksum_recomputed(1, change)(members, path)) if recompute else None
    crafted = _recrafted(path, tmp_path / "crafted.safetensors", edit_members,
                         lambda tensors: _member_edited(tensors, change))
    strategy = small_strategy(cls)
    with pytest.raises(CheckpointError, match=message):
        load_learned(strategy, crafted)
    assert nothing_learned(strategy), what
    assert load_learned(small_strategy(cls), path) == [0, 1, 2]  # the file as written loads


def test_an_edited_sum_is_refused_against_the_kept_members(bm, tmp_path):
    path = save_learned(train_unshuffled(small_strategy(), bm.train_stream[:2]), str(tmp_path / "l.safetensors"))
    crafted = _recrafted(path, tmp_path / "crafted.safetensors",
                         edit_tensors=lambda t: {n: (v * 2 if n.startswith("sum/") else v) for n, v in t.items()})
    strategy = small_strategy()
    with pytest.raises(CheckpointError, match="do not add up|does not add up"):
        load_learned(strategy, crafted)
    assert nothing_learned(strategy)


def test_kept_statistics_that_disagree_with_their_sum_are_refused(bm, tmp_path):
    """The training-free strategy's kept statistics (an unscaled sum) are checked the same way."""
    from tests.avalanche_tmc.files.common import small_training_free

    trained = train_unshuffled(small_training_free(), bm.train_stream[:2])
    if not trained.learned().keep_components:  # pragma: no cover
        pytest.skip("the training-free strategy keeps no members")
    path = save_learned(trained, str(tmp_path / "l.safetensors"))
    crafted = _recrafted(path, tmp_path / "crafted.safetensors",
                         lambda members: _checksum_recomputed(0, lambda t: 3 * t)(members, path),
                         lambda tensors: _member_edited(tensors, lambda t: 3 * t, index=0))
    strategy = small_training_free()
    with pytest.raises(CheckpointError, match="kept member 0 does not add up with the others"):
        load_learned(strategy, crafted)
    assert len(strategy.learned()) == 0
    assert load_learned(small_training_free(), path) == [0, 1]
