"""Continual splits: every class exactly once, remainder first, the paper's shard rule."""

import numpy as np
import pytest
import torch
from torch.utils.data import TensorDataset

from benchmarks.scenarios import (
    classes_per_experience,
    data_incremental,
    make_scenario,
    random_shards,
)


def toy(num_classes=67, per_class=3, domains=None, seed=0):
    y = torch.arange(num_classes).repeat_interleave(per_class)
    x = torch.randn(len(y), 2, generator=torch.Generator().manual_seed(seed))
    ds = TensorDataset(x, y)
    ds.targets = y
    if domains is not None:
        ds.domains = torch.as_tensor(domains)
    return ds


def test_remainder_goes_to_the_first_experiences():
    assert classes_per_experience(67, 5) == [14, 14, 13, 13, 13]
    assert classes_per_experience(30, 5) == [6] * 5
    assert sum(classes_per_experience(256, 20)) == 256
    with pytest.raises(ValueError):
        classes_per_experience(3, 5)


@pytest.mark.parametrize("scenario", ["class", "task"])
def test_class_split_uses_every_class_exactly_once(scenario):
    bm = make_scenario(scenario, toy(), toy(seed=1), n_experiences=5, seed=3)
    seen = [set(e.classes_in_this_experience) for e in bm.train_stream]
    assert [len(s) for s in seen] == [14, 14, 13, 13, 13]
    assert set().union(*seen) == set(range(67))
    assert sum(len(s) for s in seen) == 67
    for train_exp, test_exp in zip(bm.train_stream, bm.test_stream):
        assert set(train_exp.classes_in_this_experience) == set(test_exp.classes_in_this_experience)
        targets = {int(t) for t in train_exp.dataset.targets}
        assert targets == set(train_exp.classes_in_this_experience)  # global ids kept
    labels = [e.task_label for e in bm.train_stream]
    assert labels == (list(range(5)) if scenario == "task" else [0] * 5)


def test_data_split_is_the_seeded_shard_rule():
    train = toy(num_classes=10, per_class=20)
    bm = data_incremental(train, toy(num_classes=10, per_class=2), n_experiences=4, seed=7)
    shards = random_shards(len(train), 4, seed=7)
    assert sorted(i for s in shards for i in s) == list(range(len(train)))
    assert [len(s) for s in shards] == [50, 50, 50, 50]
    for exp, shard in zip(bm.train_stream, shards):
        got = torch.stack([exp.dataset[i][0] for i in range(len(exp.dataset))])
        assert torch.equal(got, train.tensors[0][shard])
    assert len(bm.test_stream) == 1 and len(bm.test_stream[0].dataset) == 20
    assert random_shards(200, 4, seed=7) != random_shards(200, 4, seed=8)


def test_domains_become_experiences():
    domains = np.tile(np.arange(3), 20)
    train = toy(num_classes=4, per_class=15, domains=domains)
    bm = data_incremental(train, toy(num_classes=4, per_class=2), n_experiences=3)
    for d, exp in enumerate(bm.train_stream):
        assert len(exp.dataset) == 20
    with pytest.raises(ValueError, match="--tasks 3"):
        data_incremental(train, toy(num_classes=4, per_class=2), n_experiences=5)
