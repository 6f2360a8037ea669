"""Measurement: is a network adapted on the first experience a better base point for TMC?

``python -m experiments.adapted_tmc --preset offline`` does, on each run of the preset,
what the ``adapt-ridge`` row does to choose its adaptation (the candidates of
``benchmarks.methods``, chosen on a validation split of experience 0), keeps the
fine-tuned network (a ``"none"`` or tangent choice is replaced by the best fine-tuned
candidate), and trains TMC's components around it instead of around the pre-trained
``w`` — every experience, the first included, from that one adapted point, with the
run's tangent learning rate and epochs. It prints the final accuracies of TMC and of the
ensemble of its components (``tme-tmc``) around
both base points. Forgetting stays exact for experiences after the first (their
components are independent); the first experience is in the base point itself.
"""

import tempfile
from typing import Dict, Optional, Sequence

import torch

from avalanche_tmc import fine_tune, select_adaptation
from benchmarks.methods import method_groups
from benchmarks.methods.builders import adaptation_candidates, with_new_head
from benchmarks.run import final_accuracies, run_group
from benchmarks.runner.presets import PRESETS
from experiments.common import prepare_run, preset_parser

__all__ = ["measure", "main"]


def measure(run: Dict, *, data_root: Optional[str] = None, weights: Optional[str] = None) -> Dict[str, object]:
    """TMC / TME final accuracies around the pre-trained and the adapted network on one run
    of a preset (``data_root``, ``weights``: as ``benchmarks.run``'s options)."""
    bm, top, cfg, _ = prepare_run(run, data_root=data_root, weights=weights)
    net = with_new_head(top, cfg)
    candidates = [c for c in adaptation_candidates(net, cfg) if c.how == "fine-tune" and c.layer is None]
    chosen, _ = select_adaptation(net, bm.train_stream[0].dataset, candidates, seed=cfg.seed)
    adapted = fine_tune(net, bm.train_stream[0].dataset, chosen)
    tangent = next(g for g in method_groups() if g.name == "tangent")
    result: Dict[str, object] = {"adaptation": chosen.describe()}
    logs = tempfile.mkdtemp(prefix="adapted_tmc_")  # Avalanche's CSV logs of the two runs
    for base_name, base in (("pre-trained", top), ("adapted", adapted)):
        torch.manual_seed(cfg.seed)
        rows = run_group(tangent, tangent.row_names, bm, base, cfg, dict(scenario=run["scenario"]),
                         logs, components=False)
        for method, accuracy in final_accuracies(rows, run["tasks"]).items():
            result[f"{method} around {base_name} w"] = accuracy
    return result


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Print the measurement for every run of a preset."""
    parser = preset_parser(__doc__)
    args = parser.parse_args(argv)
    from benchmarks.networks.arithmetic import runner_arithmetic

    runner_arithmetic()  # the runner's one CPU arithmetic (AVX2), before torch computes
    for run in PRESETS[args.preset]:
        result = measure(run, data_root=args.data_root, weights=args.weights)
        print(f"{run['scenario']}-{run['dataset']}: "
              + ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k}: {v}" for k, v in result.items()),
              flush=True)


if __name__ == "__main__":
    main()
