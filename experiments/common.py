"""What every study does first: a preset run's data, scenario, trained top and settings."""

import argparse
from typing import Any, Dict, NamedTuple, Optional

import torch
from torch import nn
from torch.utils.data import Dataset

from benchmarks.methods import TrainConfig
from benchmarks.presets import PRESETS
from benchmarks.run import prepare
from benchmarks.scenarios import make_scenario

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
    with the run's classes, epochs, tangent learning rate and β, scenario seed 0."""
    train, test, top = prepare(run, data_root=data_root, weights=weights)
    bm = make_scenario(run["scenario"], train, test, run["tasks"], seed=0)
    cfg = TrainConfig(num_classes=int(torch.as_tensor(train.targets).max()) + 1, epochs=run["epochs"],
                      lr_tangent=run["lr_tangent"], beta=run["beta"], tangent_epochs=run.get("tangent_epochs"))
    return PreparedRun(bm, top, cfg, test)


def preset_parser(doc: str) -> argparse.ArgumentParser:
    """A study's command line: ``--preset`` (default ``offline``), ``--data-root`` and
    ``--weights`` (as ``benchmarks.run``'s); the description is ``doc``'s first line."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--preset", default="offline", choices=list(PRESETS))
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--weights", default=None)
    return parser
