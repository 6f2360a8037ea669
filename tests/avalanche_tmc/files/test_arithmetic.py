"""Composing and forgetting files, against the in-memory strategies: bit for bit the same
sum, forgetting equal to never training, refusals that name what does not combine."""


import pytest
import torch

import avalanche_tmc.files as cf
from avalanche_tmc import TangentModel, TrainingFreeClassifier, TrainingFreeStrategy, penultimate
from tests.avalanche_tmc.files.common import base_net, craft, equal, same_net, set_entry, tmc, train
from tests.helpers import NUM_CLASSES, quiet_evaluator, random_delta


def test_compose_from_files_equals_the_in_memory_composition(trained):
    strategy, directory = trained
    composition = cf.compose_components(cf.load_components(directory))
    in_memory = strategy.tangent_plugin.composition
    assert equal(composition.tensors, in_memory._sum)  # bit for bit: the same sum in the same order
    assert composition.weight == in_memory._total_weight
    assert equal(cf.composed_delta(composition), strategy.composed_delta)
    # a composition file composes further, like its members
    partial = cf.compose_components(cf.load_components(directory)[:2])
    again = cf.compose_components([partial, *cf.load_components(directory)[2:]])
    assert torch.allclose(torch.cat([t.flatten() for t in again.tensors.values()]),
                          torch.cat([t.flatten() for t in composition.tensors.values()]), rtol=1e-6, atol=1e-7)


def test_forget_from_files_equals_composing_the_rest(trained, bm, device):
    strategy, directory = trained
    files = cf.load_components(directory)
    composition = cf.compose_components(files)
    forgotten = cf.forget_component(composition, files[1])
    rest = cf.compose_components([files[0], files[2], files[3]])
    assert forgotten.experiences == [0, 2, 3] and forgotten.weight == rest.weight
    for name in rest.tensors:
        assert torch.allclose(forgotten.tensors[name], rest.tensors[name], rtol=1e-5, atol=1e-7)
    # and equals a TMC never trained on experience 1 (each experience seeded by its id)
    never = train(tmc(weighting="samples", device=device), [e for e in bm.train_stream if e.current_experience != 1])
    delta = cf.composed_delta(forgotten)
    for name, value in never.composed_delta.items():
        assert torch.allclose(delta[name], value.cpu(), rtol=1e-5, atol=1e-7)
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


def test_statistics_files_compose_and_forget_exactly(bm, tmp_path, device):
    def head():
        model = TrainingFreeClassifier(penultimate(base_net()), NUM_CLASSES, projection_dim=16)
        return TrainingFreeStrategy(model=model, train_mb_size=8, evaluator=quiet_evaluator(), device=device)

    strategy = train(head(), bm.train_stream)
    for component in cf.strategy_components(strategy):
        cf.save_component(component, str(tmp_path / f"experience-{component.experience}.safetensors"))
    files = cf.load_components(str(tmp_path))
    assert [f.weight for f in files] == [float(strategy.components[k]["count"]) for k in range(4)]
    composition = cf.compose_components(files)
    assert equal(composition.tensors, strategy.statistics.summed())  # bit for bit
    rebuilt = head()
    rebuilt.load_components(str(tmp_path))
    # the statistics read from files sum and solve where the strategy learns: the same head bit for bit
    assert {t.device.type for t in rebuilt.statistics.summed().values()} == {device.type}
    assert torch.equal(rebuilt.model.weight.cpu(), strategy.model.weight.cpu())
    forgotten = cf.forget_component(composition, files[2])
    strategy.forget(2)
    for key, value in strategy.statistics.summed().items():
        assert torch.allclose(forgotten.tensors[key], value.cpu(), rtol=1e-10, atol=1e-9)
    with pytest.raises(cf.IncompatibleComponentsError, match="do not combine"):
        cf.compose_components([files[0], cf.tangent_component(tmc().model, tmc().model.delta, 9)])


def test_a_relabelled_copy_is_refused_as_the_same_content(files, tmp_path):
    """Issue 21: members[0].experience 1 -> 7 composed experiences [0, 1, 7] with two identical members."""
    relabelled = cf.load_component(craft(files[1], tmp_path / "experience-7.safetensors",
                                          set_entry(["members", 0, "experience"], 7), rehash=True))
    assert relabelled.experience == 7  # a well-formed file: only the key below tells it from a real one
    with pytest.raises(cf.IncompatibleComponentsError, match="same content"):
        cf.compose_components([cf.load_component(files[0]), cf.load_component(files[1]), relabelled])
    with pytest.raises(cf.IncompatibleComponentsError, match="same content"):
        cf.components_for([files[1], str(tmp_path / "experience-7.safetensors")], TangentModel(
            same_net(), num_classes=NUM_CLASSES))


def test_forget_refuses_a_copy_with_another_weight(files, tmp_path):
    """Issue 21: a copy with weight 2.0 was accepted by forget (result: weight 0, δ = 0)."""
    heavier = cf.load_component(craft(files[1], tmp_path / "heavy.safetensors", lambda m: (
        m.update(weight=2.0), m["members"][0].update(weight=2.0)), rehash=True))
    composition = cf.load_component(files["composed"])
    with pytest.raises(cf.IncompatibleComponentsError, match="weight"):
        cf.forget_component(composition, heavier)
    rest = cf.forget_component(composition, cf.load_component(files[1]))
    assert rest.experiences == [0] and rest.weight == 1.0


def test_valid_files_whose_numbers_overflow_do_not_combine(model, tmp_path):
    """Well-formed files can still overflow when combined: refused as not combining (CLI exit 4), not a crash."""
    huge = {n: torch.full_like(t, 3e38) for n, t in random_delta(model).items()}
    a = cf.tangent_component(model, huge, 0)
    b = cf.tangent_component(model, {n: t * 0.999 for n, t in huge.items()}, 1)
    with pytest.raises(cf.IncompatibleComponentsError, match="not finite"):
        cf.compose_components([a, b])
    composition = cf.compose_components([cf.tangent_component(model, random_delta(model), 2)])
    composition.weight = 1e-300  # W of members of tiny weights: δ = S / W overflows
    with pytest.raises(cf.IncompatibleComponentsError, match="not finite"):
        cf.composed_delta(composition)
    heavy = cf.tangent_component(model, random_delta(model, seed=1), 3, weight=1e308)
    with pytest.raises(cf.IncompatibleComponentsError, match="infinite|not finite"):
        cf.compose_components([heavy, cf.tangent_component(model, random_delta(model, seed=2), 4, weight=1e308)])


def test_files_of_different_weightings_are_composed_only_when_asked(model):
    """Issue 30, case 7: a samples-weighted silo (weight 16) and a mean one (weight 1) composed with weights
    [16, 1], while train_parallel refuses the same mismatch."""
    samples = cf.tangent_component(model, random_delta(model, seed=0), 0, weight=16.0,
                                   settings=dict(weighting="samples"))
    mean = cf.tangent_component(model, random_delta(model, seed=1), 1, settings=dict(weighting="mean"))
    unknown = cf.tangent_component(model, random_delta(model, seed=2), 2)  # files that do not say are not judged
    with pytest.raises(cf.IncompatibleComponentsError, match="weighting 'samples'.*'mean'"):
        cf.compose_components([samples, unknown, mean])
    mixed = cf.compose_components([samples, mean], mixed_weighting=True)
    assert mixed.weight == 17.0 and mixed.settings == dict(weighting="mixed")
    with pytest.raises(cf.IncompatibleComponentsError, match="weighting"):  # the composition remembers
        cf.compose_components([mixed, unknown, cf.tangent_component(model, random_delta(model, seed=3), 3,
                                                                     settings=dict(weighting="mean"))])
    same = cf.compose_components([mean, unknown])
    assert same.settings == dict(weighting="mean") and same.weight == 2.0
