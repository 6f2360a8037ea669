"""Bases: what a component belongs to, its hashes against independent computations, and
components of another base refused naming the difference."""

import hashlib
import os

import pytest
import torch
from torch import nn

import avalanche_tmc.files as cf
from avalanche_tmc import TangentModel
from tests.avalanche_tmc.files.common import base_net, tmc
from tests.helpers import NUM_CLASSES, TinyTransformer


@pytest.mark.parametrize("change, named", [
    ("weights", "pre-trained weights or BatchNorm statistics"),
    ("batchnorm", "pre-trained weights or BatchNorm statistics"),
    ("head size", "head size"),
    ("linearized", "linearized parameters"),
    ("architecture", "network class"),
])
def test_components_of_another_base_are_refused_naming_the_difference(trained, change, named, tmp_path):
    strategy, directory = trained
    net, num_classes, linearize = base_net(), NUM_CLASSES, "all"
    if change == "weights":
        with torch.no_grad():
            net.stem[0].weight[0, 0, 0, 0] += 1e-3
    elif change == "batchnorm":
        net.block[1].running_var[0] += 1e-3
    elif change == "head size":
        num_classes = NUM_CLASSES + 1
    elif change == "linearized":
        linearize = "head"
    else:
        torch.manual_seed(0)
        net = TinyTransformer(num_classes=3)
    other = TangentModel(net, num_classes=num_classes, linearize=linearize)
    foreign = cf.tangent_component(other, other.delta, 7)
    with pytest.raises(cf.IncompatibleComponentsError, match=named):
        cf.compose_components([cf.load_component(os.path.join(directory, "experience-0.safetensors")), foreign])
    cf.save_component(foreign, str(tmp_path / "experience-7.safetensors"))
    fresh = tmc()
    with pytest.raises(cf.IncompatibleComponentsError, match=named):
        fresh.load_components(str(tmp_path))
    assert len(fresh.tangent_plugin.composition) == 0


def _tiny():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))
    net[1].running_mean.fill_(0.5)
    return net


def test_the_weights_hash_covers_parameters_and_buffers_as_computed_by_hand():
    net = _tiny()
    state = net.state_dict()
    digest = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name].contiguous()
        digest.update(f"{name}:{tuple(tensor.shape)}:{tensor.dtype}".encode())
        digest.update(tensor.view(-1).view(torch.uint8).numpy().tobytes())
    assert cf.weights_sha256(net) == cf.state_dict_sha256(state) == digest.hexdigest()
    net[1].running_var[0] += 1e-3  # BatchNorm statistics are part of the base
    assert cf.weights_sha256(net) != digest.hexdigest()


def test_the_structure_hash_names_each_module_by_its_registered_name():
    from avalanche_tmc import LayerFeatures

    lines = ["", "0", "1", "2"]
    classes = ["container.Sequential", "linear.Linear", "batchnorm.BatchNorm1d", "linear.Linear"]
    text = "\n".join(f"{n}:torch.nn.modules.{c}" for n, c in zip(lines, classes))
    assert cf.structure(_tiny()) == dict(architecture="torch.nn.modules.container.Sequential",
                                         modules_sha256=hashlib.sha256(text.encode()).hexdigest())
    # a class of this library is named by its registered name, whatever module holds it
    features = LayerFeatures(nn.Sequential(nn.Linear(3, 4), nn.ReLU()), "0")
    text = "\n".join([":avalanche-tmc:LayerFeatures", "model:torch.nn.modules.container.Sequential",
                      "model.0:torch.nn.modules.linear.Linear", "model.1:torch.nn.modules.activation.ReLU"])
    assert cf.structure(features) == dict(architecture="avalanche-tmc:LayerFeatures",
                                          modules_sha256=hashlib.sha256(text.encode()).hexdigest())


def test_a_tangent_base_lists_what_components_must_share():
    net = _tiny()
    model = TangentModel(net)
    base = cf.tangent_base(model)
    assert base == dict(cf.structure(net), weights_sha256=cf.weights_sha256(net), head_size=2, dtype="float32",
                        linearized=[[n, list(p.shape)] for n, p in net.named_parameters()])
    assert cf.model_reference(model).base == base
    cf.check_same_base(cf.model_reference(model), cf.model_reference(TangentModel(_tiny())))
