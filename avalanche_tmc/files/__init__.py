"""Persistence: components as files (one tangent component, or one experience's head
statistics, per safetensors file, composed, forgotten and inspected file by file), a
strategy's learned state in one file, and checkpoints of a whole strategy.

* :mod:`.component`: :class:`Component` (what a file holds), the format's constants and
  errors, :func:`describe` (what ``avalanche-tmc inspect`` prints);
* :mod:`.architectures`: the registered names under which files record a network's
  classes (never module paths nor class names), and the earlier names still read;
* :mod:`.bases`: the base a component belongs to (network class and structure, hash of
  the pre-trained weights and buffers, linearized parameters, head) and
  :func:`check_same_base`;
* :mod:`.storage`: :func:`save_component` / :func:`load_component` (safetensors, no
  pickle), with :mod:`.header` (the checks made before any tensor is read),
  :mod:`.signing` (integrity hash, HMAC keys) and :mod:`.filesystem` (atomic, exclusive
  writes; bounded reads of regular files);
* :mod:`.arithmetic`: :func:`compose_components`, :func:`forget_component`,
  :func:`composed_delta`, on :class:`~avalanche_tmc.composition.additive.AdditiveComposition`;
* :mod:`.learners`: components made from a model or a strategy, and files put into a
  strategy (through :class:`~avalanche_tmc.training.protocols.ComposableLearner`), and
  :class:`~avalanche_tmc.files.learners.ComponentFiles`, the component store strategies
  write to and read from (registered on import);
* :mod:`.learned`: :func:`~avalanche_tmc.files.learned.save_learned` /
  :func:`~avalanche_tmc.files.learned.load_learned`, what a strategy learned in one file
  (no pickle), checked like component files;
* :mod:`.checkpoint`: the whole strategy through Avalanche's pickling checkpoints
  (trusted files only), and :func:`~avalanche_tmc.files.checkpoint.checkpoint_identity`.
"""

from .architectures import ARCHITECTURES, EARLIER_NAMES, architecture_name, register_architecture
from .arithmetic import compose_components, composed_delta, forget_component
from .bases import (
    check_same_base,
    model_reference,
    state_dict_sha256,
    statistics_base,
    structure,
    tangent_base,
    weights_sha256,
)
from .component import (
    FORMAT,
    FORMAT_VERSION,
    Component,
    ComponentExistsError,
    ComponentFileError,
    IncompatibleComponentsError,
    content_sha256,
    describe,
)
from .learners import (
    components_for,
    install_composition,
    statistics_component,
    strategy_components,
    strategy_settings,
    tangent_component,
)
from .signing import KEY_ENVIRONMENT, read_key_file, resolve_key
from .storage import component_paths, load_component, load_components, save_component

__all__ = [
    "ARCHITECTURES", "EARLIER_NAMES", "register_architecture", "architecture_name",
    "FORMAT", "FORMAT_VERSION", "ComponentFileError", "IncompatibleComponentsError", "ComponentExistsError",
    "Component", "content_sha256", "describe",
    "state_dict_sha256", "weights_sha256", "structure", "tangent_base", "statistics_base", "model_reference",
    "check_same_base",
    "save_component", "load_component", "component_paths", "load_components",
    "KEY_ENVIRONMENT", "read_key_file", "resolve_key",
    "compose_components", "forget_component", "composed_delta",
    "tangent_component", "statistics_component", "strategy_settings", "strategy_components", "components_for",
    "install_composition",
]
