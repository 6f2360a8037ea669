"""The runner's per-epoch progress line (benchmarks.runner.epoch_log): epochs counted 1..K within
each experience, images counted from the minibatches."""

import io

import torch
from avalanche.training.supervised import Naive
from torch import nn

from benchmarks.runner.epoch_log import EpochProgressPlugin
from tests.helpers import NUM_CLASSES, quiet_evaluator, small_benchmark


def test_one_line_per_epoch_numbered_within_each_experience():
    stream = io.StringIO()
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, NUM_CLASSES))
    progress = EpochProgressPlugin("seed 0 naive", total_epochs=2 * 2, stream=stream)
    strategy = Naive(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.01), train_mb_size=8,
                     train_epochs=2, evaluator=quiet_evaluator(), plugins=[progress])
    bm = small_benchmark(n_experiences=2)
    for experience in bm.train_stream:
        strategy.train(experience)
    lines = stream.getvalue().splitlines()
    assert [line.split(":")[0].strip() for line in lines] == [
        "seed 0 naive exp 0 epoch 1/2", "seed 0 naive exp 0 epoch 2/2",
        "seed 0 naive exp 1 epoch 1/2", "seed 0 naive exp 1 epoch 2/2"]
    assert lines[-1].endswith("ETA 0s") and progress.epochs_done == 4
