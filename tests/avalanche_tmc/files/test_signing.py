"""Integrity and authenticity (issue 21): one hash over metadata and tensors, optional HMAC
signatures with a shared key."""


import warnings

import pytest

import avalanche_tmc.files as cf
from avalanche_tmc import TangentModel, TMCStrategy
from tests.avalanche_tmc.files.common import KEY, craft, same_net, set_entry
from tests.helpers import NUM_CLASSES, random_delta


@pytest.mark.parametrize("what, edit", [
    ("weight 1 -> 1000", set_entry(["weight"], 1000.0)),
    ("member weight", set_entry(["members", 0, "weight"], 2.0)),
    ("experience relabelled", set_entry(["members", 0, "experience"], 7)),
    ("settings", set_entry(["settings", "lr"], 1.0)),
    ("base dtype", set_entry(["base", "dtype"], "float64")),
])
def test_edited_metadata_is_refused(files, tmp_path, what, edit):
    """Issue 21: editing `weight` from 1.0 to 1000.0, tensors untouched, was accepted."""
    crafted = craft(files[0], tmp_path / "edited.safetensors", edit)
    with pytest.raises(cf.ComponentFileError, match="integrity hash"):
        cf.load_component(crafted)


def test_edited_composition_weight_and_members_are_refused(files, tmp_path):
    """Issue 21: editing a composition's W from 2 to 1 doubled δ; relabelling a member composed [0, 1, 7]."""
    for edit in (set_entry(["weight"], 1.0), set_entry(["members", 0, "experience"], 7)):
        with pytest.raises(cf.ComponentFileError, match="integrity hash"):
            cf.load_component(craft(files["composed"], tmp_path / "w.safetensors", edit))
    # with the hash recomputed, W must still be the sum of the members' weights
    with pytest.raises(cf.ComponentFileError, match="not the sum of"):
        cf.load_component(craft(files["composed"], tmp_path / "w.safetensors", set_entry(["weight"], 1.0), rehash=True))


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
    relabelled = craft(signed, tmp_path / "relabelled.safetensors", set_entry(["members", 0, "experience"], 9),
                        rehash=True)
    with pytest.raises(cf.ComponentFileError, match="not signed"):
        cf.load_component(relabelled, key=KEY)
    kept_signature = craft(signed, tmp_path / "kept.safetensors", set_entry(["members", 0, "experience"], 9))
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

    def fresh():
        return TMCStrategy(model=TangentModel(same_net(), num_classes=NUM_CLASSES), evaluator=None)

    strategy = fresh()
    with pytest.raises(cf.ComponentFileError, match="not signed"):
        strategy.load_components([files[0], files[1]], key=KEY)
    assert len(strategy.learned()) == 0
    signed = [cf.save_component(cf.load_component(files[e]), str(tmp_path / f"signed-{e}.safetensors"), key=KEY)
              for e in (0, 1)]
    rebuilt = TMCStrategy.from_components(signed, model=TangentModel(same_net(), num_classes=NUM_CLASSES), key=KEY,
                                          evaluator=None)
    assert rebuilt.learned().keys == [0, 1]


def test_an_oversize_key_file_is_refused_not_cut(model, tmp_path):
    """Issue 30, case 21: a key file over 64 KiB was read truncated, so files signed with the whole key
    failed as "signed with another key"."""
    long_key = bytes(range(256)) * 300  # 75 KiB
    signed = cf.save_component(cf.tangent_component(model, random_delta(model), 0), str(tmp_path / "s.safetensors"),
                               key=long_key)
    key_file = tmp_path / "long.key"
    key_file.write_bytes(long_key)
    key_file.chmod(0o600)
    with pytest.raises(cf.ComponentFileError, match="larger than 64 KiB"):
        cf.read_key_file(str(key_file))
    key_file.write_bytes(long_key[:1 << 16] + b"\n")  # 64 KiB and a newline: the largest key
    key_file.chmod(0o600)
    assert cf.read_key_file(str(key_file)) == long_key[:1 << 16]
    assert cf.load_component(signed, key=long_key).verified


def test_a_key_file_others_can_read_is_warned_about_once(tmp_path):
    """Issue 30, case 22: a world-readable key file was accepted without a word."""
    key_file = tmp_path / "shared.key"
    key_file.write_bytes(KEY)
    key_file.chmod(0o644)
    with pytest.warns(UserWarning, match="chmod 600"):
        assert cf.read_key_file(str(key_file)) == KEY
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cf.read_key_file(str(key_file))  # once per file
        private = tmp_path / "private.key"
        private.write_bytes(KEY)
        private.chmod(0o600)
        cf.read_key_file(str(private))


@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
def test_a_key_file_that_is_not_a_regular_file_is_refused_without_blocking(tmp_path, monkeypatch, kind):
    """Issue 42, class 4: a FIFO given as a key file (--key-file, $AVALANCHE_TMC_KEY_FILE)
    blocked for ever; like a component file, only a regular file is read."""
    import os
    import threading

    path = {"fifo": str(tmp_path / "key.fifo"), "directory": str(tmp_path), "device": "/dev/null"}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    monkeypatch.setenv(cf.KEY_ENVIRONMENT, path)
    outcome = []

    def read():
        try:
            cf.resolve_key()
        except cf.ComponentFileError as error:
            outcome.append(str(error))

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    thread.join(10)
    if thread.is_alive():  # blocked in open(): let it go before failing
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(10)
        pytest.fail(f"reading a {kind} as a key file blocked")
    assert outcome and "not a regular file" in outcome[0] and "key file" in outcome[0]
