"""Measurement: which layer should a training-free head read, and does adapting the network help?

``python -m experiments.feature_layers --preset offline`` runs, on each run of the preset,
:class:`~avalanche_tmc.AdaptThenComposeStrategy` with the RanPAC-style head once per
candidate of the runner's ``adapt-ridge`` row (``benchmarks.methods.builders.adaptation_candidates``:
the pre-trained network and the network fine-tuned on experience 0 — whole trained part,
SGD lr 1e-2, 5 epochs — each read at every layer of the trained part), each forced, and
prints every candidate's validation score on experience 0 (what the strategies choose by)
next to its final test accuracy (what they cannot see). It is the table behind the
page docs/adapt-then-compose.md, "Adapt once, then compose by statistics".
"""

from typing import Dict, List, Optional, Sequence

import torch

from avalanche_tmc import AdaptThenComposeStrategy, select_adaptation
from benchmarks.methods.builders import adaptation_candidates, with_new_head
from benchmarks.runner.presets import PRESETS
from experiments.common import prepare_run, preset_parser

__all__ = ["measure", "main"]


def _final_accuracy(strategy: AdaptThenComposeStrategy, bm) -> float:
    for exp in bm.train_stream:
        strategy.train(exp)
    metrics = strategy.eval(bm.test_stream)
    return float(next(v for k, v in metrics.items() if k.startswith("Top1_Acc_Stream/eval_phase/test_stream")))


def measure(run: Dict, *, data_root: Optional[str] = None, weights: Optional[str] = None,
            fine_tune_lr: Optional[float] = 1e-2) -> List[Dict[str, object]]:
    """One dict per candidate (``candidate``, ``validation``, ``test``) on one run of a preset
    (``data_root``, ``weights``: as ``benchmarks.run``'s options); fine-tuned candidates:
    the whole trained part, 5 epochs, at ``fine_tune_lr`` only (``None``: none)."""
    from avalanche.evaluation.metrics import accuracy_metrics
    from avalanche.training.plugins import EvaluationPlugin

    bm, top, cfg, _ = prepare_run(run, data_root=data_root, weights=weights)
    net = with_new_head(top, cfg)
    candidates = [c for c in adaptation_candidates(net, cfg) if c.how == "none" or (
        c.how == "fine-tune" and c.lr == fine_tune_lr and c.epochs == 5 and c.train_from is None)]
    _, scores = select_adaptation(net, bm.train_stream[0].dataset, candidates, seed=cfg.seed,
                                  projection_dim=cfg.projection_dim)
    rows = []
    for candidate, validation in scores:
        torch.manual_seed(cfg.seed)
        strategy = AdaptThenComposeStrategy(
            network=net, num_classes=cfg.num_classes, adaptation=candidate, head="ridge",
            projection_dim=cfg.projection_dim, seed=cfg.seed, train_mb_size=cfg.eval_batch_size,
            eval_mb_size=cfg.eval_batch_size,
            evaluator=EvaluationPlugin(accuracy_metrics(stream=True), loggers=[]))
        rows.append(dict(candidate=candidate.describe(), validation=validation, test=_final_accuracy(strategy, bm)))
    return rows


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Print the measurement for every run of a preset."""
    parser = preset_parser(__doc__)
    args = parser.parse_args(argv)
    from benchmarks.networks.arithmetic import runner_arithmetic

    runner_arithmetic()  # the runner's one CPU arithmetic (AVX2), before torch computes
    for run in PRESETS[args.preset]:
        print(f"{run['scenario']}-{run['dataset']} (validation on experience 0 / final test accuracy):", flush=True)
        for row in measure(run, data_root=args.data_root, weights=args.weights):
            print(f"  {row['candidate']:70s} {row['validation']:.3f} / {100 * row['test']:.2f}", flush=True)


if __name__ == "__main__":
    main()
