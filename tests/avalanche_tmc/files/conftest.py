"""Fixtures of the component-file tests: a trained TMC run that wrote its components, and
component files of a fixed model on disk (the run, the model and its δ on the tests' ``device``)."""

import pytest

from avalanche_tmc import TangentModel
from avalanche_tmc.files import compose_components, load_component, save_component, tangent_component
from tests.avalanche_tmc.files.common import same_net, tmc, train
from tests.helpers import NUM_CLASSES, random_delta, small_benchmark, tensor_dataset, to_device


@pytest.fixture(scope="package")
def bm():
    return small_benchmark(n_experiences=4, train=tensor_dataset(48))


@pytest.fixture(scope="package")
def trained(bm, tmp_path_factory, device):
    """A TMC run that wrote its components as it went (sample weighting: weights ≠ 1)."""
    directory = tmp_path_factory.mktemp("components")
    strategy = train(tmc(component_dir=str(directory), weighting="samples", device=device), bm.train_stream)
    return strategy, str(directory)


@pytest.fixture(scope="package")
def model(device):
    return TangentModel(same_net(), num_classes=NUM_CLASSES).to(device)


@pytest.fixture()
def files(model, tmp_path, device):
    """Components of experiences 0 and 1 (weight 1) and their composition, on disk."""
    paths = {}
    for exp in (0, 1):
        delta = to_device(random_delta(model, seed=exp), device)
        paths[exp] = save_component(tangent_component(model, delta, exp),
                                    str(tmp_path / f"experience-{exp}.safetensors"))
    composition = compose_components([load_component(paths[0]), load_component(paths[1])])
    paths["composed"] = save_component(composition, str(tmp_path / "composed.safetensors"))
    return paths
