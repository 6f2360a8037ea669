"""The offline EfficientNet-Lite0 from the library's factories (issue 52, item 9): the same
network and logits as the runner's default backbone (itself checked against the wheel's own
implementation in tests/benchmarks), a seeded new head, and what a missing file says."""

import pytest
import torch

from avalanche_tmc.factories import LITE0_MEAN_STD, WeightsNotFoundError, efficientnet_lite0
from benchmarks.networks.backbones import efficientnet_lite0 as runner_lite0


def test_the_library_lite0_is_the_runner_s_backbone():
    x = torch.randn(2, 3, 64, 64)
    ours, runners = efficientnet_lite0(num_classes=None).eval(), runner_lite0().eval()
    with torch.no_grad():
        assert torch.equal(ours(x), runners(x))
    assert LITE0_MEAN_STD == ((0.5,) * 3, (0.5,) * 3)


def test_a_new_head_is_seeded_and_the_trunk_keeps_its_weights():
    a, b, c = (efficientnet_lite0(num_classes=7, seed=s) for s in (0, 0, 1))
    assert a.classifier.out_features == 7
    assert torch.equal(a.classifier.weight, b.classifier.weight)
    assert not torch.equal(a.classifier.weight, c.classifier.weight)
    assert torch.equal(a.conv_stem.weight, c.conv_stem.weight)  # ImageNet's, whatever the seed
    random = efficientnet_lite0(weights=None, num_classes=7)
    assert not torch.equal(random.conv_stem.weight, a.conv_stem.weight)
    assert torch.equal(random.conv_stem.weight, efficientnet_lite0(weights=None, num_classes=7).conv_stem.weight)


def test_a_missing_weights_file_says_so(tmp_path):
    with pytest.raises((WeightsNotFoundError, FileNotFoundError), match="missing.pth"):
        efficientnet_lite0(weights=tmp_path / "missing.pth")
