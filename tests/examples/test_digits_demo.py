"""End to end on real bundled data: sklearn digits, 5 class-incremental experiences, a
small CNN pre-trained on a disjoint pool of digit images (examples/digits_demo.py).

Settings are the demo's (Adam lr 3e-3, 10 epochs, RSL beta 25); the margins are the
paper's qualitative claims, not fitted to one run: TMC clearly beats naive fine-tuning,
TME is not worse than TMC beyond a small tolerance, task-IL evaluation works.
"""

import pytest

from examples.digits_demo import load_digits_splits, make_benchmark, pretrain_backbone, run_method


@pytest.fixture(scope="module")
def setup():
    pre, train, test = load_digits_splits(seed=0)
    return pretrain_backbone(*pre, seed=0), train, test


def test_class_incremental_tmc_beats_naive_and_tme_keeps_up(setup):
    backbone, train, test = setup
    bm = make_benchmark(train, test, n_experiences=5)
    naive, _ = run_method("naive", bm, backbone, epochs=10)
    tmc, tmc_curve = run_method("tmc", bm, backbone, epochs=10, lr=3e-3)
    tme, _ = run_method("tme", bm, backbone, epochs=10, lr=3e-3)
    print(f"class-IL digits: naive {naive:.3f} tmc {tmc:.3f} tme {tme:.3f}")
    assert naive < 0.3  # catastrophic forgetting: about the last experience only
    assert tmc > naive + 0.2
    assert tme >= tmc - 0.03
    assert len(tmc_curve) == 5


def test_task_incremental_evaluation(setup):
    backbone, train, test = setup
    bm = make_benchmark(train, test, n_experiences=5, task_labels=True)
    tmc, _ = run_method("tmc", bm, backbone, epochs=10, lr=3e-3)
    print(f"task-IL digits: tmc {tmc:.3f}")
    assert tmc > 0.85  # 2 classes per task: chance is 0.5
