"""The one rule that seeds each experience's training, wherever it runs.

A component trained from the pre-trained point is a function of its data and of the random
state its training starts from. Seeding that state by the run's seed and the experience id
alone makes the component the same whether it is trained in this process, on another rank
(:func:`avalanche_tmc.distributed.train_parallel`), in a silo (``avalanche-tmc
train-component``) or by the benchmark runner, and whatever was trained or evaluated before
it.
"""

import torch

__all__ = ["EXPERIENCES_PER_SEED", "experience_seed", "seed_experience"]

EXPERIENCES_PER_SEED = 1000
"""Experience ids per run seed: run seed ``s`` owns the torch seeds ``1000·s … 1000·s + 999``,
so no two (run seed, experience) pairs share a torch seed."""


def experience_seed(seed: int, experience: int) -> int:
    """The torch seed of experience ``experience``'s training in run seed ``seed``:
    ``1000·seed + experience`` (seed 0 gives the experience id).

    :raises ValueError: a negative seed, or an experience id outside ``0…999`` (it would
        share a torch seed with an experience of another run seed).
    """
    seed, experience = int(seed), int(experience)
    if seed < 0:
        raise ValueError(f"A run seed must be >= 0, got {seed}.")
    if not 0 <= experience < EXPERIENCES_PER_SEED:
        raise ValueError(f"Experience id {experience} is outside 0..{EXPERIENCES_PER_SEED - 1}: it would share a "
                         "torch seed with another run seed's experience; renumber the experiences from 0.")
    return EXPERIENCES_PER_SEED * seed + experience


def seed_experience(seed: int, experience: int) -> None:
    """``torch.manual_seed(experience_seed(seed, experience))``: call it right before
    training the experience."""
    torch.manual_seed(experience_seed(seed, experience))
