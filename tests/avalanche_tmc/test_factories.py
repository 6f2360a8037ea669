"""The installed factories (issue 19, item 2): Avalanche's classic benchmarks on local files
in every layout we accept (never downloading: torchvision's download is made to fail the
test if it is ever called), clear errors for missing data or weights, torchvision/timm
weights from a file or the cache, the digits factories, and a classic benchmark through
the command line on data this machine has (Debian's Fashion-MNIST)."""

import gzip
import json
import os
import pickle
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from avalanche_tmc.factories import (
    DatasetNotFoundError,
    WeightsNotFoundError,
    digits,
    digits_cnn,
    small_cnn,
    split_cifar10,
    split_fmnist,
    split_mnist,
    timm_model,
    torchvision_model,
)
from avalanche_tmc.factories.benchmarks import DEBIAN_FASHION_MNIST, MNIST_FILES

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def no_downloads(monkeypatch, tmp_path):
    """Any download attempt fails the test; the factories' cache goes to a temporary folder."""
    import torchvision.datasets.utils as tv_utils

    def refuse(*args, **kwargs):
        raise AssertionError(f"a download was attempted: {args}")

    for name in ("download_url", "download_and_extract_archive", "download_file_from_google_drive"):
        monkeypatch.setattr(tv_utils, name, refuse)
    monkeypatch.setattr(torch.hub, "download_url_to_file", refuse)
    monkeypatch.setenv("AVALANCHE_TMC_CACHE", str(tmp_path / "cache"))


def write_mnist(directory: Path, n_train: int = 60, n_test: int = 20, gz: bool = False) -> None:
    """The four MNIST files (idx format) of random 28x28 images, labels cycling 0..9."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        images = struct.pack(">IIII", 2051, n, 28, 28) + rng.integers(0, 256, (n, 28, 28), dtype=np.uint8).tobytes()
        labels = struct.pack(">II", 2049, n) + (np.arange(n) % 10).astype(np.uint8).tobytes()
        for kind, payload in (("images-idx3", images), ("labels-idx1", labels)):
            name = directory / f"{prefix}-{kind}-ubyte"
            if gz:
                with gzip.open(str(name) + ".gz", "wb") as f:
                    f.write(payload)
            else:
                name.write_bytes(payload)


@pytest.mark.parametrize("layout", ["flat", "gzipped", "torchvision"])
def test_split_mnist_reads_local_files_in_every_layout(tmp_path, layout):
    root = tmp_path / "mnist"
    write_mnist(root / "MNIST" / "raw" if layout == "torchvision" else root, gz=layout == "gzipped")
    bm = split_mnist(n_experiences=5, seed=0, dataset_root=root)
    assert len(bm.train_stream) == 5
    assert sum(len(e.dataset) for e in bm.train_stream) == 60 and sum(len(e.dataset) for e in bm.test_stream) == 20
    classes = [c for e in bm.train_stream for c in e.classes_in_this_experience]
    assert sorted(classes) == list(range(10))
    x, y, t = bm.train_stream[0].dataset[0]
    assert x.shape == (1, 28, 28) and y in bm.train_stream[0].classes_in_this_experience and t == 0
    # the task-incremental version: each experience its own task label
    tasks = split_mnist(n_experiences=5, return_task_id=True, dataset_root=root)
    assert [e.task_label for e in tasks.train_stream] == [0, 1, 2, 3, 4]


def test_missing_data_says_where_it_looked_and_what_to_do(tmp_path):
    with pytest.raises(DatasetNotFoundError, match=r"MNIST is not in .*nowhere.*dataset_root=<dir>.*Nothing is "
                                                   r"downloaded"):
        split_mnist(dataset_root=tmp_path / "nowhere")
    with pytest.raises(DatasetNotFoundError, match="apt-get install dataset-fashion-mnist"):
        split_fmnist(dataset_root=tmp_path / "nowhere")
    with pytest.raises(DatasetNotFoundError, match="cifar-10-batches-py"):
        split_cifar10(dataset_root=tmp_path)
    (tmp_path / "cifar-10-batches-py").mkdir()
    (tmp_path / "cifar-10-batches-py" / "data_batch_1").write_bytes(b"not cifar")
    with pytest.raises(DatasetNotFoundError, match="MD5 check failed"):
        split_cifar10(dataset_root=tmp_path)
    partial = tmp_path / "partial"
    write_mnist(partial)
    (partial / MNIST_FILES[-1]).unlink()
    with pytest.raises(DatasetNotFoundError):
        split_mnist(dataset_root=partial)


def test_split_cifar10_reads_the_extracted_archive(tmp_path, monkeypatch):
    """CIFAR's files in torchvision's format (tiny); its MD5 check is the only thing faked."""
    import torchvision.datasets.cifar

    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for name, n in [(f"data_batch_{i}", 10) for i in range(1, 6)] + [("test_batch", 10)]:
        with open(folder / name, "wb") as f:
            pickle.dump({"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), "labels": list(range(10))}, f)
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({"label_names": [f"c{i}" for i in range(10)]}, f)
    monkeypatch.setattr(torchvision.datasets.cifar, "check_integrity", lambda *args, **kwargs: True)
    for root in (tmp_path, folder):  # the parent, or the extracted folder itself
        bm = split_cifar10(n_experiences=5, dataset_root=root)
        assert sum(len(e.dataset) for e in bm.train_stream) == 50 and len(bm.test_stream) == 5
        assert bm.test_stream[0].dataset[0][0].shape == (3, 32, 32)


@pytest.mark.skipif(not Path(DEBIAN_FASHION_MNIST).is_dir(), reason="Debian's dataset-fashion-mnist is not installed")
def test_split_fmnist_on_debians_files():
    bm = split_fmnist(n_experiences=5, seed=0, dataset_root=DEBIAN_FASHION_MNIST)
    assert [len(e.dataset) for e in bm.train_stream] == [12000] * 5
    assert [len(e.dataset) for e in bm.test_stream] == [2000] * 5
    assert bm.train_stream[0].dataset[0][0].shape == (1, 28, 28)
    assert len(split_fmnist(n_experiences=2).train_stream) == 2  # found without dataset_root too


@pytest.mark.integration
@pytest.mark.skipif(not Path(DEBIAN_FASHION_MNIST).is_dir(), reason="Debian's dataset-fashion-mnist is not installed")
def test_a_classic_benchmark_through_the_command_line(tmp_path):
    """Fashion-MNIST from Debian's files: one experience's ridge statistics, then its accuracy."""
    factories = ["--model", "avalanche_tmc.factories:small_cnn", "--model-option", "width=16",
                 "--data", "avalanche_tmc.factories:split_fmnist",
                 "--data-option", f"dataset_root={DEBIAN_FASHION_MNIST}"]
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
    cli = [sys.executable, "-m", "avalanche_tmc.cli"]
    train = subprocess.run([*cli, "train-component", "--experience", "0", "--method", "stats-ridge", "--quiet", "--out",
                            str(tmp_path), *factories], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=300)
    assert train.returncode == 0, train.stderr[-3000:]
    assert "Warning" not in train.stderr  # no third-party warning at start
    done = subprocess.run([*cli, "evaluate", str(tmp_path / "experience-0.safetensors"), "--json", "--quiet",
                           *factories], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {r["experience"]: r["accuracy"] for r in json.loads(done.stdout)["per_experience"]}
    assert rows[0] > 0.7  # two classes learned from their statistics
    assert all(rows[e] == 0 for e in (1, 2, 3, 4))  # classes never seen are never predicted


@pytest.mark.integration
def test_digits_factories_are_offline_and_the_same_in_every_process(tmp_path):
    bm = digits(n_experiences=5, seed=0)
    assert sum(len(e.dataset) for e in bm.train_stream) + sum(len(e.dataset) for e in bm.test_stream) == 1797 - 400
    net = digits_cnn()
    state = {k: v.clone() for k, v in net.state_dict().items()}
    # another process, with two threads and an empty cache (so it pre-trains): bit for bit the
    # same pre-trained weights and seeded head
    code = ("import torch, hashlib; from avalanche_tmc.factories import digits_cnn; torch.set_num_threads(2); "
            "sd = digits_cnn().state_dict(); print(hashlib.sha256(b''.join(v.numpy().tobytes() for v in "
            "sd.values())).hexdigest())")
    env = dict(os.environ, AVALANCHE_TMC_CACHE=str(tmp_path / "empty-cache"))
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT,
                           env=env)
    assert list((tmp_path / "empty-cache").rglob("*.safetensors")), "the other process pre-trained and cached"
    import hashlib

    assert other.stdout.strip() == hashlib.sha256(b"".join(v.numpy().tobytes() for v in state.values())).hexdigest()
    # pre-trained: far better than chance on the digits it never saw, once a head is fitted (nearest class mean)
    from avalanche_tmc.models.training_free import penultimate

    features = penultimate(net)
    x = torch.stack([bm.train_stream[0].dataset[i][0] for i in range(len(bm.train_stream[0].dataset))])
    y = torch.tensor([bm.train_stream[0].dataset[i][1] for i in range(len(bm.train_stream[0].dataset))])
    with torch.no_grad():
        phi = features(x)
    means = torch.stack([phi[y == c].mean(0) for c in y.unique()])
    assert (y.unique()[torch.cdist(phi, means).argmin(1)] == y).float().mean() > 0.9
    assert not torch.equal(digits_cnn(head_seed=1)[-1].weight, net[-1].weight)  # another head seed, another head
    torch.testing.assert_close(digits_cnn(head_seed=1)[0].weight, net[0].weight)  # the same pre-trained body


@pytest.fixture
def digits_cache(tmp_path, monkeypatch):
    """An empty cache folder for the pre-trained digits network (the in-memory cache cleared
    before and after, so each call below reads or writes the disk)."""
    from avalanche_tmc.factories import models

    monkeypatch.setenv("AVALANCHE_TMC_CACHE", str(tmp_path / "cache"))
    models._pretrained_digits_state.cache_clear()
    yield tmp_path / "cache" / "digits_cnn"
    models._pretrained_digits_state.cache_clear()


def test_the_pretrained_digits_network_is_cached_on_disk_and_read_back_exactly(digits_cache, monkeypatch):
    from avalanche_tmc.factories import models

    first = digits_cnn(epochs=2, num_classes=None).state_dict()  # the pre-trained head kept
    (cached,) = digits_cache.iterdir()
    assert f"epochs2-split0-torch{torch.__version__}" in cached.name
    # an independent pre-training gives the same weights, bit for bit
    fresh = models._pretrain_digits(0, 2, 0)
    assert all(torch.equal(first[k], fresh[k]) for k in fresh)
    # a new process (the in-memory cache cleared) reads the file instead of pre-training
    models._pretrained_digits_state.cache_clear()
    monkeypatch.setattr(models, "_pretrain_digits", lambda *a: pytest.fail("pre-trained again"))
    again = digits_cnn(epochs=2, num_classes=None).state_dict()
    assert all(torch.equal(first[k], again[k]) for k in first)


def test_a_damaged_or_foreign_cached_network_is_pretrained_again(digits_cache):
    from safetensors.torch import save_file

    from avalanche_tmc.factories import models

    expected = models._pretrain_digits(0, 2, 0)
    path = models._digits_cache_file(0, 2, 0)
    path.parent.mkdir(parents=True)
    for damaged in (b"not a safetensors file", None):
        if damaged is None:  # a readable file of another network
            save_file({"weight": torch.zeros(3)}, str(path))
        else:
            path.write_bytes(damaged)
        models._pretrained_digits_state.cache_clear()
        state = digits_cnn(epochs=2, num_classes=None).state_dict()
        assert all(torch.equal(state[k], expected[k]) for k in expected)
        assert models._read_cached_state(path, expected) is not None  # replaced by the right weights


def test_small_cnn_is_seeded_and_leaves_the_callers_random_state(tmp_path):
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = small_cnn(in_channels=3, num_classes=4, seed=7)
    assert torch.equal(torch.rand(1), before)
    b = small_cnn(in_channels=3, num_classes=4, seed=7)
    assert all(torch.equal(p, q) for p, q in zip(a.state_dict().values(), b.state_dict().values()))
    assert a(torch.randn(2, 3, 32, 32)).shape == (2, 4)
    path = tmp_path / "cnn.safetensors"
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in a.state_dict().items()}, str(path))
    c = small_cnn(in_channels=3, num_classes=4, seed=99, weights=path)
    assert all(torch.equal(p, q) for p, q in zip(a.state_dict().values(), c.state_dict().values()))


def test_torchvision_weights_from_a_file_or_torchs_cache_never_downloaded(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    reference = torchvision_model(name="mobilenet_v3_small", num_classes=None, seed=3)  # random, seeded
    file = tmp_path / "mine.pth"
    torch.save(reference.state_dict(), file)
    net = torchvision_model(name="mobilenet_v3_small", num_classes=7, weights=str(file), seed=0)
    assert net.classifier[3].out_features == 7
    torch.testing.assert_close(net.features[0][0].weight, reference.features[0][0].weight)
    with pytest.raises(WeightsNotFoundError, match=r"not in torch's cache .*mobilenet_v3_small-047dcff4\.pth.*"
                                                   r"Nothing is downloaded"):
        torchvision_model(name="mobilenet_v3_small", weights="IMAGENET1K_V1")
    cached = tmp_path / "torch" / "hub" / "checkpoints" / "mobilenet_v3_small-047dcff4.pth"
    cached.parent.mkdir(parents=True)
    torch.save(reference.state_dict(), cached)
    from_cache = torchvision_model(name="mobilenet_v3_small", num_classes=7, weights="IMAGENET1K_V1", seed=0)
    assert all(torch.equal(p, q) for p, q in zip(from_cache.state_dict().values(), net.state_dict().values()))
    with pytest.raises(ValueError, match="no weights 'IMAGENET9K'"):
        torchvision_model(name="mobilenet_v3_small", weights="IMAGENET9K")
    with pytest.raises(WeightsNotFoundError):
        torchvision_model(name="mobilenet_v3_small", weights=str(tmp_path / "missing.pth"))


def test_timm_weights_from_a_file_or_the_cache_never_downloaded(tmp_path, monkeypatch):
    pytest.importorskip("timm")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
    reference = timm_model(name="test_resnet", num_classes=None, seed=1)
    file = tmp_path / "w.safetensors"
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in reference.state_dict().items()}, str(file))
    net = timm_model(name="test_resnet", num_classes=5, weights=str(file))
    assert net(torch.randn(2, 3, 32, 32)).shape == (2, 5)
    body = [k for k in reference.state_dict() if not k.startswith(("fc.", "head"))]
    assert all(torch.equal(net.state_dict()[k], reference.state_dict()[k]) for k in body)
    with pytest.raises(WeightsNotFoundError, match="timm/test_resnet.*not in the Hugging Face cache"):
        timm_model(name="test_resnet", weights="cache")


@pytest.mark.parametrize("n_experiences, seed", [(5, 0), (2, 3), (10, 1)])
def test_digits_is_a_current_avalanche_benchmark_with_nc_benchmarks_experiences(n_experiences, seed):
    """Issue 42, B8: digits returned the deprecated nc_benchmark's NCScenario, so task_incremental_benchmark and
    with_task_labels failed with Avalanche's errors. Both work now, and the experiences are nc_benchmark's."""
    import warnings

    from avalanche.benchmarks import nc_benchmark
    from avalanche.benchmarks.scenarios import task_incremental_benchmark, with_task_labels

    from avalanche_tmc.factories.benchmarks import _classification_dataset, digits_splits

    bm = digits(n_experiences=n_experiences, seed=seed)
    parts = digits_splits(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = nc_benchmark(_classification_dataset(*parts["train"]), _classification_dataset(*parts["test"]),
                                 n_experiences=n_experiences, task_labels=False, seed=seed)
    for stream, expected in ((bm.train_stream, reference.train_stream), (bm.test_stream, reference.test_stream)):
        assert len(stream) == len(expected) == n_experiences
        for exp, ref in zip(stream, expected):
            x, y = (torch.stack([exp.dataset[i][k] if k == 0 else torch.tensor(exp.dataset[i][k])
                                 for i in range(len(exp.dataset))]) for k in (0, 1))
            rx = torch.stack([ref.dataset[i][0] for i in range(len(ref.dataset))])
            ry = torch.tensor([ref.dataset[i][1] for i in range(len(ref.dataset))])
            assert torch.equal(x, rx) and torch.equal(y, ry)
    tasks = task_incremental_benchmark(digits(n_experiences=n_experiences, seed=seed))
    assert [e.task_label for e in tasks.train_stream] == list(range(n_experiences))
    assert [e.dataset[0][2] for e in tasks.test_stream] == list(range(n_experiences))  # (x, y, t) samples
    # with_task_labels reads the task labels the datasets carry: those task_incremental_benchmark gave
    assert [e.task_label for e in with_task_labels(tasks).train_stream] == list(range(n_experiences))
    assert [e.task_label for e in digits(n_experiences=n_experiences, return_task_id=True).train_stream] \
        == list(range(n_experiences))
    assert [sorted(e.classes_in_this_experience) for e in bm.train_stream] == \
        [sorted(e.classes_in_this_experience) for e in reference.train_stream]


def test_digits_splits_ten_classes_into_uneven_experiences():
    bm = digits(n_experiences=3)
    classes = [sorted(set(int(t) for t in e.dataset.targets)) for e in bm.train_stream]
    assert [len(c) for c in classes] == [4, 3, 3] and sorted(sum(classes, [])) == list(range(10))
    with pytest.raises(ValueError, match="1 to 10"):
        digits(n_experiences=11)


def test_a_cached_network_holding_nan_is_pretrained_again_not_trained_on(digits_cache):
    """Issue 52, item 11: a NaN cache of the right names and shapes was used, and the
    training on it reported as diverged without naming the cache."""
    from safetensors.torch import save_file

    from avalanche_tmc.factories import models

    expected = models._pretrain_digits(0, 2, 0)
    path = models._digits_cache_file(0, 2, 0)
    path.parent.mkdir(parents=True)
    poisoned = {k: (torch.full_like(v, float("nan")) if v.is_floating_point() else v) for k, v in expected.items()}
    save_file({k: v.contiguous() for k, v in poisoned.items()}, str(path))
    assert models._read_cached_state(path, expected) is None  # damaged: not read
    models._pretrained_digits_state.cache_clear()
    state = digits_cnn(epochs=2, num_classes=None).state_dict()
    assert all(torch.equal(state[k], expected[k]) for k in expected)
    assert models._read_cached_state(path, expected) is not None  # replaced by the right weights
