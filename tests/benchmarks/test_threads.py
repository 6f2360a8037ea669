"""A row is the same however it is run (issue 51): the runner's arithmetic is done with one
intra-op thread (:mod:`benchmarks.networks.threads`), in its own process, in a forked job,
and beside other methods alike."""

import csv

import pytest
import torch
import torchvision
from torch.utils.data import TensorDataset

from benchmarks.networks.threads import fixed_threads
from benchmarks.networks.trunk import cache_features, split_backbone


def test_fixed_threads_sets_and_restores_the_count():
    before = torch.get_num_threads()
    with fixed_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match=">= 1"):
        with fixed_threads(0):
            pass


def test_cached_features_do_not_depend_on_the_threads_of_the_preparing_process():
    """MobileNet-V3's convolutions on a batch of 8 round differently on one and two threads
    (seen on 34da1e0: the main job's last training batch); the cache is made on one."""
    torch.manual_seed(0)
    model = torchvision.models.mobilenet_v3_small(num_classes=4).eval()
    x = torch.randn(8, 3, 64, 64)
    trunk, _ = split_backbone(model, "classifier", x[:2])
    data = TensorDataset(x, torch.arange(8) % 4)
    before = torch.get_num_threads()
    try:
        cached = {}
        for threads in (2, 1):
            torch.set_num_threads(threads)
            cached[threads] = cache_features(trunk, data).tensors[0]
    finally:
        torch.set_num_threads(before)
    assert torch.equal(cached[1], cached[2])
    with torch.no_grad(), fixed_threads(1):
        assert torch.equal(cached[1], trunk(x))  # one thread's arithmetic, whatever the process had


# the main job's regime (Lite0 from block 6 on at 64 px, batch 32) on a few digits: 260 training
# images, so that the features' last batch of 4 rounds otherwise on two threads (as the main
# job's last batch of 8 did), and SGD at a large learning rate long enough to turn a difference
# in the last bits into another accuracy; small enough for the second tier
LAYOUT = ["--dataset", "digits", "--data-option", "train_per_class=26", "--data-option", "test_per_class=30",
          "--tasks", "2", "--image-size", "64", "--freeze-until", "blocks.6", "--epochs", "6", "--batch-size", "32",
          "--scenario", "class", "--lr", "0.1", "--lr-tangent", "0.01"]


def _cells(out, method):
    with open(out / "results.csv", encoding="utf-8") as f:
        return [(r["seed"], r["scenario"], r["model"], r["after_task"], r["eval_exp"], r["accuracy"])
                for r in csv.DictReader(f) if r["method"] == method and r["seed"] == "1"]


@pytest.mark.integration
def test_a_row_is_the_same_in_process_in_a_forked_job_and_beside_another_method(tmp_path):
    """One SGD row (Naive) and one tangent row (TMC): seed 1 alone in this process (one
    thread, or the process's default), in a forked job beside seed 0, and beside another
    method group, bit for bit (on 34da1e0 the in-process run trained on the cores' threads and
    prepared the features with them)."""
    from benchmarks import run

    def main(name, *extra):
        run.main(LAYOUT + ["--out", str(tmp_path / name), *extra])
        return {m: _cells(tmp_path / name, m) for m in ("naive", "tmc")}

    alone = main("alone", "--methods", "naive,tmc", "--seeds", "1,", "--jobs", "1")
    assert alone["naive"] and alone["tmc"]
    assert main("one-thread", "--methods", "naive,tmc", "--seeds", "1,", "--jobs", "1", "--threads", "1") == alone
    assert main("forked", "--methods", "naive,tmc", "--seeds", "0,1", "--jobs", "2") == alone
    beside = main("beside", "--methods", "ewc,naive,tmc,soup", "--seeds", "1,", "--jobs", "1")
    assert beside == alone
