"""Component files on disk: a bit-exact round trip, the content hash, files written before
the package split read and composed as they were."""

import hashlib
import json
import os
import struct
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

import avalanche_tmc.files as cf
from tests.avalanche_tmc.files.common import component_bytes, equal


def test_round_trip_is_bit_exact(trained, bm, tmp_path):
    strategy, directory = trained
    for component in cf.strategy_components(strategy):
        path = cf.save_component(component, str(tmp_path / "c.safetensors"))
        loaded = cf.load_component(path)
        assert equal(loaded.tensors, component.tensors)
        assert all(loaded.tensors[n].dtype == component.tensors[n].dtype for n in component.tensors)
        assert (loaded.kind, loaded.payload, loaded.weight, loaded.members, loaded.base, loaded.settings) == (
            component.kind, component.payload, component.weight, component.members, component.base,
            component.settings)
        assert loaded.weight == len(bm.train_stream[component.experience].dataset)  # samples weighting
    # the files the strategy wrote hold exactly its components and weights
    files = cf.load_components(directory)
    assert [c.experience for c in files] == [0, 1, 2, 3]
    for c in files:
        assert equal(c.tensors, strategy.components[c.experience])
        assert c.weight == strategy.tangent_plugin.composition.weights[c.experience]


def test_the_same_component_gives_the_same_bytes_every_time(trained, tmp_path):
    """safetensors writes metadata in hash-map order, different from one save to the next;
    files that silos compare by SHA-256 must not differ for that."""
    component = cf.strategy_components(trained[0])[0]
    files = [Path(cf.save_component(component, str(tmp_path / f"{i}.safetensors"))).read_bytes() for i in range(6)]
    assert all(f == files[0] for f in files)
    size = struct.unpack("<Q", files[0][:8])[0]
    metadata = json.loads(files[0][8:8 + size])["__metadata__"]
    assert list(metadata) == sorted(metadata)
    assert equal(cf.load_component(str(tmp_path / "0.safetensors")).tensors, component.tensors)


def test_an_edited_file_is_refused(trained, tmp_path):
    data = bytearray(component_bytes(trained[1]))
    header_end = 8 + struct.unpack("<Q", bytes(data[:8]))[0]
    edited = bytearray(data)
    edited[header_end + 100] ^= 0xFF  # one tensor byte
    (tmp_path / "edited.safetensors").write_bytes(bytes(edited))
    with pytest.raises(cf.ComponentFileError, match="content hash"):
        cf.load_component(str(tmp_path / "edited.safetensors"))
    header = bytes(data[8:header_end])
    for old, new, why in ((b'"format_version":"3"', b'"format_version":"9"', "version 9"),
                          (b'"kind":"component"', b'"kind":"evil_code"', "unknown kind")):
        assert old in header, old
        changed = header.replace(old, new)
        (tmp_path / "meta.safetensors").write_bytes(struct.pack("<Q", len(changed)) + changed + data[header_end:])
        with pytest.raises(cf.ComponentFileError, match=why):
            cf.load_component(str(tmp_path / "meta.safetensors"))
    component = cf.load_component(os.path.join(trained[1], "experience-0.safetensors"))
    nan = cf.tangent_component(trained[0].model, {n: t * float("nan") for n, t in component.tensors.items()}, 0)
    with pytest.raises(ValueError, match="NaN"):
        cf.save_component(nan, str(tmp_path / "nan.safetensors"))
    with pytest.raises(cf.ComponentFileError, match="cannot be read"):
        cf.load_component(str(tmp_path / "missing.safetensors"))


DATA = Path(__file__).parent / "data" / "v3"
OLD = Path(__file__).parent / "data" / "v2"


def _tiny_net(state):
    """The network of ``data/make_fixture.py``, with the weights it recorded."""
    net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2))
    net.load_state_dict(state)
    return net.eval()


def _header_and_data(path):
    """(header as JSON, tensor bytes) of a safetensors file: what it holds, whatever order
    safetensors wrote the metadata entries in (it varies from process to process)."""
    data = Path(path).read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + length]), data[8 + length:]


def test_files_of_format_3_read_and_compose_as_they_did(tmp_path):
    """Files of format version 3 (``data/make_fixture.py``, kept in ``data/v3``): the same
    tensors, the same header and tensor bytes when written again (hashes and signature
    included), the same sums, and the same bases from the same networks."""
    from avalanche_tmc import LayerFeatures, TangentModel, TrainingFreeClassifier

    summary = json.loads((DATA / "expected.json").read_text())
    key = summary.pop("key").encode()
    expected = load_file(str(DATA / "expected.safetensors"))

    def part(prefix):
        return {n[len(prefix):]: t for n, t in expected.items() if n.startswith(prefix)}

    files = {}
    for name, recorded in summary.items():
        signing = key if name.startswith("signed") else None
        component = cf.load_component(str(DATA / name), key=signing)
        assert component.sha256 == recorded["content_sha256"]
        assert (component.weight, component.members, component.base, component.settings) == (
            recorded["weight"], recorded["members"], recorded["base"], recorded["settings"])
        assert component.signed == (signing is not None)
        assert hashlib.sha256((DATA / name).read_bytes()).hexdigest() == recorded["file_sha256"]  # the file as written
        again = cf.save_component(component, str(tmp_path / name), key=signing)
        assert _header_and_data(again) == _header_and_data(DATA / name)
        files[name] = component
    for experience, name in enumerate(["experience-0", "experience-1", "signed-experience-2"]):
        assert equal(files[f"{name}.safetensors"].tensors, part(f"delta/{experience}/"))
    assert equal(files["statistics-experience-3.safetensors"].tensors, part("statistics/3/"))
    composition = cf.compose_components([files["experience-0.safetensors"], files["experience-1.safetensors"]])
    assert equal(composition.tensors, part("composition/sum/"))
    assert equal(files["composition.safetensors"].tensors, part("composition/sum/"))
    assert equal(cf.composed_delta(files["composition.safetensors"]), part("composition/delta/"))
    rest = cf.forget_component(files["composition.safetensors"], files["experience-1.safetensors"])
    assert rest.experiences == [0] and rest.weight == 1.0
    for name, value in part("delta/0/").items():
        assert torch.allclose(cf.composed_delta(rest)[name], value, rtol=1e-5, atol=1e-6)
    # the same networks today have the same bases (module classes named by their registered names)
    state = part("net/")
    assert cf.tangent_base(TangentModel(_tiny_net(state))) == summary["experience-0.safetensors"]["base"]
    head = TrainingFreeClassifier(LayerFeatures(_tiny_net(state), "1"), 2)
    assert cf.statistics_base(head) == summary["statistics-experience-3.safetensors"]["base"]
    assert summary["statistics-experience-3.safetensors"]["base"]["architecture"] == "avalanche-tmc:LayerFeatures"


@pytest.mark.parametrize("name", sorted(p.name for p in OLD.glob("*.safetensors") if p.name != "expected.safetensors"))
def test_files_of_format_2_are_refused_saying_what_to_do(name):
    """Files of format version 2 (written at commit c0a4796, by ``data/make_fixture.py`` as of 73cedf0)
    named their network's classes by module paths that have since moved
    (``avalanche_tmc.analytic.LayerFeatures``): their base cannot be checked, so they are
    refused, and the message says to write them again with this version."""
    with pytest.raises(cf.ComponentFileError) as refused:
        cf.load_component(str(OLD / name), key=b"fixture-key-0123456789abcdef" if name.startswith("signed") else None)
    message = str(refused.value)
    assert message.startswith(f"{OLD / name}: not a usable avalanche-tmc component file: it is format version 2")
    assert f"reads format version {cf.FORMAT_VERSION}" in message and cf.FORMAT_VERSION == 3
    assert "train its experience again" in message and message.endswith("Nothing was loaded.")
