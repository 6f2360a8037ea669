"""What every study does first: a preset run's data, scenario, trained top and settings."""

import argparse
from typing import Any, Dict, NamedTuple, Optional

from torch import nn
from torch.utils.data import Dataset

from benchmarks.methods import TrainConfig
from benchmarks.protocol.scenarios import make_scenario
from benchmarks.runner.config import Options, RunConfig, train_config
from benchmarks.runner.prepare import num_classes, prepare
from benchmarks.runner.presets import PRESETS

__all__ = ["PreparedRun", "prepare_run", "preset_parser"]


class PreparedRun(NamedTuple):
    """A preset run ready to train: its scenario, the network part every method trains
    (``top``, on cached trunk features), the training settings and the test dataset."""

    bm: Any
    top: nn.Module
    cfg: TrainConfig
    test: Dataset


def prepare_run(run: Dict, *, data_root: Optional[str] = None, weights: Optional[str] = None) -> PreparedRun:
    """Load one run of a preset (``data_root``, ``weights``: as ``benchmarks.run``'s options)
    with the run's training settings (its first seed) as the runner builds them, data seed 0."""
    config = RunConfig.from_dict(run)
    train, test, top = prepare(config, data_root=data_root, weights=weights)
    bm = make_scenario(config.scenario, train, test, config.tasks, seed=0)
    cfg = train_config(config, Options(), num_classes=num_classes(train), seed=config.seeds[0])
    return PreparedRun(bm, top, cfg, test)


def preset_parser(doc: str) -> argparse.ArgumentParser:
    """A study's command line: ``--preset`` (default ``offline``), ``--data-root`` and
    ``--weights`` (as ``benchmarks.run``'s); the description is ``doc``'s first line."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--preset", default="offline", choices=list(PRESETS))
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--weights", default=None)
    return parser
