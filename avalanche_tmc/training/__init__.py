"""Avalanche glue: how a continual-learning user trains with this library.

* :mod:`.plugins`: one plugin per file (task masks, the composition skeleton, the tangent
  plugin, the divergence guard);
* :mod:`.strategies`: the tangent strategies (TMC, TME, TMC-Seq), the analytic-head
  strategy and adapt-then-compose, each a ``SupervisedTemplate`` with its plugins;
* :mod:`.mixins`: the one rollback mechanism (all-or-nothing ``train()``) and
  :mod:`.protocols`, what it needs from a strategy, typed;
* :mod:`.divergence`: :class:`~avalanche_tmc.training.divergence.DivergenceError`, raised by
  every learner whose training diverges;
* :mod:`.forgetting`: the checks that keep ``forget`` exact (replay, distillation);
* :mod:`.adaptation`: adapting a feature network once before it is frozen;
* :mod:`.checkpoint`, :mod:`.metrics`: resuming a run, and loss metrics named for their loss.

Nothing is imported here: import the module you need (or the names from ``avalanche_tmc``).
"""

__all__: list = []
