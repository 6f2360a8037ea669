"""A network split at a named layer (checked against its own output, refused where it is not
a chain) and an Avalanche benchmark of a frozen trunk's features (issue 60): the same streams,
targets, task labels and class lists; random transforms refused; the size known before the
features are made; and training on the features equal to training the network with the
trunk frozen (TMC against TMC on the images with ``start_at``), for Avalanche's strategies too."""

import copy

import numpy as np
import pytest
import torch
from avalanche.benchmarks.scenarios import benchmark_from_datasets
from avalanche.benchmarks.utils import as_classification_dataset
from torch import nn
from torch.utils.data import TensorDataset

from avalanche_tmc import TangentModel, TMCSeqStrategy, TMCStrategy, TMEStrategy
from avalanche_tmc.factories import digits, small_cnn
from avalanche_tmc.factories.frozen_features import (
    FeaturesTooLargeError,
    RandomTransformsError,
    feature_bytes,
    frozen_trunk_benchmark,
)
from avalanche_tmc.models.frozen_trunk import NotAChainError, split_network
from tests.helpers import quiet_evaluator

SPLIT = "4"  # small_cnn: conv, BN, ReLU, pool | conv, BN, ReLU, pool, flatten, head


@pytest.fixture(scope="module")
def net():
    return small_cnn(num_classes=10, width=16, seed=0).eval()


def _example(benchmark, n=4):
    return torch.stack([torch.as_tensor(benchmark.train_stream[0].dataset[i][0]) for i in range(n)])


def test_the_split_reproduces_the_network_and_refuses_what_is_not_a_chain(net):
    x = torch.randn(3, 1, 8, 8)
    trunk, top = split_network(net, SPLIT, x)
    assert torch.allclose(top(trunk(x)), net(x), atol=1e-6)
    assert not any(p.requires_grad for p in trunk.parameters()) and all(p.requires_grad for p in top.parameters())

    class Residual(nn.Module):  # its forward adds the input back: not the chain of its children
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

        def forward(self, x):
            return self.b(self.a(x)) + x

    with pytest.raises(NotAChainError, match="not a chain of its children"):
        split_network(Residual(), "b", torch.randn(2, 4))
    with pytest.raises(ValueError, match="whose children are: 0, 1, 2"):
        split_network(net, "conv9", x)
    with pytest.raises(ValueError, match="a batch of the model's inputs"):
        split_network(net, SPLIT, torch.randn(8))


def test_streams_targets_task_labels_and_class_lists_are_kept(net):
    benchmark = digits(n_experiences=5, return_task_id=True)
    trunk, _ = split_network(net, SPLIT, _example(benchmark))
    cached = frozen_trunk_benchmark(benchmark, trunk)
    assert set(cached.streams) == set(benchmark.streams)
    for name, stream in benchmark.streams.items():
        new = list(cached.streams[name])
        assert len(new) == len(stream)
        for old, exp in zip(stream, new):
            assert exp.current_experience == old.current_experience and exp.task_labels == old.task_labels
            assert exp.classes_in_this_experience == list(old.classes_in_this_experience)
            assert list(exp.dataset.targets) == list(old.dataset.targets)
            assert list(exp.dataset.targets_task_labels) == list(old.dataset.targets_task_labels)
            x = torch.stack([old.dataset[i][0] for i in range(3)])
            with torch.no_grad():
                expected = trunk(x)
            got = torch.stack([exp.dataset[i][0] for i in range(3)])
            assert torch.allclose(got, expected, atol=1e-6)  # (batches of another size round otherwise)
            assert [exp.dataset[i][2] for i in range(3)] == [old.dataset[i][2] for i in range(3)]


def _benchmark_with(train_transform):
    """Two experiences of random 1x8x8 images, a transform in the training datasets' train group."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(40, 1, 8, 8, generator=g), torch.arange(40) % 4

    def dataset(keep, train):
        data = TensorDataset(x[keep], y[keep])
        data.targets = y[keep].tolist()
        d = as_classification_dataset(data)
        return d.with_transforms("train") if not train else d.replace_current_transform_group(train_transform)

    halves = [torch.nonzero(y < 2).flatten(), torch.nonzero(y >= 2).flatten()]
    return benchmark_from_datasets(train=[dataset(k, True) for k in halves], test=[dataset(k, False) for k in halves])


def test_random_training_transforms_are_refused_or_evaluated_on_request(net):
    def flip(img):
        return torch.flip(img, dims=[-1]) if torch.rand(()) < 0.5 else img

    benchmark = _benchmark_with(flip)
    trunk, _ = split_network(net, SPLIT, torch.randn(2, 1, 8, 8))
    with pytest.raises(RandomTransformsError, match="train stream's transforms are random.*augmentation='eval'"):
        frozen_trunk_benchmark(benchmark, trunk)
    cached = frozen_trunk_benchmark(benchmark, trunk, augmentation="eval")  # the eval group: no transform
    first = benchmark.train_stream[0].dataset.eval()[0][0]
    with torch.no_grad():
        assert torch.allclose(cached.train_stream[0].dataset[0][0], trunk(first.unsqueeze(0))[0], atol=1e-6)
    deterministic = _benchmark_with(lambda img: img * 2)
    assert len(frozen_trunk_benchmark(deterministic, trunk).train_stream) == 2
    with pytest.raises(ValueError, match="augmentation='noise'"):
        frozen_trunk_benchmark(deterministic, trunk, augmentation="noise")


def test_randomness_inside_the_dataset_is_refused_even_with_eval(tmp_path, net):
    from PIL import Image

    from avalanche_tmc.factories import image_folder

    rng = np.random.default_rng(0)
    for c in range(2):
        (tmp_path / f"c{c}").mkdir()
        for i in range(5):  # noise: a crop or a flip changes the image
            pixels = rng.integers(0, 256, (36, 40 + 3 * i, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(tmp_path / f"c{c}" / f"{i}.png")
    benchmark = image_folder(root=tmp_path, n_experiences=2, image_size=16)  # random crop and flip inside
    trunk = nn.Sequential(nn.Conv2d(3, 2, 3)).eval().requires_grad_(False)
    with pytest.raises(RandomTransformsError, match="inside the dataset itself.*augment=False"):
        frozen_trunk_benchmark(benchmark, trunk, augmentation="eval")
    assert frozen_trunk_benchmark(image_folder(root=tmp_path, n_experiences=2, image_size=16, augment=False), trunk)


def test_the_size_is_known_before_the_features_are_made(net):
    benchmark = digits(n_experiences=2)
    trunk, _ = split_network(net, SPLIT, _example(benchmark))
    images = sum(len(e.dataset) for s in benchmark.streams.values() for e in s)
    shape = trunk(torch.as_tensor(benchmark.train_stream[0].dataset[0][0]).unsqueeze(0)).shape[1:]
    assert feature_bytes(benchmark, trunk) == images * shape.numel() * 4  # float32
    calls = []
    counting = copy.deepcopy(trunk)
    counting.register_forward_hook(lambda module, args, out: calls.append(len(args[0])))
    too_large = r"1397 images would take .* GiB \(float32\), more than .* \(max_bytes\)\. Split the network later"
    with pytest.raises(FeaturesTooLargeError, match=too_large):
        frozen_trunk_benchmark(benchmark, counting, max_bytes=1000)
    assert calls == [1]  # one image's shape, no feature made


def _train(strategy, benchmark):
    torch.manual_seed(0)
    for experience in benchmark.train_stream:
        torch.manual_seed(100 + experience.current_experience)
        strategy.train(experience)
    return strategy


def test_tmc_on_the_features_is_tmc_on_the_images_with_the_trunk_frozen(net):
    """The independent computation: TMC linearized from the split point on the images
    (``start_at``) against TMC on the top alone, trained on the cached features."""
    benchmark = digits(n_experiences=2)
    trunk, top = split_network(copy.deepcopy(net), SPLIT, _example(benchmark))
    cached = frozen_trunk_benchmark(benchmark, trunk)
    common = dict(lr=1e-2, train_mb_size=32, train_epochs=2, eval_mb_size=256, evaluator=quiet_evaluator())
    whole = _train(TMCStrategy(model=TangentModel(copy.deepcopy(net), start_at=SPLIT), **common), benchmark)
    on_features = _train(TMCStrategy(model=TangentModel(top), **common), cached)
    x = torch.stack([benchmark.test_stream[1].dataset[i][0] for i in range(64)])
    with torch.no_grad():
        features = trunk(x)
        assert torch.allclose(on_features.model(features), whole.model(x), atol=1e-4)
    key = "Top1_Acc_Stream/eval_phase/test_stream"
    assert on_features.eval(cached.test_stream)[key] == pytest.approx(whole.eval(benchmark.test_stream)[key], abs=1e-9)


@pytest.mark.parametrize("name", ["tme", "tmc-seq", "naive", "er", "der", "lwf", "ewc"])
def test_every_strategy_trains_on_the_cached_benchmark(net, name):
    from avalanche.training import DER, EWC, LwF, Naive
    from avalanche.training.plugins import ReplayPlugin

    benchmark = digits(n_experiences=2)
    trunk, top = split_network(copy.deepcopy(net), SPLIT, _example(benchmark))
    cached = frozen_trunk_benchmark(benchmark, trunk)
    common = dict(train_mb_size=32, train_epochs=1, eval_mb_size=256, evaluator=quiet_evaluator())
    sgd = dict(model=top, optimizer=torch.optim.SGD(top.parameters(), lr=0.05), criterion=nn.CrossEntropyLoss(),
               **common)
    strategy = {
        "tme": lambda: TMEStrategy(model=TangentModel(top), lr=1e-2, **common),
        "tmc-seq": lambda: TMCSeqStrategy(model=TangentModel(top), lr=1e-2, **common),
        "naive": lambda: Naive(**sgd),
        "er": lambda: Naive(plugins=[ReplayPlugin(mem_size=50)], **sgd),
        "der": lambda: DER(mem_size=50, **sgd),
        "lwf": lambda: LwF(alpha=1.0, temperature=2.0, **sgd),
        "ewc": lambda: EWC(ewc_lambda=1.0, **sgd),
    }[name]()
    _train(strategy, cached)
    accuracy = strategy.eval(cached.test_stream)["Top1_Acc_Stream/eval_phase/test_stream"]
    assert 0.0 < accuracy <= 1.0 and all(torch.isfinite(p).all() for p in top.parameters())
