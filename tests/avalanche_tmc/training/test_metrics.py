"""Loss names (issue 19, item 7): TMC's logged loss is the RSL and says so, TME's evaluation
loss is the NLL of its ensemble and says so, both recomputed by hand. (The default learning
rate: test_learning_rate.py.)"""


import pytest
import torch
from avalanche.evaluation.metrics import accuracy_metrics
from avalanche.training.plugins import EvaluationPlugin

from avalanche_tmc import RescaledSquareLoss, TangentModel, TMCStrategy, TMEStrategy, loss_name
from avalanche_tmc.composition.ensemble import nll_of_log_probs
from avalanche_tmc.training.metrics import loss_metrics
from tests.helpers import TinyResNet, small_benchmark


def _run(strategy_class, device):
    torch.manual_seed(0)
    bm = small_benchmark(n_experiences=2)
    model = TangentModel(TinyResNet(num_classes=3), num_classes=4)
    evaluator = EvaluationPlugin(accuracy_metrics(stream=True), loss_metrics(epoch=True, stream=True), loggers=[])
    strategy = strategy_class(model=model, lr=1e-2, train_mb_size=8, evaluator=evaluator, device=device)
    for exp in bm.train_stream:
        strategy.train(exp)
    return strategy, bm, strategy.eval(bm.test_stream)


def _stream(bm):
    xs, ys = zip(*[(x, y) for exp in bm.test_stream for x, y, *_ in [exp.dataset[i] for i in range(len(exp.dataset))]])
    return torch.stack(xs), torch.tensor(ys)


def test_loss_name_of_known_and_unknown_criteria():
    assert loss_name(RescaledSquareLoss()) == "RSL"
    assert loss_name(nll_of_log_probs) == "NLL"
    assert loss_name(torch.nn.CrossEntropyLoss()) == "CE"
    assert loss_name(torch.nn.SmoothL1Loss()) == "SmoothL1Loss"

    class Custom:
        loss_name = "focal"

    assert loss_name(Custom()) == "focal"


def test_tmc_logs_the_rsl_and_tme_the_nll_under_their_names(device):
    tmc, bm, tmc_results = _run(TMCStrategy, device)
    tme, _, tme_results = _run(TMEStrategy, device)
    assert any(k.startswith("RSL_Loss_Epoch/train_phase/") for k in tmc_results)
    assert any(k.startswith("RSL_Loss_Epoch/train_phase/") for k in tme_results)  # TME trains on the RSL too
    assert not any(k.startswith("Loss_") for k in [*tmc_results, *tme_results])
    x, y = (t.to(device) for t in _stream(bm))
    with torch.no_grad():
        rsl = float(RescaledSquareLoss(beta=25.0)(tmc.model.eval()(x), y))
    assert tmc_results["RSL_Loss_Stream/eval_phase/test_stream/Task000"] == pytest.approx(rsl, rel=1e-4)
    key = "NLL_Loss_Stream/eval_phase/test_stream/Task000"
    assert key in tme_results and "RSL_Loss_Stream/eval_phase/test_stream/Task000" not in tme_results
    # the NLL of the softmax ensemble is a few nats; the RSL of the same network is tens
    assert 0 < tme_results[key] < 10 < tmc_results["RSL_Loss_Stream/eval_phase/test_stream/Task000"]


def test_the_default_evaluator_names_the_losses():
    torch.manual_seed(0)
    strategy = TMCStrategy(model=TangentModel(TinyResNet(num_classes=3), num_classes=4))
    names = [str(m) for m in strategy.evaluator.metrics]
    assert "RSL_Loss_Epoch" not in names  # named once a value was averaged: the class says so
    assert {type(m).__name__ for m in strategy.evaluator.metrics} >= {"NamedEpochLoss", "NamedStreamLoss"}
