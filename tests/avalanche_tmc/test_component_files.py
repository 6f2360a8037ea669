"""Components as files: round trip, composition and forgetting against the in-memory
strategies, bases that do not match, and files that are truncated, edited or hostile."""

import os
import pickle
import struct

import pytest
import torch
from safetensors.torch import save_file

from avalanche_tmc import AnalyticClassifier, AnalyticHeadStrategy, TangentModel, TMCSeqStrategy, TMCStrategy
from avalanche_tmc import component_files as cf
from avalanche_tmc.analytic import penultimate
from tests.helpers import (
    NUM_CLASSES,
    TinyResNet,
    TinyTransformer,
    quiet_evaluator,
    randomize_batchnorm,
    small_benchmark,
    tensor_dataset,
)

SEED = 100


def _net(num_classes=3):
    torch.manual_seed(0)
    return randomize_batchnorm(TinyResNet(num_classes=num_classes))


def _tmc(net=None, num_classes=NUM_CLASSES, strategy=TMCStrategy, **kwargs):
    model = TangentModel(net if net is not None else _net(), num_classes=num_classes,
                         linearize=kwargs.pop("linearize", "all"))
    return strategy(model=model, lr=1e-2, train_mb_size=8, train_epochs=1, evaluator=quiet_evaluator(), **kwargs)


def _train(strategy, experiences):
    for exp in experiences:
        torch.manual_seed(SEED + exp.current_experience)  # a component depends on its data and seed only
        strategy.train(exp)
    return strategy


@pytest.fixture(scope="module")
def bm():
    return small_benchmark(n_experiences=4, train=tensor_dataset(48))


@pytest.fixture(scope="module")
def trained(bm, tmp_path_factory):
    """A TMC run that wrote its components as it went (sample weighting: weights ≠ 1)."""
    directory = tmp_path_factory.mktemp("components")
    strategy = _train(_tmc(component_dir=str(directory), weighting="samples"), bm.train_stream)
    return strategy, str(directory)


def _equal(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[n], b[n]) for n in a)


def test_tmc_writes_each_component_as_it_is_composed(bm, tmp_path):
    strategy = _tmc(component_dir=str(tmp_path))
    _train(strategy, bm.train_stream[:1])
    assert os.listdir(tmp_path) == ["experience-0.safetensors"]
    component = cf.load_component(str(tmp_path / "experience-0.safetensors"))
    assert _equal(component.tensors, strategy.components[0])
    assert component.experience == 0 and component.weight == 1.0
    assert component.classes == {0: sorted(bm.train_stream[0].classes_in_this_experience)}
    assert component.settings["lr"] == 1e-2 and component.settings["mode"] == "tmc"
    with pytest.raises(ValueError, match="TMC-Seq"):
        _tmc(strategy=TMCSeqStrategy, component_dir=str(tmp_path))


def test_round_trip_is_bit_exact(trained, bm, tmp_path):
    strategy, directory = trained
    for component in cf.strategy_components(strategy):
        path = cf.save_component(component, str(tmp_path / "c.safetensors"))
        loaded = cf.load_component(path)
        assert _equal(loaded.tensors, component.tensors)
        assert all(loaded.tensors[n].dtype == component.tensors[n].dtype for n in component.tensors)
        assert (loaded.kind, loaded.payload, loaded.weight, loaded.members, loaded.base, loaded.settings) == (
            component.kind, component.payload, component.weight, component.members, component.base,
            component.settings)
        assert loaded.weight == len(bm.train_stream[component.experience].dataset)  # samples weighting
    # the files the strategy wrote hold exactly its components and weights
    files = cf.load_components(directory)
    assert [c.experience for c in files] == [0, 1, 2, 3]
    for c in files:
        assert _equal(c.tensors, strategy.components[c.experience])
        assert c.weight == strategy.tangent_plugin.composition.weights[c.experience]


def test_compose_from_files_equals_the_in_memory_composition(trained):
    strategy, directory = trained
    composition = cf.compose_components(cf.load_components(directory))
    in_memory = strategy.tangent_plugin.composition
    assert _equal(composition.tensors, in_memory._sum)  # bit for bit: the same sum in the same order
    assert composition.weight == in_memory._total_weight
    assert _equal(cf.composed_delta(composition), strategy.composed_delta)
    # a composition file composes further, like its members
    partial = cf.compose_components(cf.load_components(directory)[:2])
    again = cf.compose_components([partial, *cf.load_components(directory)[2:]])
    assert torch.allclose(torch.cat([t.flatten() for t in again.tensors.values()]),
                          torch.cat([t.flatten() for t in composition.tensors.values()]), rtol=1e-6, atol=1e-7)


def test_a_strategy_built_from_files_equals_the_trained_one(trained, bm):
    strategy, directory = trained
    rebuilt = TMCStrategy.from_components(directory, model=TangentModel(_net(), num_classes=NUM_CLASSES), lr=1e-2,
                                          weighting="samples", evaluator=quiet_evaluator())
    assert rebuilt.tangent_plugin.composition.keys == [0, 1, 2, 3]
    assert _equal(rebuilt.composed_delta, strategy.composed_delta)
    assert dict(rebuilt.tangent_plugin.task_classes) == dict(strategy.tangent_plugin.task_classes)
    key = "Top1_Acc_Stream/eval_phase/test_stream/Task000"
    assert rebuilt.eval(bm.test_stream)[key] == strategy.eval(bm.test_stream)[key]
    rebuilt.forget(1)  # and forgets like the original
    strategy_copy = TMCStrategy.from_components(directory, model=TangentModel(_net(), num_classes=NUM_CLASSES),
                                                lr=1e-2, weighting="samples", evaluator=quiet_evaluator())
    strategy_copy.forget(1)
    assert _equal(rebuilt.composed_delta, strategy_copy.composed_delta)
    with pytest.raises(cf.IncompatibleComponentsError, match="already learned"):
        rebuilt.load_components(os.path.join(directory, "experience-0.safetensors"))


def test_forget_from_files_equals_composing_the_rest(trained, bm):
    strategy, directory = trained
    files = cf.load_components(directory)
    composition = cf.compose_components(files)
    forgotten = cf.forget_component(composition, files[1])
    rest = cf.compose_components([files[0], files[2], files[3]])
    assert forgotten.experiences == [0, 2, 3] and forgotten.weight == rest.weight
    for name in rest.tensors:
        assert torch.allclose(forgotten.tensors[name], rest.tensors[name], rtol=1e-5, atol=1e-7)
    # and equals a TMC never trained on experience 1 (each experience seeded by its id)
    never = _train(_tmc(weighting="samples"), [e for e in bm.train_stream if e.current_experience != 1])
    delta = cf.composed_delta(forgotten)
    for name, value in never.composed_delta.items():
        assert torch.allclose(delta[name], value, rtol=1e-5, atol=1e-7)
    # forgetting everything leaves the pre-trained model
    empty = composition
    for f in files:
        empty = cf.forget_component(empty, f)
    assert empty.members == [] and empty.weight == 0 and all(not t.any() for t in cf.composed_delta(empty).values())


def test_forget_refuses_a_file_that_is_not_the_composed_one(trained, tmp_path):
    strategy, directory = trained
    files = cf.load_components(directory)
    composition = cf.compose_components(files[:2])
    with pytest.raises(cf.IncompatibleComponentsError, match="not in"):
        cf.forget_component(composition, files[3])
    impostor = cf.tangent_component(strategy.model, {n: t + 1e-3 for n, t in files[0].tensors.items()}, 0,
                                 weight=files[0].weight)
    with pytest.raises(cf.IncompatibleComponentsError, match="content hash differs"):
        cf.forget_component(composition, impostor)
    with pytest.raises(cf.IncompatibleComponentsError, match="Experience 0 is in both"):
        cf.compose_components([files[0], composition])


def test_statistics_files_compose_and_forget_exactly(bm, tmp_path):
    def head():
        return AnalyticHeadStrategy(model=AnalyticClassifier(penultimate(_net()), NUM_CLASSES, projection_dim=16),
                                    train_mb_size=8, evaluator=quiet_evaluator())

    strategy = _train(head(), bm.train_stream)
    for component in cf.strategy_components(strategy):
        cf.save_component(component, str(tmp_path / f"experience-{component.experience}.safetensors"))
    files = cf.load_components(str(tmp_path))
    assert [f.weight for f in files] == [float(strategy.components[k]["count"]) for k in range(4)]
    composition = cf.compose_components(files)
    assert _equal(composition.tensors, strategy.statistics.summed())  # bit for bit
    rebuilt = head()
    rebuilt.load_components(str(tmp_path))
    assert torch.equal(rebuilt.model.weight, strategy.model.weight)
    forgotten = cf.forget_component(composition, files[2])
    strategy.forget(2)
    for key, value in strategy.statistics.summed().items():
        assert torch.allclose(forgotten.tensors[key], value, rtol=1e-10, atol=1e-9)
    with pytest.raises(cf.IncompatibleComponentsError, match="do not combine"):
        cf.compose_components([files[0], cf.tangent_component(_tmc().model, _tmc().model.delta, 9)])


@pytest.mark.parametrize("change, named", [
    ("weights", "pre-trained weights or BatchNorm statistics"),
    ("batchnorm", "pre-trained weights or BatchNorm statistics"),
    ("head size", "head size"),
    ("linearized", "linearized parameters"),
    ("architecture", "network class"),
])
def test_components_of_another_base_are_refused_naming_the_difference(trained, change, named, tmp_path):
    strategy, directory = trained
    net, num_classes, linearize = _net(), NUM_CLASSES, "all"
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
    fresh = _tmc()
    with pytest.raises(cf.IncompatibleComponentsError, match=named):
        fresh.load_components(str(tmp_path))
    assert len(fresh.tangent_plugin.composition) == 0


def _file_bytes(directory) -> bytes:
    with open(os.path.join(directory, "experience-0.safetensors"), "rb") as f:
        return f.read()


@pytest.mark.parametrize("keep", [0, 5, 8, 40, 200, -1000, -1])
def test_a_truncated_file_is_refused(trained, tmp_path, keep):
    data = _file_bytes(trained[1])
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


def test_an_edited_file_is_refused(trained, tmp_path):
    data = bytearray(_file_bytes(trained[1]))
    header_end = 8 + struct.unpack("<Q", bytes(data[:8]))[0]
    edited = bytearray(data)
    edited[header_end + 100] ^= 0xFF  # one tensor byte
    (tmp_path / "edited.safetensors").write_bytes(bytes(edited))
    with pytest.raises(cf.ComponentFileError, match="content hash"):
        cf.load_component(str(tmp_path / "edited.safetensors"))
    header = bytes(data[8:header_end])
    for old, new, why in ((b'"format_version":"2"', b'"format_version":"9"', "version 9"),
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


def test_a_composition_file_installs_into_a_fresh_strategy(trained, bm):
    strategy, directory = trained
    composition = cf.compose_components(cf.load_components(directory))
    fresh = _tmc(weighting="samples")
    cf.install_composition(fresh, composition)
    assert fresh.learned().keys == [0, 1, 2, 3] and _equal(fresh.composed_delta, strategy.composed_delta)
    assert dict(fresh.tangent_plugin.task_classes) == dict(strategy.tangent_plugin.task_classes)
    key = "Top1_Acc_Stream/eval_phase/test_stream/Task000"
    assert fresh.eval(bm.test_stream)[key] == strategy.eval(bm.test_stream)[key]
    head = AnalyticHeadStrategy(model=AnalyticClassifier(penultimate(_net()), NUM_CLASSES), evaluator=quiet_evaluator())
    with pytest.raises(cf.IncompatibleComponentsError):
        cf.install_composition(head, composition)
