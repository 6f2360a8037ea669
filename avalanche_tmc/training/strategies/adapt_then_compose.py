"""``AdaptThenComposeStrategy``: adapt the feature network once
(:mod:`avalanche_tmc.training.adaptation`), freeze it, then learn every experience
training-free by summed statistics (an
:class:`~avalanche_tmc.training.strategies.training_free.TrainingFreeStrategy` on the adapted
features)."""

import warnings
from dataclasses import replace
from typing import Any, Dict, Hashable, List, Optional, Sequence, Tuple, Union

from torch import nn
from torch.utils.data import Dataset

from ...composition.statistics import HeadStats
from ...models.training_free import TrainingFreeClassifier, penultimate
from ...tangent import find_head
from ..adaptation import Adaptation, adapt_features, select_adaptation
from .training_free import TrainingFreeStrategy

__all__ = ["AdaptThenComposeStrategy"]


class AdaptThenComposeStrategy(TrainingFreeStrategy):
    """Adapt the feature network once, freeze it, then learn every experience training-free.

    The adaptation runs on ``adaptation_data`` when given (at the first ``train()`` call),
    else on the first experience trained. ``adaptation`` is one :class:`Adaptation`, or a
    sequence of candidates chosen by :func:`select_adaptation` on a validation split of
    the adaptation data (``adaptation_scores`` keeps every candidate's validation
    accuracy, ``adaptation_choice`` the one used). After that the strategy is an
    :class:`~avalanche_tmc.training.strategies.training_free.TrainingFreeStrategy` on the adapted features:
    per-experience statistics, summed, head in closed form; experiences after the first
    can be computed in parallel and are forgotten exactly.

    Forgetting the experience the network was adapted on removes its statistics, but
    its imprint on the features (the adapted weights, or only the chosen layer when the
    choice is ``"none"``) stays: that is not exact unlearning, so ``forget`` refuses
    it unless ``inexact=True`` (then it warns). With a separate ``adaptation_data`` every
    experience is forgotten exactly.

    Plugin callbacks: as :class:`~avalanche_tmc.training.strategies.training_free.TrainingFreeStrategy`,
    the ``before/after_backward`` and ``before/after_update`` callbacks never fire. The
    adaptation does back-propagate, but in its own loop
    (:func:`~avalanche_tmc.training.adaptation.adapt_features`, run inside
    ``before_training_exp``), which fires no plugin callback: plugins see the adapted
    network, not its training.

    :param network: the classifier to adapt (a ``num_classes`` head; copied, never modified).
    :param head: ``"ridge"`` or ``"ncm"``; ``projection_dim``: RanPAC-style random features.
    Other keyword arguments: as :class:`~avalanche_tmc.training.strategies.training_free.TrainingFreeStrategy`.
    """

    def __init__(self, *, network: nn.Module, num_classes: int,
                 adaptation: Union[Adaptation, Sequence[Adaptation]] = Adaptation(),
                 adaptation_data: Optional[Dataset] = None, head: str = "ridge",
                 projection_dim: Optional[int] = None, seed: int = 0, val_fraction: float = 0.2, **kwargs: Any):
        candidates = [adaptation] if isinstance(adaptation, Adaptation) else list(adaptation)
        if not candidates or not all(isinstance(c, Adaptation) for c in candidates):
            raise TypeError("adaptation must be an Adaptation or a non-empty sequence of them.")
        out = find_head(network)
        if network.get_submodule(out).out_features != num_classes:
            raise ValueError(f"The network's head {out!r} has {network.get_submodule(out).out_features} outputs, "
                             f"not num_classes={num_classes}; replace it first (avalanche_tmc.replace_head).")
        model = TrainingFreeClassifier(penultimate(network, out), num_classes, head=head, projection_dim=projection_dim,
                                   seed=seed)
        super().__init__(model=model, **kwargs)
        self.network = network
        self.candidates = candidates
        self.adaptation_data = adaptation_data
        self.val_fraction = val_fraction
        self.seed = seed
        self.adaptation_choice: Optional[Adaptation] = None
        self.adaptation_scores: List[Tuple[Adaptation, float]] = []
        self.adapted_on: Optional[Hashable] = None  # experience id, or "adaptation set"

    def _adapt(self, data: Dataset, source: Hashable) -> None:
        if len(self.candidates) > 1:
            choice, self.adaptation_scores = select_adaptation(
                self.network, data, self.candidates, val_fraction=self.val_fraction, seed=self.seed,
                device=str(self.device), projection_dim=self.model.projection_dim)
        else:
            choice, self.adaptation_scores = replace(self.candidates[0], seed=self.seed), []
        self.model.features = adapt_features(self.network, data, replace(choice, seed=self.seed),
                                             str(self.device)).to(self.device)
        self.model.projection = None  # re-drawn (same seed) on the new features' width
        self.adaptation_choice, self.adapted_on = choice, source

    def _before_training_exp(self, **kwargs: Any) -> None:
        if self.adapted_on is None:
            if self.adaptation_data is not None:
                self._adapt(self.adaptation_data, "adaptation set")
            else:
                self._adapt(self.experience.dataset, self.experience.current_experience)
        super()._before_training_exp(**kwargs)

    def snapshot_learner(self) -> Dict[str, Any]:
        """The training-free head's learned state plus the adapted features and the choice made."""
        return dict(super().snapshot_learner(), features=self.model.features, adapted_on=self.adapted_on,
                    choice=self.adaptation_choice, scores=list(self.adaptation_scores))

    def restore_learner(self, snap: Dict[str, Any]) -> None:
        """Go back exactly to a :meth:`snapshot_learner`."""
        super().restore_learner(snap)
        self.model.features, self.adapted_on = snap["features"], snap["adapted_on"]
        self.adaptation_choice, self.adaptation_scores = snap["choice"], snap["scores"]

    def base_network(self) -> nn.Module:
        """The network the features were adapted from (given, never modified): what the
        statistics belong to, whatever the adaptation made of it."""
        return self.network

    def forget(self, exp_id: Hashable, stats: Optional[HeadStats] = None, *, inexact: bool = False) -> None:
        """Remove an experience's statistics; refused for the adaptation experience
        unless ``inexact=True`` (its imprint on the features stays)."""
        if exp_id == self.adapted_on:
            message = (f"Experience {exp_id!r} adapted the feature network (or chose its layer): forgetting it removes "
                       "its statistics, but what it taught the features stays, so the result is not the model that "
                       "never saw it.")
            if not inexact:
                raise ValueError(message + " Pass inexact=True to remove its statistics anyway, or adapt on a "
                                 "separate adaptation set (adaptation_data=...) so that every experience is "
                                 "forgotten exactly.")
            warnings.warn(message, stacklevel=2)
        super().forget(exp_id, stats)
