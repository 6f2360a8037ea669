"""Adapt once, then compose by statistics: first-session adaptation with exact forgetting.

``AdaptThenComposeStrategy`` adapts the installed digits CNN once, on the first experience
(here it chooses between no adaptation and fine-tuning, by a held-out part of that
experience only), freezes it, then learns every experience training-free: a
ridge head from per-experience statistics that are summed. So any later experience is
forgotten exactly: ``forget(3)`` gives the model of a run that never saw experience 3,
which the example trains too and compares. Data: scikit-learn's digits in 5
class-incremental experiences (``avalanche_tmc.factories:digits``).

Run: ``python -m examples.adapt_then_compose`` (about 25 s of CPU time).
"""

from typing import Dict

from avalanche.evaluation.metrics import accuracy_metrics
from avalanche.training.plugins import EvaluationPlugin

from avalanche_tmc import Adaptation, AdaptThenComposeStrategy
from avalanche_tmc.factories import digits, digits_cnn

CANDIDATES = [Adaptation("none"), Adaptation("fine-tune", 1e-2, 2)]  # also: Adaptation("tangent", lr, epochs)
ACCURACY = "Top1_Acc_Stream/eval_phase/test_stream"  # digits() has no task labels: no /TaskTTT


def evaluator() -> EvaluationPlugin:
    return EvaluationPlugin(accuracy_metrics(stream=True), loggers=[])


def adapt_then_compose(experiences) -> AdaptThenComposeStrategy:
    """The strategy after training on ``experiences`` (adapted on the first one)."""
    strategy = AdaptThenComposeStrategy(network=digits_cnn(), num_classes=10, adaptation=CANDIDATES, head="ridge",
                                        evaluator=evaluator())
    for experience in experiences:
        strategy.train(experience)
    return strategy


def main() -> Dict[str, float]:
    bm = digits()
    results = {}
    strategy = adapt_then_compose(bm.train_stream)
    print("validation accuracy of each candidate on experience 0: " + "; ".join(
        f"{c.describe()}: {score:.4f}" for c, score in strategy.adaptation_scores))
    print(f"chosen: {strategy.adaptation_choice.describe()}")
    results["adapt then compose"] = strategy.eval(bm.test_stream)[ACCURACY]
    strategy.forget(3)
    results["adapt then compose, experience 3 forgotten"] = strategy.eval(bm.test_stream)[ACCURACY]
    never = adapt_then_compose([e for e in bm.train_stream if e.current_experience != 3])
    results["adapt then compose, never saw experience 3"] = never.eval(bm.test_stream)[ACCURACY]
    for name, value in results.items():
        print(f"{name:45s} accuracy {value:.4f}")
    return results


if __name__ == "__main__":
    main()
