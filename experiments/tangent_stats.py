"""Measurement: does a TMC-adapted backbone help a head composed by sufficient statistics?

``python -m experiments.tangent_stats --preset offline`` trains TMC components on
each run of the preset, then solves ridge heads (plain and on 2000 random ReLU features)
from summed statistics of three kinds of features:

* ``pretrained``: the frozen pre-trained features (exact, training-free: what ships as
  ``stats-ridge`` / ``ranpac``);
* ``own-delta``: task t's statistics under the features of its own component δ_t, the
  composed δ at test time (parallel, but the summed statistics mix feature maps);
* ``composed-oracle``: every task's statistics under the final composed δ (needs all
  past data again: not a continual method, an upper bound for the combination).

It prints final accuracies; the conclusions are in README.md.
"""

import argparse
from typing import Dict, List, Optional

import torch
from torch.utils.data import DataLoader

from avalanche_tmc import RandomReLUFeatures, TangentModel, head_statistics, ridge_head
from avalanche_tmc.composition.statistics import StatisticsComposition
from avalanche_tmc.models.training_free import penultimate
from benchmarks.methods import method_groups
from benchmarks.methods.strategy import build_strategy
from benchmarks.protocol.scenarios import make_scenario
from benchmarks.runner.config import Options, RunConfig, train_config
from benchmarks.runner.prepare import prepare
from benchmarks.runner.presets import PRESETS


def _batches(dataset, size=256):
    return DataLoader(dataset, batch_size=size, shuffle=False)


@torch.no_grad()
def _features(feature_model: TangentModel, delta, dataset) -> List[torch.Tensor]:
    xs, ys = [], []
    for batch in _batches(dataset):
        xs.append(feature_model.forward_with(batch[0], delta).flatten(1))
        ys.append(batch[1])
    return [torch.cat(xs), torch.cat(ys)]


def _with_bias(phi: torch.Tensor) -> torch.Tensor:
    return torch.cat([phi, torch.ones_like(phi[:, :1])], 1)


def measure(run: Dict, *, data_root: Optional[str] = None, weights: Optional[str] = None) -> Dict[str, float]:
    """Final accuracies of the three feature choices (plain ridge and random features) on
    one run of a preset (``data_root``, ``weights``: as ``benchmarks.run``'s options)."""
    config = RunConfig.from_dict(run)
    train, test, top = prepare(config, data_root=data_root, weights=weights)
    bm = make_scenario(config.scenario, train, test, config.tasks, seed=0)
    num_classes = int(torch.as_tensor(train.targets).max()) + 1
    # (the run's own epochs and tangent lr, as this study measured them; not its tuned values)
    cfg = train_config(config.replace(tuned={}, tangent_epochs=None), Options(), num_classes=num_classes, seed=0)
    tangent = next(g for g in method_groups() if g.name == "tangent")
    strategy = build_strategy(tangent, top, cfg, evaluator=None)
    for exp in bm.train_stream:
        strategy.train(exp)
    features = TangentModel(penultimate(strategy.model.model, strategy.model.head_name))
    keep = set(features.linearized_names)

    def trim(delta):
        return {n: t for n, t in delta.items() if n in keep}

    components = [trim(d) for d in strategy.components.values()]
    composed = trim(strategy.composed_delta)
    zero = {n: torch.zeros_like(t) for n, t in composed.items()}
    test_data = torch.utils.data.ConcatDataset([e.dataset for e in bm.test_stream])
    results = {}
    for name, train_deltas, test_delta in (
        ("pretrained", [zero] * len(components), zero),
        ("own-delta", components, composed),
        ("composed-oracle", [composed] * len(components), composed),
    ):
        phis = [_features(features, d, e.dataset) for d, e in zip(train_deltas, bm.train_stream)]
        phi_test, y_test = _features(features, test_delta, test_data)
        projection = RandomReLUFeatures(phi_test.shape[1], 2000, seed=0)
        for head, fn in (("ridge", lambda p: p), ("rp-ridge", projection)):
            comp = StatisticsComposition()
            for t, (phi, y) in enumerate(phis):
                comp.add(t, head_statistics(_with_bias(fn(phi)), y, num_classes))
            weight, _ = ridge_head(comp.summed())
            pred = (_with_bias(fn(phi_test)).double() @ weight).argmax(1)
            results[f"{name}/{head}"] = float((pred == y_test).float().mean())
    return results


def main() -> None:
    """Run the measurement on every run of a preset and print a table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="offline")
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--weights", default=None)
    args = parser.parse_args()
    from benchmarks.networks.arithmetic import runner_arithmetic

    runner_arithmetic()  # the runner's one CPU arithmetic (AVX2), before torch computes
    for run in PRESETS[args.preset]:
        results = measure(run, data_root=args.data_root, weights=args.weights)
        label = f"{run['scenario']}-{run['dataset']}-{run['tasks']}"
        for key, acc in results.items():
            print(f"{label:28s} {key:26s} {acc:.3f}", flush=True)


if __name__ == "__main__":
    main()
