"""The one experience-seed rule (avalanche_tmc.experience_seed): its values, its refusals,
and the runner and the library using the same rule."""

import pytest
import torch

from avalanche_tmc import experience_seed, seed_experience


def test_the_rule_is_a_thousand_per_run_seed_plus_the_experience_id():
    assert experience_seed(0, 0) == 0 and experience_seed(0, 4) == 4  # seed 0: the experience id
    assert experience_seed(3, 7) == 3007
    pairs = [(s, e) for s in range(5) for e in (0, 1, 999)]
    assert len({experience_seed(s, e) for s, e in pairs}) == len(pairs)  # no two pairs share a torch seed


@pytest.mark.parametrize("seed, experience, match", [(-1, 0, "run seed"), (0, 1000, "outside"), (2, -1, "outside")])
def test_ids_that_would_collide_are_refused(seed, experience, match):
    with pytest.raises(ValueError, match=match):
        experience_seed(seed, experience)


def test_seed_experience_seeds_torch_by_the_rule():
    seed_experience(2, 5)
    drawn = torch.rand(3)
    torch.manual_seed(2005)
    assert torch.equal(drawn, torch.rand(3))


def test_the_runner_seeds_experiences_with_the_library_s_rule():
    pytest.importorskip("timm")
    from benchmarks.runner import groups as training_loop

    assert training_loop.experience_seed is experience_seed
