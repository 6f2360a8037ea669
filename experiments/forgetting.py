"""Measurement: is forgetting exact on a real run? The paper's unlearning claim, checked.

``python -m experiments.forgetting --preset offline`` trains TMC on every experience of
each run of the preset, forgets one experience (``--forget``, default 1), and compares
with a TMC trained from scratch on the other experiences only: the largest difference of
the composed δ, of the logits on the test set, and the two test accuracies. Exact
forgetting gives differences at float rounding and equal accuracies.
"""

from typing import Dict, Optional, Sequence

import torch
from torch.utils.data import DataLoader

from avalanche_tmc import TangentModel, TMCStrategy
from benchmarks.methods import TrainConfig
from benchmarks.methods.builders import tangent_base
from benchmarks.runner.presets import PRESETS
from experiments.common import prepare_run, preset_parser

__all__ = ["measure", "main"]


@torch.no_grad()
def _logits(model: TangentModel, delta, dataset) -> torch.Tensor:
    model.eval()
    return torch.cat([model.forward_with(batch[0], delta) for batch in DataLoader(dataset, batch_size=256)])


def _tmc(top, cfg: TrainConfig) -> TMCStrategy:
    cfg = cfg.for_family("tangent")
    return TMCStrategy(model=TangentModel(tangent_base(top, cfg)), lr=cfg.lr_tangent, beta=cfg.beta,
                       train_mb_size=cfg.batch_size, train_epochs=cfg.epochs, evaluator=None)


def measure(run: Dict, forget: int = 1, *, data_root: Optional[str] = None,
            weights: Optional[str] = None) -> Dict[str, float]:
    """TMC with experience ``forget`` forgotten vs TMC never trained on it, on one run of a
    preset (``data_root``, ``weights``: as ``benchmarks.run``'s options)."""
    bm, top, cfg, test = prepare_run(run, data_root=data_root, weights=weights)
    if not 0 <= forget < len(bm.train_stream):
        raise ValueError(f"--forget must be an experience id in 0..{len(bm.train_stream) - 1}, got {forget}.")
    full, without = _tmc(top, cfg), _tmc(top, cfg)
    for exp in bm.train_stream:
        # each component's shuffling seeded by its experience, as on separate machines: a
        # component is then a function of its data alone, in both runs
        torch.manual_seed(1000 + exp.current_experience)
        full.train(exp)
        if exp.current_experience != forget:
            torch.manual_seed(1000 + exp.current_experience)
            without.train(exp)
    full.forget(forget)
    forgotten, never = full.tangent_plugin.composition.composed(), without.tangent_plugin.composition.composed()
    delta_gap = max(float((forgotten[n] - never[n]).abs().max()) for n in never)
    logits_full, logits_without = _logits(full.model, forgotten, test), _logits(without.model, never, test)
    targets = torch.as_tensor(test.targets)
    return {
        "max |delta difference|": delta_gap,
        "max |delta|": max(float(v.abs().max()) for v in never.values()),
        "max |logit difference|": float((logits_full - logits_without).abs().max()),
        "accuracy, forgotten": float((logits_full.argmax(1) == targets).float().mean()),
        "accuracy, never trained": float((logits_without.argmax(1) == targets).float().mean()),
    }


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Print the measurement for every run of a preset."""
    parser = preset_parser(__doc__)
    parser.add_argument("--forget", type=int, default=1, help="the experience id to forget")
    args = parser.parse_args(argv)
    from benchmarks.networks.arithmetic import runner_arithmetic

    runner_arithmetic()  # the runner's one CPU arithmetic (AVX2), before torch computes
    for run in PRESETS[args.preset]:
        result = measure(run, args.forget, data_root=args.data_root, weights=args.weights)
        print(f"{run['scenario']}-{run['dataset']}: " + ", ".join(f"{k} {v:.3g}" for k, v in result.items()),
              flush=True)


if __name__ == "__main__":
    main()
