"""The component record: what it reports of its members, its content hash, and what ``inspect`` prints."""

import hashlib
import json
from collections import OrderedDict

import torch

import avalanche_tmc.files as cf
from tests.avalanche_tmc.files.common import craft, set_entry
from tests.helpers import random_delta, to_device


def test_printed_metadata_is_sanitized(files, tmp_path):
    """Issue 21: `inspect` printed raw terminal escape sequences from a file."""
    crafted = craft(files[0], tmp_path / "escape.safetensors",
                     set_entry(["settings", "note\x1b]0;owned\x07"], "\x1b[2J\x1b[31mred"), rehash=True)
    text = json.dumps(cf.describe(cf.load_component(crafted)), ensure_ascii=False)
    assert "\x1b" not in text and "\x07" not in text and "\\x1b[31mred" in text


def _sha256_by_hand(tensors) -> str:
    """SHA-256 over the tensors in name order: ``name:shape:dtype`` then the raw bytes of each."""
    digest = hashlib.sha256()
    for name in sorted(tensors):
        tensor = tensors[name].contiguous()
        digest.update(f"{name}:{tuple(tensor.shape)}:{tensor.dtype}".encode())
        digest.update(tensor.view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def test_a_record_reports_its_members_classes_and_content_hash():
    tensors = OrderedDict(b=torch.arange(3, dtype=torch.float32), a=torch.ones(2, 2, dtype=torch.float64))
    members = [dict(experience=4, weight=1.0, classes={"0": [3, 1]}, sha256="0" * 64),
               dict(experience=2, weight=2.0, classes={"0": [1, 2], "1": [7]}, sha256="1" * 64)]
    composition = cf.Component("composition", "delta", tensors, 3.0, members, {})
    assert composition.experience is None and composition.experiences == [4, 2]
    assert composition.classes == {0: [1, 2, 3], 1: [7]}
    assert composition.sha256 == cf.content_sha256(tensors) == _sha256_by_hand(tensors)
    assert composition.name() == "composition"
    info = cf.describe(composition)
    assert (info["tensors"], info["values"], info["bytes"]) == (2, 3 + 4, 3 * 4 + 4 * 8)
    assert (info["experiences"], info["classes"], info["signed"]) == ([4, 2], {"0": [1, 2, 3], "1": [7]}, False)
    assert info["signature"] == "absent"  # issue 30, case 8: and "present, not verified" when read without a key
    assert cf.describe(cf.Component("composition", "delta", tensors, 3.0, members, {}, signed=True))[
        "signature"] == "present, not verified"


def test_a_component_of_one_experience_names_itself_and_hashes_its_tensors(model, device):
    component = cf.tangent_component(model, to_device(random_delta(model), device), 5, weight=2.0, classes={0: [3, 1]})
    assert {t.device.type for t in component.tensors.values()} == {"cpu"}  # a file's tensors, wherever δ was
    assert component.experience == 5 and component.name() == "component of experience 5"
    assert component.members == [dict(experience=5, weight=2.0, classes={"0": [1, 3]},
                                      sha256=_sha256_by_hand(component.tensors))]
