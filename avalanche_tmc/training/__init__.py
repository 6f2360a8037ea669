"""Avalanche glue: how a continual-learning user trains with this library.

* :mod:`.plugins`: one plugin per file (task masks, the composition skeleton, the tangent
  plugin, the divergence guard);
* :mod:`.strategies`: the tangent strategies (TMC, TME, TMC-Seq), the training-free
  strategy and adapt-then-compose, each a ``SupervisedTemplate`` with its plugins;
* :mod:`.rollback`: the one rollback mechanism (all-or-nothing ``train()``), and
  :mod:`.loaders`, data loaders that never shard an experience over processes;
* :mod:`.protocols`: every protocol of a strategy, typed: what the rollback needs, what
  files and processes use a strategy through (``ComposableLearner``), and the component
  store its component files go through (this package imports neither
  :mod:`avalanche_tmc.files` nor :mod:`avalanche_tmc.distributed` /
  :mod:`avalanche_tmc.distributed_setup`);
* :mod:`.losses`: the Rescaled Square Loss;
* :mod:`.registry`: the strategy registry (``register_strategy`` / ``create_strategy`` /
  ``list_strategies``: one name per strategy, for users, the command line and the runner);
* :mod:`.seeding`: the one rule seeding each experience's training (``1000·seed + id``);
* :mod:`.divergence`: :class:`~avalanche_tmc.training.divergence.DivergenceError`, raised by
  every learner whose training diverges;
* :mod:`.exact_forgetting`: the checks that keep ``forget`` exact (replay, distillation);
* :mod:`.adaptation`: adapting a feature network once before it is frozen;
* :mod:`.metrics`: loss metrics named for their loss (resuming a run is
  :mod:`avalanche_tmc.files.learned` and :mod:`avalanche_tmc.files.checkpoint`).

Nothing is imported here: import the module you need (or the names from ``avalanche_tmc``).
"""

__all__: list = []
