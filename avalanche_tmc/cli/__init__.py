"""``avalanche-tmc``: train, compose, forget, inspect and evaluate components as files.

The federated story in five commands (each silo runs its own; nothing but component
files travels)::

    avalanche-tmc train-component --experience 0 --out silo_a/       # silo A, its data
    avalanche-tmc train-component --experience 1 2 --out silo_b/     # silo B, its data
    avalanche-tmc compose silo_a/*.safetensors silo_b/*.safetensors --out composed.safetensors
    avalanche-tmc evaluate composed.safetensors
    avalanche-tmc forget composed.safetensors silo_b/experience-2.safetensors --out rest.safetensors

The network and the data come from two factories named ``module:function`` (an
installed module, or one on ``PYTHONPATH``) or ``path/to/file.py:function`` (a file, loaded
by its path), called with keyword arguments. The working directory is never searched: a
file there named like a package (``sklearn.py``) must not replace that package, so a
factory file in it is named by path (``./my_factories.py:model``). Keyword arguments:
``--model-option KEY=VALUE`` for the model, ``--data-option KEY=VALUE`` for the data, ``--option KEY=VALUE`` for both:

* ``--model`` returns the pre-trained network, its head sized for the classes (every
  silo must get the same weights: load them from a file, seed a new head);
* ``--data`` returns an Avalanche benchmark (``train_stream``, ``test_stream``); an
  experience id is an index into its training stream.

The defaults, ``avalanche_tmc.factories:digits_cnn`` and ``avalanche_tmc.factories:digits``,
are installed with the library and offline (scikit-learn's digits, a small CNN pre-trained
on digits the benchmark leaves out); :mod:`avalanche_tmc.factories` also has Avalanche's
classic benchmarks on local files (e.g. ``--data avalanche_tmc.factories:split_fmnist
--data-option dataset_root=DIR``) and torchvision/timm backbones.

Run ``train-component`` under ``torchrun --nproc_per_node=N`` to share the experiences
among N processes (:func:`~avalanche_tmc.distributed.train_parallel`); each process writes
the files of the experiences it trained.

The package holds one module per command (``train_component``, ``compose``, ``forget``,
``inspect``, ``evaluate``: each registers its subparser and runs it from explicit values),
the parser that assembles them (``parser``), ``main`` (``app``) and the shared pieces: exit
codes and their mapping (``exits``), argument types (``argtypes``), the shared arguments
(``arguments``), factory loading (``loading``), input and output checks (``outputs``),
loggers (``logs``) and the strategies the commands build (``strategies``).
"""


from .app import entry_point, main
from .exits import (
    EXIT_BAD_FILE,
    EXIT_CODES,
    EXIT_ERROR,
    EXIT_FACTORY,
    EXIT_INCOMPATIBLE,
    EXIT_OK,
    EXIT_PIPE,
    EXIT_TRAINING,
    EXIT_USAGE,
    FactoryError,
    UsageError,
)
from .loading import DEFAULT_DATA, DEFAULT_MODEL, load_factory, parse_options
from .parser import build_parser
from .strategies import methods

__all__ = [
    "EXIT_OK", "EXIT_ERROR", "EXIT_USAGE", "EXIT_BAD_FILE", "EXIT_INCOMPATIBLE", "EXIT_FACTORY", "EXIT_TRAINING",
    "EXIT_PIPE", "EXIT_CODES",
    "FactoryError", "UsageError", "methods", "DEFAULT_MODEL", "DEFAULT_DATA", "load_factory", "parse_options",
    "build_parser", "main", "entry_point",
]
