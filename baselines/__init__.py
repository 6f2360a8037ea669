"""The paper's comparison baselines on the same Avalanche benchmarks as TMC.

* :mod:`baselines.composition`: independent non-linear fine-tuning per experience,
  combined by weight averaging ("soup") or output ensembles ("ens-l", "ens-sm").
* :mod:`baselines.builtin`: Avalanche's own strategies (Naive, ER, LwF, EWC, DER++,
  joint training and its tangent counterpart) configured as in the paper.

Importing this package registers every baseline in the library's strategy registry and
imports neither torch nor Avalanche: :mod:`.builtin` imports them when a strategy is built,
and :mod:`.composition` is imported when one of its names is first read or one of its
strategies is built (the benchmark tables read the baselines' rows without Avalanche).
"""

import avalanche_tmc_torchvision_fallback  # noqa: F401  (first: lets torchvision import on a CPU-only torch)
from avalanche_tmc.training.registry import register_strategy  # standard library only

from .builtin import make_builtin_strategy

__all__ = [
    "IndependentFineTunePlugin",
    "IndependentFineTuneStrategy",
    "average_state_dicts",
    "COMBINE_MODES",
    "make_builtin_strategy",
    "BUILTIN_METHODS",
]

_COMPOSITION = ("IndependentFineTunePlugin", "IndependentFineTuneStrategy", "average_state_dicts", "COMBINE_MODES")


def __getattr__(name: str):
    if name in _COMPOSITION:
        from . import composition

        return getattr(composition, name)
    if name == "BUILTIN_METHODS":
        from . import builtin

        return builtin.BUILTIN_METHODS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _independent(combine: str):
    """``IndependentFineTuneStrategy`` evaluated as ``combine`` (one of ``COMBINE_MODES``)."""
    def build(network, **options):
        from .composition import IndependentFineTuneStrategy

        return IndependentFineTuneStrategy(model=network, combine=combine, **options)

    return build


# The composition baselines' strategies (baselines/composition.py), registered here so that
# registering them imports neither it nor Avalanche.
for _combine, _what in (("soup", "the weight average"), ("ens-l", "the logit ensemble"),
                        ("ens-sm", "the softmax ensemble")):
    register_strategy(_combine, family="non-linear", description=f"independent fine-tunes per experience, {_what} "
                      "(switch with strategy.combine)")(_independent(_combine))
