"""Component files you can trust (issue 21): one hash over metadata and tensors, tensors of
the base's shapes, integer experience ids, no content under two ids, bounded reads of
regular files only, exclusive writes, optional HMAC signatures, sanitized printing.

Hostile files are crafted as an attacker would: metadata edited, and where it says so
the hashes recomputed (an attacker knows the algorithm; only a key stops that)."""

import json
import multiprocessing
import os
import resource
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load, save

from avalanche_tmc import TangentModel
from avalanche_tmc import component_files as cf
from tests.helpers import NUM_CLASSES, TinyResNet, random_delta

KEY = b"0123456789abcdef-shared-silo-key"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return TangentModel(TinyResNet(num_classes=3), num_classes=NUM_CLASSES)


@pytest.fixture()
def files(model, tmp_path):
    """Components of experiences 0 and 1 (weight 1) and their composition, on disk."""
    paths = {}
    for exp in (0, 1):
        paths[exp] = cf.save_component(cf.tangent_component(model, random_delta(model, seed=exp), exp),
                                       str(tmp_path / f"experience-{exp}.safetensors"))
    composition = cf.compose_components([cf.load_component(paths[0]), cf.load_component(paths[1])])
    paths["composed"] = cf.save_component(composition, str(tmp_path / "composed.safetensors"))
    return paths


def _parts(path):
    data = open(path, "rb").read()
    (length,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + length])["__metadata__"], load(data)


def _craft(path, out, edit=None, tensors=None, rehash=False):
    """``path`` with its metadata entries edited (``edit(metadata)``, JSON entries decoded)
    and/or other tensors; ``rehash``: hashes recomputed, as an attacker can."""
    metadata, original = _parts(path)
    tensors = original if tensors is None else tensors
    decoded = {k: json.loads(v) if k in ("weight", "members", "base", "settings") else v for k, v in metadata.items()}
    if edit is not None:
        edit(decoded)
    metadata = {k: json.dumps(v) if k in ("weight", "members", "base", "settings") else v for k, v in decoded.items()}
    if rehash:
        metadata["content_sha256"] = cf.content_sha256(tensors)
        metadata.pop("hmac_sha256", None)
        metadata["file_sha256"] = cf._metadata_sha256(metadata)
    with open(out, "wb") as f:
        f.write(save(dict(tensors), metadata=metadata))
    return str(out)


def _set(path, value):
    def edit(metadata):
        *parents, last = path
        target = metadata
        for key in parents:
            target = target[key]
        target[last] = value
    return edit


# ---------------------------------------------------------------------------- 1. integrity


@pytest.mark.parametrize("what, edit", [
    ("weight 1 -> 1000", _set(["weight"], 1000.0)),
    ("member weight", _set(["members", 0, "weight"], 2.0)),
    ("experience relabelled", _set(["members", 0, "experience"], 7)),
    ("settings", _set(["settings", "lr"], 1.0)),
    ("base dtype", _set(["base", "dtype"], "float64")),
])
def test_edited_metadata_is_refused(files, tmp_path, what, edit):
    """Issue 21: editing `weight` from 1.0 to 1000.0, tensors untouched, was accepted."""
    crafted = _craft(files[0], tmp_path / "edited.safetensors", edit)
    with pytest.raises(cf.ComponentFileError, match="integrity hash"):
        cf.load_component(crafted)


def test_edited_composition_weight_and_members_are_refused(files, tmp_path):
    """Issue 21: editing a composition's W from 2 to 1 doubled δ; relabelling a member composed [0, 1, 7]."""
    for edit in (_set(["weight"], 1.0), _set(["members", 0, "experience"], 7)):
        with pytest.raises(cf.ComponentFileError, match="integrity hash"):
            cf.load_component(_craft(files["composed"], tmp_path / "w.safetensors", edit))
    # with the hash recomputed, W must still be the sum of the members' weights
    with pytest.raises(cf.ComponentFileError, match="not the sum of"):
        cf.load_component(_craft(files["composed"], tmp_path / "w.safetensors", _set(["weight"], 1.0), rehash=True))


def test_a_relabelled_copy_is_refused_as_the_same_content(files, tmp_path):
    """Issue 21: members[0].experience 1 -> 7 composed experiences [0, 1, 7] with two identical members."""
    relabelled = cf.load_component(_craft(files[1], tmp_path / "experience-7.safetensors",
                                          _set(["members", 0, "experience"], 7), rehash=True))
    assert relabelled.experience == 7  # a well-formed file: only the key below tells it from a real one
    with pytest.raises(cf.IncompatibleComponentsError, match="same content"):
        cf.compose_components([cf.load_component(files[0]), cf.load_component(files[1]), relabelled])
    with pytest.raises(cf.IncompatibleComponentsError, match="same content"):
        cf.components_for([files[1], str(tmp_path / "experience-7.safetensors")], TangentModel(
            _same_net(), num_classes=NUM_CLASSES))


def _same_net():
    torch.manual_seed(0)
    return TinyResNet(num_classes=3)


@pytest.mark.parametrize("experience", [1.0, "1", True, None, [1]])
def test_experience_ids_are_integers(files, tmp_path, model, experience):
    """Issue 21: experience ids 1 and 1.0 composed as two experiences, then load_components raised KeyError."""
    crafted = _craft(files[1], tmp_path / "float.safetensors", _set(["members", 0, "experience"], experience),
                     rehash=True)
    with pytest.raises(cf.ComponentFileError, match="not an integer"):
        cf.load_component(crafted)
    with pytest.raises(ValueError, match="is an integer"):
        cf.tangent_component(model, random_delta(model), experience)


def test_a_tensor_of_another_shape_is_refused_even_with_recomputed_hashes(files, tmp_path, model):
    """Issue 21: a (1, 64) tensor where the base has (16, 64), its hash recomputed, loaded and was broadcast."""
    _, tensors = _parts(files[0])
    name = "fc.weight"
    assert tuple(tensors[name].shape) == (NUM_CLASSES, 4)
    tensors[name] = tensors[name][:1].clone()
    with pytest.raises(cf.ComponentFileError, match="shape or dtype of its base"):
        cf.load_component(_craft(files[0], tmp_path / "narrow.safetensors", tensors=tensors, rehash=True))
    _, tensors = _parts(files[0])
    tensors = {n: t.double() for n, t in tensors.items()}
    with pytest.raises(cf.ComponentFileError, match="shape or dtype of its base"):
        cf.load_component(_craft(files[0], tmp_path / "double.safetensors", tensors=tensors, rehash=True))


def test_forget_refuses_a_copy_with_another_weight(files, tmp_path):
    """Issue 21: a copy with weight 2.0 was accepted by forget (result: weight 0, δ = 0)."""
    heavier = cf.load_component(_craft(files[1], tmp_path / "heavy.safetensors", lambda m: (
        m.update(weight=2.0), m["members"][0].update(weight=2.0)), rehash=True))
    composition = cf.load_component(files["composed"])
    with pytest.raises(cf.IncompatibleComponentsError, match="weight"):
        cf.forget_component(composition, heavier)
    rest = cf.forget_component(composition, cf.load_component(files[1]))
    assert rest.experiences == [0] and rest.weight == 1.0


def test_a_file_of_format_1_is_refused(files, tmp_path):
    crafted = _craft(files[0], tmp_path / "v1.safetensors", lambda m: (m.update(format_version="1"),
                                                                        m.pop("file_sha256")))
    with pytest.raises(cf.ComponentFileError, match="format version 1"):
        cf.load_component(crafted)


# ---------------------------------------------------------------------------- 2. writes


def _write_once(path, barrier, results, model_state):
    torch.manual_seed(0)
    model = TangentModel(TinyResNet(num_classes=3), num_classes=NUM_CLASSES)
    component = cf.tangent_component(model, random_delta(model), 0)
    barrier.wait()
    try:
        cf.save_component(component, path, overwrite=False)
        results.put("won")
    except cf.ComponentExistsError:
        results.put("exists")


def test_of_two_concurrent_exclusive_writers_exactly_one_wins(tmp_path):
    """Issue 21: two `compose` without --overwrite writing the same --out both succeeded (10 of 10 tries)."""
    context = multiprocessing.get_context("fork")
    for attempt in range(10):
        path = str(tmp_path / f"out-{attempt}.safetensors")
        barrier, results = context.Barrier(2), context.Queue()
        workers = [context.Process(target=_write_once, args=(path, barrier, results, None)) for _ in range(2)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(60)
        assert sorted(results.get(timeout=5) for _ in workers) == ["exists", "won"], attempt
        cf.load_component(path)
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]


def test_an_existing_output_is_kept_and_temporaries_of_dead_writers_are_removed(files, tmp_path, model):
    """Issue 21: a SIGKILLed compose sometimes left a partial .tmp."""
    before = open(files[0], "rb").read()
    with pytest.raises(cf.ComponentExistsError, match="exists"):
        cf.save_component(cf.load_component(files[1]), files[0], overwrite=False)
    assert open(files[0], "rb").read() == before
    dead = subprocess.Popen(["true"])
    dead.wait()
    host = socket.gethostname()
    stale = tmp_path / f".experience-0.safetensors.{host}.{dead.pid}.abcd.tmp"
    alive = tmp_path / f".experience-0.safetensors.{host}.{os.getppid()}.abcd.tmp"  # a writer still running
    stale.write_bytes(b"partial")
    alive.write_bytes(b"partial")
    cf.save_component(cf.load_component(files[0]), files[0])
    assert not stale.exists() and alive.exists()
    assert [c.experience for c in cf.load_components(str(tmp_path))] == [0, 1, None]


# ---------------------------------------------------------------------------- 3. reads


class _Alarm:
    def __enter__(self):
        signal.signal(signal.SIGALRM, lambda *_: (_ for _ in ()).throw(TimeoutError("the read blocked")))
        signal.alarm(10)

    def __exit__(self, *exc):
        signal.alarm(0)


def test_only_regular_files_are_read(tmp_path):
    """Issue 21: a FIFO hung load_components; a symlink to /dev/zero read until memory ran out."""
    fifo = tmp_path / "experience-0.safetensors"
    os.mkfifo(fifo)
    zero = tmp_path / "experience-1.safetensors"
    zero.symlink_to("/dev/zero")
    with _Alarm():
        for path in (fifo, zero, tmp_path):
            with pytest.raises(cf.ComponentFileError, match="not a regular file"):
                cf.load_component(str(path))
        with pytest.raises(cf.ComponentFileError, match="not a regular file"):
            cf.load_components(str(tmp_path))


def test_a_sparse_file_is_refused_before_being_read(files, tmp_path):
    """Issue 21: a sparse 2 GB file was read whole (2.5 GB peak) before being refused."""
    data = open(files[0], "rb").read()
    sparse = tmp_path / "sparse.safetensors"
    with open(sparse, "wb") as f:
        f.write(data)
        f.truncate(2 * 1024 ** 3)
    zeros = tmp_path / "zeros.safetensors"
    with open(zeros, "wb") as f:
        f.truncate(2 * 1024 ** 3)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(cf.ComponentFileError, match="declares .* bytes but the file has"):
        cf.load_component(str(sparse))
    with pytest.raises(cf.ComponentFileError):
        cf.load_component(str(zeros))
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < 200 * 1024  # KiB: nothing near 2 GB


def _header_file(path, header: bytes, body: bytes = b""):
    path.write_bytes(struct.pack("<Q", len(header)) + header + body)
    return str(path)


def test_malformed_files_give_component_file_errors(files, tmp_path):
    """Issue 21: deeply nested JSON, an integer base_linearized, non-integer class keys gave raw
    RecursionError / TypeError / ValueError."""
    nested = b"[" * 200000 + b"]" * 200000
    with pytest.raises(cf.ComponentFileError, match="JSON"):
        cf.load_component(_header_file(tmp_path / "nested.safetensors", nested))
    deep = json.dumps({"__metadata__": {"format": "avalanche-tmc"}}).encode()
    with pytest.raises(cf.ComponentFileError):
        cf.load_component(_header_file(tmp_path / "short.safetensors", deep))
    for edit, why in ((_set(["base", "linearized"], 5), "linearized"),
                      (_set(["members", 0, "classes"], {"a": [1]}), "classes"),
                      (_set(["members", 0, "classes"], {"0": ["x"]}), "classes"),
                      (_set(["members", 0, "classes"], {"\u00b2": [1]}), "classes"),
                      (_set(["format_version"], "\u00b2"), "format_version"),
                      (_set(["members"], "[" * 100000), "members"),
                      (_set(["base", "head_size"], "4"), "head size")):
        crafted = _craft(files[0], tmp_path / "bad.safetensors", edit, rehash=True)
        with pytest.raises(cf.ComponentFileError, match=why):
            cf.load_component(crafted)
    # a tensor entry whose dtype is not a string
    data = open(files[0], "rb").read()
    length = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + length])
    header["fc.weight"]["dtype"] = ["F32"]
    raw = json.dumps(header).encode()
    with pytest.raises(cf.ComponentFileError, match="dtype"):
        cf.load_component(_header_file(tmp_path / "dtype.safetensors", raw, data[8 + length:]))
    # a member list nested beyond the recursion limit, inside a metadata string
    metadata, tensors = _parts(files[0])
    metadata["members"] = "[" * 100000 + "]" * 100000
    metadata["file_sha256"] = cf._metadata_sha256(metadata)
    (tmp_path / "deep.safetensors").write_bytes(save(tensors, metadata=metadata))
    with pytest.raises(cf.ComponentFileError, match="JSON"):
        cf.load_component(str(tmp_path / "deep.safetensors"))


def test_printed_metadata_is_sanitized(files, tmp_path):
    """Issue 21: `inspect` printed raw terminal escape sequences from a file."""
    crafted = _craft(files[0], tmp_path / "escape.safetensors",
                     _set(["settings", "note\x1b]0;owned\x07"], "\x1b[2J\x1b[31mred"), rehash=True)
    text = json.dumps(cf.describe(cf.load_component(crafted)), ensure_ascii=False)
    assert "\x1b" not in text and "\x07" not in text and "\\x1b[31mred" in text


# ---------------------------------------------------------------------------- 4. authenticity


def test_signed_files_need_the_right_key(model, files, tmp_path, monkeypatch):
    component = cf.tangent_component(model, random_delta(model, seed=3), 3)
    signed = cf.save_component(component, str(tmp_path / "signed.safetensors"), key=KEY)
    assert cf.load_component(signed, key=KEY).signed
    assert cf.load_component(signed).signed  # without a key: integrity only
    with pytest.raises(cf.ComponentFileError, match="not signed"):
        cf.load_component(files[0], key=KEY)
    with pytest.raises(cf.ComponentFileError, match="signature does not match"):
        cf.load_component(signed, key=b"another key of 16+ bytes")
    # an attacker who recomputes the hashes cannot recompute the signature
    relabelled = _craft(signed, tmp_path / "relabelled.safetensors", _set(["members", 0, "experience"], 9),
                        rehash=True)
    with pytest.raises(cf.ComponentFileError, match="not signed"):
        cf.load_component(relabelled, key=KEY)
    kept_signature = _craft(signed, tmp_path / "kept.safetensors", _set(["members", 0, "experience"], 9))
    with pytest.raises(cf.ComponentFileError, match="integrity hash"):
        cf.load_component(kept_signature, key=KEY)
    # the key from a file named by the environment, for writing and reading
    key_file = tmp_path / "key"
    key_file.write_bytes(KEY + b"\n")
    monkeypatch.setenv(cf.KEY_ENVIRONMENT, str(key_file))
    assert cf.load_component(signed).signed
    with pytest.raises(cf.ComponentFileError, match="not signed"):
        cf.load_component(files[0])
    again = cf.save_component(component, str(tmp_path / "again.safetensors"))
    monkeypatch.delenv(cf.KEY_ENVIRONMENT)
    assert cf.load_component(again, key=KEY).signed
    key_file.write_bytes(b"short")
    with pytest.raises(cf.ComponentFileError, match="at least 16"):
        cf.read_key_file(str(key_file))


def test_a_strategy_holding_a_key_loads_only_signed_components(files, tmp_path):
    from avalanche_tmc import TMCStrategy

    def fresh():
        return TMCStrategy(model=TangentModel(_same_net(), num_classes=NUM_CLASSES), evaluator=None)

    strategy = fresh()
    with pytest.raises(cf.ComponentFileError, match="not signed"):
        strategy.load_components([files[0], files[1]], key=KEY)
    assert len(strategy.learned()) == 0
    signed = [cf.save_component(cf.load_component(files[e]), str(tmp_path / f"signed-{e}.safetensors"), key=KEY)
              for e in (0, 1)]
    rebuilt = TMCStrategy.from_components(signed, model=TangentModel(_same_net(), num_classes=NUM_CLASSES), key=KEY,
                                          evaluator=None)
    assert rebuilt.learned().keys == [0, 1]


_WRITER = """
import sys, torch
from avalanche_tmc import component_files as cf
tensors = {"x": torch.randn(2_000_000)}
print("ready", flush=True)
while True:
    cf.save_component(cf.Component("composition", "delta", tensors, 0.0, [], {}), sys.argv[1])
"""


def test_temporaries_of_killed_writers_are_removed_by_the_next_write(tmp_path):
    """Issue 21: a SIGKILLed compose sometimes left a partial .tmp behind."""
    path = tmp_path / "out.safetensors"
    left = 0
    for _ in range(3):
        writer = subprocess.Popen([sys.executable, "-c", _WRITER, str(path)], cwd=ROOT, stdout=subprocess.PIPE)
        assert writer.stdout.readline().strip() == b"ready"
        time.sleep(0.5)
        writer.kill()
        writer.wait()
        left += len([n for n in os.listdir(tmp_path) if n.endswith(".tmp")])
    cf.save_component(cf.Component("composition", "delta", {"x": torch.zeros(3)}, 0.0, [], {}), str(path))
    assert [n for n in os.listdir(tmp_path) if n.endswith(".tmp")] == [], left


def test_valid_files_whose_numbers_overflow_do_not_combine(model, tmp_path):
    """Well-formed files can still overflow when combined: refused as not combining (CLI exit 4), not a crash."""
    huge = {n: torch.full_like(t, 3e38) for n, t in random_delta(model).items()}
    a = cf.tangent_component(model, huge, 0)
    b = cf.tangent_component(model, {n: t * 0.999 for n, t in huge.items()}, 1)
    with pytest.raises(cf.IncompatibleComponentsError, match="not finite"):
        cf.compose_components([a, b])
    composition = cf.compose_components([cf.tangent_component(model, random_delta(model), 2)])
    composition.weight = 1e-300  # W of members of tiny weights: δ = S / W overflows
    with pytest.raises(cf.IncompatibleComponentsError, match="not finite"):
        cf.composed_delta(composition)
    heavy = cf.tangent_component(model, random_delta(model, seed=1), 3, weight=1e308)
    with pytest.raises(cf.IncompatibleComponentsError, match="infinite|not finite"):
        cf.compose_components([heavy, cf.tangent_component(model, random_delta(model, seed=2), 4, weight=1e308)])


def test_exclusive_writes_without_hard_links(files, tmp_path, monkeypatch):
    def no_links(*args):
        raise PermissionError("hard links are not supported here")

    monkeypatch.setattr(os, "link", no_links)
    component = cf.load_component(files[0])
    out = str(tmp_path / "out.safetensors")
    cf.save_component(component, out, overwrite=False)
    with pytest.raises(cf.ComponentExistsError):
        cf.save_component(component, out, overwrite=False)
    assert cf.load_component(out).sha256 == component.sha256
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
