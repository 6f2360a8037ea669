"""The hyper-parameters every method of a run trains with (:class:`TrainConfig`): a leaf
module (standard library and the protocol's fixed choices only), read by the method
registry, its builders and the runner alike."""

from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Optional, Sequence, Tuple

from benchmarks.protocol.choices import DEFAULT_PROJECTION_DIM

__all__ = ["TrainConfig"]


@dataclass
class TrainConfig:
    """Hyper-parameters shared by every method of a run (built once per run and seed by
    :func:`benchmarks.runner.config.train_config`)."""

    num_classes: int
    epochs: int = 5
    batch_size: int = 32
    eval_batch_size: int = 256
    lr_tangent: float = 1e-3  # Adam, tangent methods
    lr: float = 0.01  # SGD, non-linear methods
    beta: float = 25.0
    milestones: Sequence[int] = ()  # lr x0.1 at these epochs of every experience
    decay_at: Sequence[float] = ()  # lr x0.1 at these fractions of every experience's epochs (e.g. 0.5, 0.75)
    mem_size: int = 300
    projection_dim: int = DEFAULT_PROJECTION_DIM  # RanPAC-style random ReLU features
    slda_shrinkage: float = 1e-4  # Avalanche's StreamingLDA default
    device: str = "cpu"
    seed: int = 0
    bn_batches: Optional[Sequence[Any]] = None  # tangent base point: BatchNorm re-estimated on these
    tangent_epochs: Optional[int] = None  # epochs of the tangent family (None: ``epochs``)
    # tuning unit (:func:`tuning_unit`) -> (learning rate, epochs) chosen for it; wins over the above
    tuned: Mapping[str, Tuple[float, int]] = field(default_factory=dict)
    head_seed: Optional[int] = None  # the new head's initialisation (None: ``seed``); experiments/variance.py
    linearize_from: Optional[str] = None  # tangent methods linearize from this module on (None: everything)
    decay: float = 0.0  # decay on δ of the tangent methods (avalanche_tmc's ``decay``; 0: none)
    decay_kind: str = "norm"
    tme_beta: Optional[float] = None  # the RSL β of TME's own components (None: the scenario's, TMC's)
    schedule: str = "step"  # "step": lr x0.1 from each milestone epoch on; "authors": from the epoch after
    amp: Optional[str] = None  # "bf16" / "fp16": forwards under autocast (AutocastPlugin)
    amp_init_scale: Optional[float] = None  # fp16: the GradScaler's first scale (None: AutocastPlugin's)

    def for_family(self, family: str) -> "TrainConfig":
        """This config as a group of ``family`` sees it: the tangent family trains for
        ``tangent_epochs`` when set (learning rates are already per family)."""
        if family == "tangent" and self.tangent_epochs is not None:
            return replace(self, epochs=self.tangent_epochs)
        return self
