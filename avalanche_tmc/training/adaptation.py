"""Adapt once, then compose by statistics: a first-session adaptation of the feature network.

What it is for: lifting the ceiling of the training-free heads (:mod:`avalanche_tmc.models.training_free`),
which frozen pre-trained features cap. Following APER/ADAM (Zhou et al. 2023) and
RanPAC's first-session phase (McDonnell et al. 2023), the network is adapted **once** —
on the first experience, or on an adaptation set the user provides — then frozen, and
every experience (the first included) is learned training-free by summed statistics.

:class:`Adaptation` says how: ``"fine-tune"`` (SGD with momentum 0.9, cross-entropy, on
the parameters from ``train_from`` on), ``"tangent"`` (one TMC component: Adam on ``δ``
with the Rescaled Square Loss; the features are then the tangent model's penultimate
features ``φ_w(x) + J φ_w(x)·δ``) or ``"none"``, and which layer's pooled output the
statistics use (``layer``; by default the head's input). :func:`select_adaptation` picks
one of several candidates on a validation split of the adaptation data only. The Avalanche
strategy that adapts, then learns every experience by statistics, is
:class:`~avalanche_tmc.training.strategies.adapt_then_compose.AdaptThenComposeStrategy`.
A diverging adaptation raises :class:`~avalanche_tmc.training.divergence.DivergenceError`.
"""

import copy
from dataclasses import dataclass, replace
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset, Subset

from ..composition.statistics import head_statistics, ridge_head
from ..models.training_free import LayerFeatures, TrainingFreeClassifier, penultimate
from ..tangent import TangentModel, find_head
from .divergence import DivergenceError
from .losses import RescaledSquareLoss

__all__ = ["ADAPTATIONS", "Adaptation", "TangentFeatures", "adapt_features", "fine_tune", "select_adaptation",
           "stratified_holdout", "dataset_targets"]

ADAPTATIONS = ("fine-tune", "tangent", "none")


@dataclass(frozen=True)
class Adaptation:
    """One way to adapt the feature network before it is frozen.

    :param how: ``"fine-tune"``, ``"tangent"`` or ``"none"``.
    :param lr: SGD (momentum 0.9) learning rate for ``"fine-tune"``, Adam's for ``"tangent"``.
    :param epochs: passes over the adaptation data.
    :param train_from: first module (by registration order) whose parameters are adapted;
        earlier ones stay at their pre-trained values. ``None``: all of them.
    :param beta: the Rescaled Square Loss target for ``"tangent"`` (25 class-IL, 5 data-IL).
    :param layer: the module whose output, pooled (:class:`~avalanche_tmc.models.training_free.LayerFeatures`),
        the statistics use; ``None``: the head's input. Any layer of a ``"none"`` or
        ``"fine-tune"`` network; ``"tangent"`` supports only ``None``.
    """

    how: str = "fine-tune"
    lr: float = 1e-2
    epochs: int = 5
    batch_size: int = 32
    train_from: Optional[str] = None
    beta: float = 25.0
    seed: int = 0
    layer: Optional[str] = None

    def __post_init__(self) -> None:
        if self.how not in ADAPTATIONS:
            raise ValueError(f"Adaptation.how must be one of {ADAPTATIONS}, got {self.how!r}.")
        if not 0 < self.lr < float("inf") or self.epochs < 1 or self.batch_size < 1:
            raise ValueError(f"Adaptation needs a positive finite lr and positive epochs and batch size; got lr "
                             f"{self.lr}, epochs {self.epochs}, batch size {self.batch_size}.")
        if self.how == "tangent" and self.layer is not None:
            raise ValueError("A tangent adaptation gives features at the head's input only; use layer=None "
                             "(or how='fine-tune' / 'none' for an earlier layer).")

    def describe(self) -> str:
        """A short human-readable summary (printed with the results)."""
        features = "" if self.layer is None else f"; features: pooled {self.layer}"
        if self.how == "none":
            return "none (pre-trained features)" + features
        part = "all parameters" if self.train_from is None else f"from {self.train_from}"
        optimizer = "SGD" if self.how == "fine-tune" else "Adam, RSL"
        return f"{self.how}, {part}, {optimizer} lr {self.lr:g}, {self.epochs} epochs" + features

    def training(self) -> "Adaptation":
        """This adaptation without its ``layer`` (which does not change the trained
        network): candidates equal under it share one adapted network."""
        return replace(self, layer=None)


class TangentFeatures(nn.Module):
    """The penultimate features of a tangent model at a fixed ``δ``: ``φ_w(x) + J φ_w(x)·δ``."""

    def __init__(self, tangent: TangentModel, delta: Dict[str, Tensor]):
        super().__init__()
        self.tangent = tangent
        self.delta = {n: delta[n].detach().clone() for n in tangent.linearized_names}

    @torch.no_grad()
    def forward(self, x: Tensor) -> Tensor:
        """The features of ``x`` at the fixed ``δ``."""
        return self.tangent.forward_with(x, self.delta)


def _trained_names(network: nn.Module, train_from: Optional[str]) -> List[str]:
    """Parameter names registered at or after module ``train_from`` (all when None)."""
    names = [n for n, _ in network.named_parameters()]
    if train_from is None:
        return names
    starts = [i for i, n in enumerate(names) if n == train_from or n.startswith(train_from + ".")]
    if not starts:
        modules = sorted({n.rsplit(".", 1)[0] for n in names})
        raise ValueError(f"train_from={train_from!r} names no module with parameters; e.g. one of {modules[:8]}.")
    return names[starts[0]:]


def _batches(data: Dataset, batch_size: int, seed: int, shuffle: bool) -> Iterator[Tuple[Tensor, Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    # when training (shuffle), a last batch of one sample is dropped: BatchNorm cannot train on it
    drop_last = shuffle and len(data) % batch_size == 1 and len(data) > batch_size
    for batch in DataLoader(data, batch_size=batch_size, shuffle=shuffle, generator=generator, drop_last=drop_last):
        yield batch[0], torch.as_tensor(batch[1]).long()


def _check_finite(loss: Tensor, epoch: int) -> None:
    if not bool(torch.isfinite(loss)):
        raise DivergenceError(f"The adaptation diverged at epoch {epoch + 1} (loss {float(loss)}); "
                                 "use a smaller learning rate.")


def fine_tune(network: nn.Module, data: Dataset, adaptation: Adaptation, device: str = "cpu") -> nn.Module:
    """A copy of ``network`` (classifier included) fine-tuned on ``data`` as
    ``adaptation`` says (``how="fine-tune"``: SGD, momentum 0.9, cross-entropy, the
    parameters from ``train_from`` on), in eval mode. Deterministic for ``adaptation.seed``."""
    if adaptation.how != "fine-tune":
        raise ValueError(f"fine_tune needs Adaptation(how='fine-tune'), got how={adaptation.how!r}.")
    network = copy.deepcopy(network).to(device)
    torch.manual_seed(adaptation.seed)
    names = _trained_names(network, adaptation.train_from)
    params = dict(network.named_parameters())
    network.requires_grad_(False)
    for n in names:
        params[n].requires_grad_(True)
    optimizer = torch.optim.SGD([params[n] for n in names], lr=adaptation.lr, momentum=0.9)
    network.train()
    for epoch in range(adaptation.epochs):
        for x, y in _batches(data, adaptation.batch_size, adaptation.seed + epoch, shuffle=True):
            loss = F.cross_entropy(network(x.to(device)), y.to(device))
            _check_finite(loss, epoch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return network.eval().requires_grad_(True)


def adapt_features(network: nn.Module, data: Dataset, adaptation: Adaptation,
                   device: str = "cpu") -> nn.Module:
    """A frozen feature network (outputs the head's input) adapted on ``data``.

    :param network: a classifier whose output width is the number of classes of ``data``
        (copied, never modified).
    :param data: ``(x, y, ...)`` samples (an Avalanche experience's dataset works).
    :param device: where it trains; the features are returned there (also when nothing trains).
    Deterministic for ``adaptation.seed``.
    """
    head = find_head(network)
    trained = _trained_names(network, adaptation.train_from)
    if adaptation.how != "none" and all(n.startswith(head + ".") for n in trained):
        adaptation = replace(adaptation, how="none")  # only the head would train: the features stay as they are
    if adaptation.how == "tangent":
        return _tangent_features(network, data, adaptation, head, device)
    if adaptation.how == "fine-tune":
        network = fine_tune(network, data, adaptation, device)
    features = penultimate(network, head) if adaptation.layer is None else LayerFeatures(network, adaptation.layer)
    return features.to(device)  # a copy: the given network stays where it is


def _tangent_features(network: nn.Module, data: Dataset, adaptation: Adaptation, head: str,
                      device: str) -> nn.Module:
    network = copy.deepcopy(network).to(device)
    torch.manual_seed(adaptation.seed)
    names = _trained_names(network, adaptation.train_from)
    tangent = TangentModel(network, head=head, linearize=names)
    optimizer = torch.optim.Adam(tangent.delta_parameters(), lr=adaptation.lr)
    criterion = RescaledSquareLoss(beta=adaptation.beta)
    tangent.train()
    for epoch in range(adaptation.epochs):
        for x, y in _batches(data, adaptation.batch_size, adaptation.seed + epoch, shuffle=True):
            loss = criterion(tangent(x.to(device)), y.to(device))
            _check_finite(loss, epoch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    body = [n for n in names if not n.startswith(head + ".")]
    features = TangentModel(penultimate(tangent.model, head), linearize=body)
    return TangentFeatures(features.eval(), tangent.delta).eval()


def stratified_holdout(targets: Sequence[int], fraction: float, seed: int = 0) -> Tuple[List[int], List[int]]:
    """Seeded ``(kept, held out)`` index lists, ``round(n * fraction)`` of each class held out."""
    targets = torch.as_tensor(targets)
    generator = torch.Generator().manual_seed(seed)
    kept, held = [], []
    for label in torch.unique(targets).tolist():
        idx = torch.nonzero(targets == label).flatten()
        idx = idx[torch.randperm(len(idx), generator=generator)].tolist()
        n_held = int(round(len(idx) * fraction))
        held += idx[:n_held]
        kept += idx[n_held:]
    return sorted(kept), sorted(held)


def dataset_targets(data: Dataset) -> Tensor:
    """The class label of every sample of ``data``: its ``targets`` attribute (a list, array
    or tensor, as torchvision and Avalanche datasets hold them), else read sample by sample."""
    targets = getattr(data, "targets", None)
    if targets is None:
        targets = [int(data[i][1]) for i in range(len(data))]
    return torch.as_tensor(list(targets) if not isinstance(targets, Tensor) else targets)


@torch.no_grad()
def _ridge_validation_accuracy(features: nn.Module, fit: Dataset, val: Dataset, num_classes: int,
                               batch_size: int = 256, projection_dim: Optional[int] = None,
                               seed: int = 0, device: str = "cpu") -> float:
    """Accuracy on ``val`` of a ridge head solved on ``fit``'s features (GCV λ), through
    the head's seeded random projection when ``projection_dim`` is given, on ``device``."""
    head = TrainingFreeClassifier(features, num_classes, projection_dim=projection_dim, seed=seed).to(device)

    def embed(data):
        phis, ys = zip(*((head.embed(x.to(device)), y.to(device))
                         for x, y in _batches(data, batch_size, 0, shuffle=False)))
        return torch.cat(phis), torch.cat(ys)

    phi, y = embed(fit)
    weight, _ = ridge_head(head_statistics(phi, y, num_classes))
    phi_val, y_val = embed(val)
    return float(((phi_val.double() @ weight.double()).argmax(1) == y_val).float().mean())


def select_adaptation(network: nn.Module, data: Dataset, candidates: Sequence[Adaptation], *,
                      val_fraction: float = 0.2, seed: int = 0, device: str = "cpu",
                      projection_dim: Optional[int] = None) -> Tuple[Adaptation, List[Tuple[Adaptation, float]]]:
    """The candidate whose adapted features give the best ridge head (through a seeded
    random projection of ``projection_dim`` when given, as the strategy's head) on a
    held-out part of ``data`` (``val_fraction`` of each class; only ``data`` is ever looked
    at). Each candidate adapts on the rest; candidates that differ only in ``layer`` share
    one adapted network. A diverged candidate scores 0. Ties: the earlier one.

    :return: (the best candidate, every candidate with its validation accuracy).
    """
    if not candidates:
        raise ValueError("select_adaptation needs at least one candidate Adaptation.")
    targets = dataset_targets(data)
    num_classes = int(targets.max()) + 1
    kept, held = stratified_holdout(targets, val_fraction, seed)
    if not kept or not held:
        raise ValueError(f"A validation fraction of {val_fraction} leaves an empty part of {len(data)} samples.")
    fit, val = Subset(data, kept), Subset(data, held)
    scores, fine_tuned = [], {}  # one fine-tuned network (None: diverged) per training setting
    for candidate in candidates:
        seeded = replace(candidate, seed=seed)
        try:
            if seeded.how == "fine-tune":
                key = seeded.training()
                if key not in fine_tuned:
                    fine_tuned[key] = None
                    fine_tuned[key] = fine_tune(network, fit, seeded, device)
                if fine_tuned[key] is None:
                    raise DivergenceError("this training setting diverged on an earlier candidate")
                features = adapt_features(fine_tuned[key], fit, replace(seeded, how="none"), device)
            else:
                features = adapt_features(network, fit, seeded, device)
            score = _ridge_validation_accuracy(features, fit, val, num_classes, projection_dim=projection_dim,
                                               seed=seed, device=device)
        except DivergenceError:
            score = 0.0
        scores.append((candidate, score))
    best = max(scores, key=lambda item: item[1])  # max keeps the first of equal scores
    return best[0], scores
