"""What a strategy whose knowledge is an :class:`~avalanche_tmc.composition.additive.AdditiveComposition`
offers to code outside it (parallel training, component files, checkpoints): the small
protocol through which persistence and distribution act on a strategy. Torch only.
"""

from typing import Any, Dict, Hashable, Iterable, List, Mapping

import torch

from .additive import AdditiveComposition

__all__ = ["ComposableLearner", "learner_device"]


def learner_device(strategy: Any) -> torch.device:
    """Where a strategy's learned tensors live, and where tensors brought in from elsewhere
    (another process, a file) are put: its ``device`` (an Avalanche strategy's), else the CPU."""
    return torch.device(getattr(strategy, "device", None) or "cpu")


class ComposableLearner:
    """What a strategy whose knowledge is an :class:`AdditiveComposition` offers to code
    outside it (parallel training, component files, checkpoints), so that no caller
    inspects strategy types or private fields. The tangent strategies and
    :class:`~avalanche_tmc.AnalyticHeadStrategy` implement it.

    * :attr:`payload`: ``"delta"`` or ``"statistics"``;
    * :meth:`learned`: the composition (read it; change it through the methods below);
    * :meth:`replace_learned`: put another composition in its place, returning the old one;
    * :meth:`check_independent`: raise unless components are independent (TMC-Seq is not);
    * :meth:`learned_settings`: what must agree between processes that compose together;
    * :meth:`installed`: after members were merged in, put the model in line and record
      each experience's classes (``classes``: key -> task label -> classes);
    * :meth:`learned_classes`, :meth:`component_settings`: what component files record;
    * :meth:`base_network`: the fixed pre-trained network (what checkpoints are checked against).
    """

    payload = ""

    def learned(self) -> AdditiveComposition:
        raise NotImplementedError

    def replace_learned(self, composition: AdditiveComposition) -> AdditiveComposition:
        raise NotImplementedError

    def check_independent(self, what: str) -> None:
        """Raise ``ValueError`` when components are not independent (``what``: the use)."""

    def learned_settings(self) -> Dict[str, Any]:
        raise NotImplementedError

    def installed(self, classes: Mapping[Hashable, Mapping[int, Iterable[int]]]) -> None:
        raise NotImplementedError

    def learned_classes(self) -> Dict[Hashable, Dict[int, List[int]]]:
        """Key -> task label -> classes of every member (what component files record)."""
        raise NotImplementedError

    def component_settings(self) -> Dict[str, Any]:
        """How the members were made, recorded in component files (mode, head, ...)."""
        raise NotImplementedError

    def base_network(self) -> "torch.nn.Module":
        """The fixed pre-trained network the members belong to (what a checkpoint of the
        strategy must share with the strategy it is loaded into)."""
        raise NotImplementedError
