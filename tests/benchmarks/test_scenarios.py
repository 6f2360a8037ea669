"""Continual splits: every class exactly once, remainder first, the paper's shard rule; the
experiences are, sample by sample, those of the deprecated generators behind the published results."""

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from benchmarks.protocol.scenarios import (
    SCENARIOS,
    class_order,
    classes_per_experience,
    data_incremental,
    domain_shards,
    make_scenario,
    random_shards,
)


def toy(num_classes=67, per_class=3, domains=None, seed=0, shuffle=False, list_targets=False):
    y = torch.arange(num_classes).repeat_interleave(per_class)
    if shuffle:
        y = y[torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))]
    x = torch.randn(len(y), 2, generator=torch.Generator().manual_seed(seed))
    ds = TensorDataset(x, y)
    ds.targets = y.tolist() if list_targets else y
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


# ------------------------------------------- the same experiences as the deprecated generators


def deprecated_scenario(scenario, train, test, n_experiences, seed):
    """What the published results were made with: avalanche-lib 0.6.0's deprecated
    ``nc_benchmark`` / ``ni_benchmark`` called as benchmarks/protocol/scenarios.py used to."""
    from avalanche.benchmarks.scenarios.deprecated.generators import nc_benchmark, ni_benchmark

    if scenario == "data":
        domains = getattr(train, "domains", None)
        shards = random_shards(len(train), n_experiences, seed) if domains is None else domain_shards(domains)
        return ni_benchmark(train, test, n_experiences=n_experiences, fixed_exp_assignment=shards)
    num_classes = int(torch.as_tensor(train.targets).max()) + 1
    return nc_benchmark(
        train, test, n_experiences=n_experiences, task_labels=scenario == "task",
        fixed_class_order=class_order(num_classes, seed),
        per_exp_classes=dict(enumerate(classes_per_experience(num_classes, n_experiences))),
        class_ids_from_zero_in_each_exp=False, class_ids_from_zero_from_first_exp=False,
    )


def assert_identical(a, b, where):
    """Equal values of the same type, tensors of the same dtype, recursively."""
    assert type(a) is type(b), f"{where}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), f"{where}: length {len(a)} != {len(b)}"
        for k, (u, v) in enumerate(zip(a, b)):
            assert_identical(u, v, f"{where}[{k}]")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


EXPERIENCE_ATTRIBUTES = ("current_experience", "task_label", "task_labels", "classes_in_this_experience",
                         "previous_classes", "classes_seen_so_far", "future_classes")


def assert_same_benchmark(old, new):
    assert old.streams.keys() == new.streams.keys() == {"train", "test"}
    for name in ("train", "test"):
        assert len(old.streams[name]) == len(new.streams[name])
        for old_exp, new_exp in zip(old.streams[name], new.streams[name]):
            where = f"{name} {old_exp.current_experience}"
            for attr in EXPERIENCE_ATTRIBUTES:
                assert_identical(getattr(old_exp, attr), getattr(new_exp, attr), f"{where} {attr}")
            assert old_exp.origin_stream.name == new_exp.origin_stream.name == name
            a, b = old_exp.dataset, new_exp.dataset
            assert type(a) is type(b) and a.collate_fn is b.collate_fn
            assert_identical(list(a.targets), list(b.targets), f"{where} targets")
            assert_identical(list(a.targets_task_labels), list(b.targets_task_labels), f"{where} task labels")
            # every sample (x, y, task label), in the experience's order, in both transform groups
            for group in ("train", "eval"):
                a, b = a.with_transforms(group), b.with_transforms(group)
                assert_identical([a[i] for i in range(len(a))], [b[i] for i in range(len(b))], f"{where} {group}")
            assert_identical(list(DataLoader(a, batch_size=16, collate_fn=a.collate_fn)),
                             list(DataLoader(b, batch_size=16, collate_fn=b.collate_fn)), f"{where} batches")


@pytest.fixture(scope="module")
def digits():
    from benchmarks.datasets import load_dataset

    return load_dataset("digits", image_size=8, cache=False)  # (nothing written to the cache)


def features_like(dataset):
    """The runner's cached trunk features: a TensorDataset, tensor targets (items hold a 0-d tensor)."""
    x = torch.stack([dataset[i][0].flatten()[:6] for i in range(len(dataset))])
    cached = TensorDataset(x, torch.as_tensor(dataset.targets))
    cached.targets = cached.tensors[1]
    return cached


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_digits_experiences_are_the_deprecated_generators_ones(digits, scenario, seed):
    train, test = digits
    rng = torch.get_rng_state()
    old, new = deprecated_scenario(scenario, train, test, 5, seed), make_scenario(scenario, train, test, 5, seed)
    assert torch.equal(torch.get_rng_state(), rng)  # neither draws from torch's generator
    assert_same_benchmark(old, new)
    if seed == 0:  # the runner with a frozen trunk: cached features
        train, test = features_like(train), features_like(test)
        assert_same_benchmark(deprecated_scenario(scenario, train, test, 3, seed),
                              make_scenario(scenario, train, test, 3, seed))


@pytest.mark.parametrize("scenario", ["class", "task"])
def test_many_classes_keep_the_deprecated_class_lists(scenario):
    # 67 shuffled classes, targets a list: set iteration orders that are not sorted
    train, test = toy(shuffle=True, list_targets=True), toy(seed=1, shuffle=True)
    for seed in (0, 3):
        assert_same_benchmark(deprecated_scenario(scenario, train, test, 5, seed),
                              make_scenario(scenario, train, test, 5, seed))


def test_domain_experiences_are_the_deprecated_generators_ones():
    train = toy(num_classes=9, per_class=20, domains=np.tile(np.arange(5), 36), shuffle=True)
    test = toy(num_classes=9, per_class=4, seed=2)
    assert_same_benchmark(deprecated_scenario("data", train, test, 5, 0), make_scenario("data", train, test, 5, 0))
