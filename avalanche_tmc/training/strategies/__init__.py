"""The Avalanche strategies of this library: the tangent strategies (:mod:`.tangent`), the
training-free heads (:mod:`.training_free`) and adapt-then-compose (:mod:`.adapt_then_compose`)."""

from .adapt_then_compose import AdaptThenComposeStrategy
from .tangent import DEFAULT_LR, TMCSeqStrategy, TMCStrategy, TMEStrategy
from .training_free import TrainingFreeStrategy

__all__ = ["DEFAULT_LR", "TMCStrategy", "TMEStrategy", "TMCSeqStrategy", "TrainingFreeStrategy",
           "AdaptThenComposeStrategy"]
