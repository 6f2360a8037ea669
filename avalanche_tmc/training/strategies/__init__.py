"""The Avalanche strategies of this library: the tangent strategies (:mod:`.tangent`), the
training-free analytic heads (:mod:`.analytic`) and adapt-then-compose (:mod:`.adapt_then_compose`)."""

from .adapt_then_compose import AdaptThenComposeStrategy
from .analytic import AnalyticHeadStrategy
from .tangent import DEFAULT_LR, TMCSeqStrategy, TMCStrategy, TMEStrategy

__all__ = ["DEFAULT_LR", "TMCStrategy", "TMEStrategy", "TMCSeqStrategy", "AnalyticHeadStrategy",
           "AdaptThenComposeStrategy"]
