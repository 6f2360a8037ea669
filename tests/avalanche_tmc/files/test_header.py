"""A file's header, checked before any tensor is read: truncated, hostile, malformed and
sparse files, tensors of another shape, experience ids that are not integers, old formats."""

import json
import os
import pickle
import resource
import struct

import pytest
import torch
from safetensors.torch import save, save_file

import avalanche_tmc.files as cf
from avalanche_tmc.files.signing import metadata_sha256
from tests.avalanche_tmc.files.common import component_bytes, craft, parts, set_entry
from tests.helpers import NUM_CLASSES, random_delta


@pytest.mark.parametrize("keep", [0, 5, 8, 40, 200, -1000, -1])
def test_a_truncated_file_is_refused(trained, tmp_path, keep):
    data = component_bytes(trained[1])
    path = tmp_path / "truncated.safetensors"
    path.write_bytes(data[:keep])
    with pytest.raises(cf.ComponentFileError, match="truncated.safetensors"):
        cf.load_component(str(path))


class _Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_hostile_and_foreign_files_are_refused_without_running_code(trained, tmp_path):
    marker = tmp_path / "code-ran"
    hostile = [pickle.dumps(_Payload(marker)), b"\x80\x04" + pickle.dumps(_Payload(marker)),
               struct.pack("<Q", 2 ** 60) + b"{}", os.urandom(4096)]
    torch_file = tmp_path / "torch.pt"
    torch.save({"delta": _Payload(marker)}, torch_file)
    hostile.append(torch_file.read_bytes())
    for i, data in enumerate(hostile):
        path = tmp_path / f"hostile{i}.safetensors"
        path.write_bytes(data)
        with pytest.raises(cf.ComponentFileError):
            cf.load_component(str(path))
    plain = tmp_path / "plain.safetensors"
    save_file({"x": torch.zeros(2)}, str(plain))  # safetensors, but not ours
    with pytest.raises(cf.ComponentFileError, match="no metadata"):
        cf.load_component(str(plain))
    assert not marker.exists()


@pytest.mark.parametrize("experience", [1.0, "1", True, None, [1]])
def test_experience_ids_are_integers(files, tmp_path, model, experience):
    """Issue 21: experience ids 1 and 1.0 composed as two experiences, then load_components raised KeyError."""
    crafted = craft(files[1], tmp_path / "float.safetensors", set_entry(["members", 0, "experience"], experience),
                     rehash=True)
    with pytest.raises(cf.ComponentFileError, match="not an integer"):
        cf.load_component(crafted)
    with pytest.raises(ValueError, match="is an integer"):
        cf.tangent_component(model, random_delta(model), experience)


def test_a_tensor_of_another_shape_is_refused_even_with_recomputed_hashes(files, tmp_path, model):
    """Issue 21: a (1, 64) tensor where the base has (16, 64), its hash recomputed, loaded and was broadcast."""
    _, tensors = parts(files[0])
    name = "fc.weight"
    assert tuple(tensors[name].shape) == (NUM_CLASSES, 4)
    tensors[name] = tensors[name][:1].clone()
    with pytest.raises(cf.ComponentFileError, match="shape or dtype of its base"):
        cf.load_component(craft(files[0], tmp_path / "narrow.safetensors", tensors=tensors, rehash=True))
    _, tensors = parts(files[0])
    tensors = {n: t.double() for n, t in tensors.items()}
    with pytest.raises(cf.ComponentFileError, match="shape or dtype of its base"):
        cf.load_component(craft(files[0], tmp_path / "double.safetensors", tensors=tensors, rehash=True))


def test_a_file_of_format_1_is_refused(files, tmp_path):
    crafted = craft(files[0], tmp_path / "v1.safetensors", lambda m: (m.update(format_version="1"),
                                                                        m.pop("file_sha256")))
    with pytest.raises(cf.ComponentFileError, match="format version 1"):
        cf.load_component(crafted)


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
    for edit, why in ((set_entry(["base", "linearized"], 5), "linearized"),
                      (set_entry(["members", 0, "classes"], {"a": [1]}), "classes"),
                      (set_entry(["members", 0, "classes"], {"0": ["x"]}), "classes"),
                      (set_entry(["members", 0, "classes"], {"\u00b2": [1]}), "classes"),
                      (set_entry(["format_version"], "\u00b2"), "format_version"),
                      (set_entry(["members"], "[" * 100000), "members"),
                      (set_entry(["base", "head_size"], "4"), "head size")):
        crafted = craft(files[0], tmp_path / "bad.safetensors", edit, rehash=True)
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
    metadata, tensors = parts(files[0])
    metadata["members"] = "[" * 100000 + "]" * 100000
    metadata["file_sha256"] = metadata_sha256(metadata)
    (tmp_path / "deep.safetensors").write_bytes(save(tensors, metadata=metadata))
    with pytest.raises(cf.ComponentFileError, match="JSON"):
        cf.load_component(str(tmp_path / "deep.safetensors"))


@pytest.mark.parametrize("weights", [(1.7e308, 1.7e308), (1e308, 1e308), (1.7976931348623157e308, 1e300)])
def test_member_weights_whose_sum_overflows_are_a_tampered_file(files, tmp_path, weights):
    """Issue 42, A4: finite member weights whose sum overflows (math.fsum's OverflowError, or an inf total)
    ended in an unexpected error: the file is refused as not usable (ComponentFileError, CLI exit 3)."""
    def edit(metadata):
        metadata["members"][0]["weight"], metadata["members"][1]["weight"] = weights
        metadata["weight"] = 1.7e308

    crafted = craft(files["composed"], tmp_path / "overflow.safetensors", edit, rehash=True)
    with pytest.raises(cf.ComponentFileError, match="overflow"):
        cf.load_component(crafted)
    from avalanche_tmc.cli import EXIT_BAD_FILE, main

    assert main(["inspect", crafted]) == EXIT_BAD_FILE


@pytest.mark.parametrize("entry, value", [
    (["members", 0, "weight"], 10 ** 400),  # an integer beyond float's range: math.isfinite raised OverflowError
    (["weight"], 10 ** 400),
    (["members", 0, "classes"], {"0": [10 ** 30]}),  # a class id no head or mask can hold
    (["members", 0, "classes"], {"0": [-1]}),
])
def test_integers_beyond_their_range_are_a_tampered_file(files, tmp_path, entry, value):
    """Issue 42, A4: numbers that overflow once used are refused when the file is read (CLI exit 3)."""
    crafted = craft(files[0], tmp_path / "huge.safetensors", set_entry(entry, value), rehash=True)
    with pytest.raises(cf.ComponentFileError):
        cf.load_component(crafted)
    from avalanche_tmc.cli import EXIT_BAD_FILE, main

    assert main(["inspect", crafted]) == EXIT_BAD_FILE
