"""``python -m benchmarks.tools.authors_speed``: the authors' code imported from a folder (never
copied), their trainable parameters as their trainer thaws them, the stand-in the dry run uses,
and the table's ratios."""

import sys
import textwrap

import pytest
import torch

from avalanche_tmc import TangentModel
from benchmarks.tools import authors_speed
from benchmarks.tools.authors_speed import _thaw_linear, format_table, load_authors_resnet, stand_in_pair


def test_the_stand_in_computes_what_our_tangent_model_computes():
    """Its hand-written tangent (the authors' style) against torch.func.jvp (our generic path):
    logits + jvp at the same δ, the stand-in's linear_* parameters mapped to our δ."""
    theirs, plain = stand_in_pair(classes=5)
    theirs.eval()
    ours = TangentModel(plain, start_at="2", implementation="generic")
    gen = torch.Generator().manual_seed(3)
    names = {"linear_conv": "2.0.weight", "linear_bn_weight": "2.1.weight", "linear_bn_bias": "2.1.bias",
             "linear_fc_weight": "2.5.weight", "linear_fc_bias": "2.5.bias"}
    delta = {}
    with torch.no_grad():
        for mine, our in names.items():
            value = torch.randn(getattr(theirs, mine).shape, generator=gen) * 0.05
            getattr(theirs, mine).copy_(value)
            delta[our] = value
    assert set(delta) == set(ours.delta)
    x = torch.randn(6, 3, 8, 8, generator=gen)
    logits, jvp = theirs(x)
    torch.testing.assert_close(logits + jvp, ours.forward_with(x, delta), rtol=1e-5, atol=1e-5)


def test_their_trainer_thaws_only_the_linear_parameters_of_the_layers_and_head():
    theirs, _ = stand_in_pair()
    _thaw_linear(theirs)
    assert [n for n, p in theirs.named_parameters() if p.requires_grad] == [
        "linear_conv", "linear_bn_weight", "linear_bn_bias", "linear_fc_weight", "linear_fc_bias"]

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = torch.nn.Conv2d(3, 3, 1)
            self.layer1 = torch.nn.Module()
            self.layer1.linear_weight = torch.nn.Parameter(torch.zeros(2))
            self.layer1.weight = torch.nn.Parameter(torch.zeros(2))
            self.fc = torch.nn.Module()
            self.fc.linear_bias = torch.nn.Parameter(torch.zeros(2))

    net = Net()
    trained = _thaw_linear(net)
    assert [n for n, p in net.named_parameters() if p.requires_grad] == ["layer1.linear_weight", "fc.linear_bias"]
    assert len(trained) == 2


def test_their_code_is_imported_from_the_folder_given(tmp_path, monkeypatch):
    """A folder laid out as their repository (models/linear_resnet.py, models/linear_layers.py):
    imported from there, their head put on as their models.py does; a folder without it is named."""
    with pytest.raises(FileNotFoundError, match="models/linear_resnet.py"):
        load_authors_resnet(tmp_path, "resnet18", 4)
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "linear_layers.py").write_text(textwrap.dedent("""
        import torch
        class LinearLinear(torch.nn.Linear):
            pass
    """))
    (tmp_path / "models" / "linear_resnet.py").write_text(textwrap.dedent("""
        import torch
        from models.linear_layers import LinearLinear
        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = torch.nn.Linear(7, 1000)
        def linear_resnet18(pretrained=False):
            assert not pretrained
            return Net()
    """))
    for name in [m for m in sys.modules if m == "models" or m.startswith("models.")]:
        monkeypatch.delitem(sys.modules, name)
    try:
        net = load_authors_resnet(tmp_path, "resnet18", 4)
        assert type(net.fc).__name__ == "LinearLinear" and net.fc.out_features == 4 and net.fc.in_features == 7
        assert str(tmp_path) not in sys.path  # imported, not left on the path
    finally:
        for name in [m for m in sys.modules if m == "models" or m.startswith("models.")]:
            del sys.modules[name]


def test_the_table_gives_multiples_of_plain_and_ours_over_theirs():
    seconds = {"step plain": 0.100, "step theirs": 0.160, "step ours": 0.150,
               "forward plain": 0.020, "forward theirs": 0.080, "forward ours": 0.060}
    text = format_table(seconds, what="x")
    assert "| training step | 100.0 ms | 160.0 ms (1.60x) | 150.0 ms (1.50x) | 0.94 |" in text  # 150/160
    assert "| 20.0 ms | 80.0 ms (4.00x) | 60.0 ms (3.00x) | 0.75 |" in text


def test_the_stand_in_run_times_all_six(tmp_path):
    torch.set_num_threads(1)
    seconds = authors_speed.main(["--stand-in", "--image-size", "8", "--batch", "2", "--classes", "5", "--rounds", "1",
                                  "--save", str(tmp_path / "a.md")])
    assert len(seconds) == 6 and all(v > 0 for v in seconds.values())
    text = (tmp_path / "a.md").read_text()
    assert "not the authors' code" in text and text.startswith("<!-- written by: python -m benchmarks.tools.")
