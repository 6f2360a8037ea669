"""The authors' recipe in the runner (issue 28): what the paper presets train, checked against
the authors' code's rules written out by hand (github tianyu139/tangent-model-composition:
models/linear_resnet.py, utils.py, datasets/datasets.py), and its refusals."""

import hashlib

import numpy as np
import pytest
import torch
from avalanche.core import SupervisedPlugin
from avalanche.training.plugins import EvaluationPlugin
from torchvision.models import resnet18, resnet50

from avalanche_tmc import TangentModel
from benchmarks import methods
from benchmarks.methods import TrainConfig, groups_for
from benchmarks.methods.builders import linearize_start
from benchmarks.methods.strategy import build_strategy
from benchmarks.networks import backbones
from benchmarks.protocol.scenarios import authors_shards, class_order, make_scenario
from benchmarks.runner.config import RunConfig
from benchmarks.runner.presets import AUTHORS, PRESETS
from tests.helpers import TinyResNet


def _paper_presets():
    return {name: runs for name, runs in PRESETS.items() if name[:2] in ("c-", "t-", "d-")}


def test_every_paper_preset_runs_the_authors_recipe():
    presets = _paper_presets()
    assert len(presets) >= 25
    for name, runs in presets.items():
        for run in runs:
            config = RunConfig.from_dict(run)
            for key in ("linearize_from", "decay", "decay_kind", "schedule", "transforms", "class_order", "shards",
                        "imagenet_weights", "milestones", "epochs", "batch_size", "lr_tangent"):
                assert getattr(config, key) == RunConfig.from_dict(dict(AUTHORS, dataset="x", scenario="class",
                                                                        tasks=2, beta=25.0)).__getattribute__(key)
            assert config.tme_beta == 5.0, name  # the paper's text for TME
            assert config.beta == (5.0 if config.scenario == "data" else 25.0), name
    authors = RunConfig.from_dict(dict(AUTHORS, dataset="x", scenario="class", tasks=2, beta=25.0))
    assert (authors.decay, authors.decay_kind, authors.milestones, authors.epochs, authors.lr_tangent) == (
        1e-5, "norm", (25, 40), 50, 1e-4)
    assert (authors.transforms, authors.class_order, authors.shards) == ("authors", "label", "authors")
    assert authors.imagenet_weights == "IMAGENET1K_V1" and authors.freeze_until == "none"


@pytest.mark.parametrize("build", [resnet18, resnet50], ids=["resnet18", "resnet50"])
def test_the_linearized_set_is_the_authors(build):
    """Their linear_resnet keeps conv1 and bn1 (the stem) plain and linearizes every
    parameter of layer1..layer4 and fc."""
    net = build(num_classes=10)
    model = TangentModel(net, start_at=linearize_start("after-stem", net))
    theirs = {name for name, _ in net.named_parameters() if not name.startswith(("conv1.", "bn1."))}
    assert set(model.delta_shapes()) == theirs
    assert any(name.startswith("layer1.0.") for name in theirs) and "fc.weight" in theirs


def test_after_stem_is_refused_for_an_unknown_layout():
    with pytest.raises(ValueError, match="--linearize-from MODULE"):
        linearize_start("after-stem", torch.nn.Sequential(torch.nn.Linear(2, 2)))
    assert linearize_start(None, TinyResNet()) is None and linearize_start("layer2", TinyResNet()) == "layer2"


class _LearningRates(SupervisedPlugin):
    def __init__(self):
        super().__init__()
        self.seen = []

    def before_training_epoch(self, strategy, **kwargs):
        self.seen.append(strategy.optimizer.param_groups[0]["lr"])


@pytest.mark.parametrize("schedule", ["authors", "step"])
def test_the_learning_rate_of_each_epoch(schedule):
    """The authors' utils.adjust_learning_rate: epoch e trains at lr·0.1^#{m : m < e}; the
    paper's text (MultiStepLR): lr·0.1^#{m : m <= e}."""
    lr, milestones, epochs = 1e-2, (2, 4), 6
    cfg = TrainConfig(num_classes=4, epochs=epochs, lr_tangent=lr, milestones=milestones, schedule=schedule,
                      batch_size=8)
    group = {g.name: g for g in methods.method_groups()}["tangent"]
    strategy = build_strategy(group, TinyResNet(num_classes=4), cfg, EvaluationPlugin(loggers=[]))
    seen = _LearningRates()
    strategy.plugins.append(seen)
    x, y = torch.randn(16, 1, 8, 8), torch.arange(16) % 4
    bm = _tensor_benchmark(x, y)
    strategy.train(bm.train_stream[0])
    expected = [lr * 0.1 ** sum(m < e if schedule == "authors" else m <= e for m in milestones)
                for e in range(epochs)]
    assert seen.seen == pytest.approx(expected, rel=1e-12)


def _tensor_benchmark(x, y):
    from avalanche.benchmarks.scenarios.supervised import class_incremental_benchmark
    from avalanche.benchmarks.utils import _make_taskaware_tensor_classification_dataset

    data = _make_taskaware_tensor_classification_dataset(x, y)
    return class_incremental_benchmark({"train": data, "test": data}, num_experiences=1)


def test_tme_trains_its_own_components_with_its_own_beta():
    """The TME row is the paper's: a group of its own whose components train with ``tme_beta``
    (the scenario's β without it); the ensemble of TMC's components is the tangent group's
    ``tme-tmc`` row, evaluated from TMC's training."""
    names = [(g.name, rows) for g, rows in groups_for(["tmc", "tme", "tme-tmc", "soup"])]
    assert ("tme", ("tme",)) in names and ("tangent", ("tmc", "tme-tmc")) in names
    cfg = TrainConfig(num_classes=4, beta=25.0, tme_beta=5.0)
    tme = build_strategy(methods.group_named("tme"), TinyResNet(num_classes=4), cfg, EvaluationPlugin(loggers=[]))
    tmc = build_strategy(methods.group_named("tangent"), TinyResNet(num_classes=4), cfg, EvaluationPlugin(loggers=[]))
    assert (tme.tangent_plugin.mode, tme._criterion.beta, tmc._criterion.beta) == ("tme", 5.0, 25.0)
    own = build_strategy(methods.group_named("tme"), TinyResNet(num_classes=4), TrainConfig(num_classes=4, beta=25.0),
                         EvaluationPlugin(loggers=[]))
    assert own._criterion.beta == 25.0
    methods.group_named("tangent").select(tmc, "tme-tmc")
    assert tmc.tangent_plugin.mode == "tme"
    assert methods.method_unit("tme") == "tme" and methods.method_unit("tme-tmc") == "tangent"


def test_class_order_by_label_and_the_authors_shards():
    assert class_order(7, seed=3, order="label") == list(range(7))
    assert class_order(7, seed=3) != list(range(7))
    # their TaskIncrementalDataset: rng(139) shuffles the indices, index i goes to task i % n
    n, tasks = 23, 4
    shuffled = np.random.default_rng(139).permutation(n).tolist()
    expected = [[idx for i, idx in enumerate(shuffled) if i % tasks == t] for t in range(tasks)]
    assert authors_shards(n, tasks) == expected
    assert authors_shards(n, tasks) == authors_shards(n, tasks)  # the same whatever the run's seed


def test_the_scenario_follows_the_recipe():
    from benchmarks.datasets.base import ImageTensorDataset

    images = torch.zeros(30, 1, 4, 4, dtype=torch.uint8)
    targets = torch.arange(30) % 6
    train = test = ImageTensorDataset(images, targets, classes=[str(c) for c in range(6)])
    bm = make_scenario("class", train, test, 3, seed=5, class_order="label")
    assert [sorted(e.classes_in_this_experience) for e in bm.train_stream] == [[0, 1], [2, 3], [4, 5]]
    data = make_scenario("data", train, test, 3, seed=5, shards="authors")
    assert [len(e.dataset) for e in data.train_stream] == [10, 10, 10]


def test_weights_are_never_downloaded_and_a_damaged_file_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path / "hub"))
    with pytest.raises(backbones.WeightsNotFoundError) as refused:
        backbones.load_backbone("resnet50", version="IMAGENET1K_V1")
    message = str(refused.value)
    assert "resnet50-19c8e357.pth" in message and "19c8e357" in message and str(tmp_path / "hub") in message
    # a file where torch keeps it, named by its hash: read from there, checked against its name
    (tmp_path / "hub" / "checkpoints").mkdir(parents=True)
    state = resnet18().state_dict()
    path = tmp_path / "hub" / "checkpoints" / "resnet18-5c106cde.pth"
    torch.save(state, path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    with pytest.raises(backbones.WeightsNotFoundError, match="damaged or not the published one"):
        backbones.load_backbone("resnet18", version="IMAGENET1K_V1")
    renamed = path.with_name(f"resnet18-{digest[:8]}.pth")
    path.rename(renamed)
    loaded = backbones.load_backbone("resnet18", weights=renamed)
    assert torch.equal(loaded.state_dict()["fc.weight"], state["fc.weight"])
