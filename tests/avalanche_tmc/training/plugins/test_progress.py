"""``ProgressPlugin`` (the command line's progress bars, now a plugin of its own): the
evaluation accuracy it counts per experience equals Avalanche's accuracy metric and an
accuracy computed by hand, and its bars open and close with each epoch and experience."""

import pytest
import torch

from avalanche_tmc import ProgressPlugin
from tests.helpers import small_benchmark, tmc


@pytest.mark.parametrize("enabled", [True, False])
def test_counts_equal_the_accuracy_computed_by_hand_and_by_avalanche(enabled, capsys):
    progress = ProgressPlugin(enabled=enabled)
    strategy = tmc(plugins=[progress], eval_mb_size=5)  # 16 test images: batches of 5 leave a partial one
    bm = small_benchmark()
    strategy.train(bm.train_stream[0])
    assert progress.bar is None and progress.seen == {}  # training counts nothing, every bar is closed
    metrics = strategy.eval(bm.test_stream)
    assert progress.bar is None
    strategy.model.eval()
    for exp in bm.test_stream:
        x = torch.stack([exp.dataset[i][0] for i in range(len(exp.dataset))])
        y = torch.tensor([exp.dataset[i][1] for i in range(len(exp.dataset))])
        with torch.no_grad():
            right = int((strategy.model(x).argmax(1) == y).sum())
        e = exp.current_experience
        assert (progress.correct[e], progress.seen[e]) == (right, len(y))
        avalanche = metrics[f"Top1_Acc_Exp/eval_phase/test_stream/Task000/Exp{e:03d}"]
        assert progress.correct[e] / progress.seen[e] == pytest.approx(avalanche)
    assert sum(progress.seen.values()) == 16
    err = capsys.readouterr().err
    assert ("evaluating experience 1" in err) == enabled and ("experience 0, epoch 1/1" in err) == enabled
