"""reestimate_batchnorm against statistics computed by hand, and its effect on TMC (on the
tests' ``device``)."""

import copy

import pytest
import torch
from torch import nn

from avalanche_tmc import DeltaComposition, TangentModel, reestimate_batchnorm
from tests.helpers import TinyResNet, random_delta, randomize_batchnorm, to_device


def test_statistics_are_the_average_of_the_batch_statistics_and_nothing_else_changes(device):
    torch.manual_seed(0)
    net = randomize_batchnorm(TinyResNet()).eval().to(device)
    before = copy.deepcopy(net.state_dict())
    batches = [(torch.randn(8, 1, 8, 8) * 2 + 1).to(device) for _ in range(3)]
    # by hand: the stem's BatchNorm sees the stem convolution's output
    conv = net.stem[0]
    with torch.no_grad():
        outs = [conv(b) for b in batches]
    mean = torch.stack([o.mean((0, 2, 3)) for o in outs]).mean(0)
    var = torch.stack([o.var((0, 2, 3), unbiased=True) for o in outs]).mean(0)
    reestimate_batchnorm(net, batches)
    torch.testing.assert_close(net.stem[1].running_mean, mean)
    torch.testing.assert_close(net.stem[1].running_var, var)
    after = net.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all(k.endswith(("running_mean", "running_var", "num_batches_tracked")) for k in changed)
    assert not net.training and not net.stem[1].training  # modes and momentum restored
    assert net.stem[1].momentum == 0.1


def test_deterministic_and_accepts_dataloader_batches(device):
    torch.manual_seed(1)
    data = torch.utils.data.TensorDataset(torch.randn(20, 1, 8, 8), torch.randint(0, 3, (20,)))
    loader = torch.utils.data.DataLoader(data, batch_size=5)  # CPU batches: moved to the model's device
    torch.manual_seed(5)
    net = randomize_batchnorm(TinyResNet()).to(device)
    a = reestimate_batchnorm(copy.deepcopy(net), loader)
    b = reestimate_batchnorm(copy.deepcopy(net), loader)
    for (k, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(x, y), k
    one = reestimate_batchnorm(copy.deepcopy(net), loader, max_batches=1)
    assert int(one.stem[1].num_batches_tracked) == 1


def test_composition_and_forgetting_stay_exact_around_the_new_base_point(device):
    torch.manual_seed(2)
    net = randomize_batchnorm(TinyResNet()).to(device)
    net = reestimate_batchnorm(net, [torch.randn(16, 1, 8, 8).to(device)])
    tm = TangentModel(net).double()
    comp = DeltaComposition()
    deltas = [to_device(random_delta(tm, 0.1, seed), device) for seed in range(3)]
    for i, d in enumerate(deltas):
        comp.add(i, d)
    x = torch.randn(4, 1, 8, 8, dtype=torch.float64).to(device)
    with torch.no_grad():
        composed = tm.forward_with(x, comp.composed())
        members = torch.stack([tm.forward_with(x, d) for d in deltas]).mean(0)
        torch.testing.assert_close(composed, members)  # linear in δ: the mean of the outputs
        comp.forget(1)
        two = torch.stack([tm.forward_with(x, deltas[i]) for i in (0, 2)]).mean(0)
        torch.testing.assert_close(tm.forward_with(x, comp.composed()), two)


def test_fingerprint_records_the_new_statistics():
    torch.manual_seed(3)
    net = randomize_batchnorm(TinyResNet())
    old = TangentModel(copy.deepcopy(net)).base_fingerprint()
    new = TangentModel(reestimate_batchnorm(net, [torch.randn(8, 1, 8, 8)])).base_fingerprint()
    assert old != new


def test_bad_input_is_refused_and_leaves_the_model_as_it_was():
    net = randomize_batchnorm(TinyResNet())
    before = copy.deepcopy(net.state_dict())
    with pytest.raises(ValueError, match="no batch"):
        reestimate_batchnorm(net, [])
    with pytest.raises(TypeError, match="batches of inputs"):
        reestimate_batchnorm(net, [{"x": 1}])
    with pytest.raises(ValueError, match="no BatchNorm"):
        reestimate_batchnorm(nn.Linear(2, 2), [torch.randn(2, 2)])
    for k, v in before.items():
        assert torch.equal(v, net.state_dict()[k]), k
