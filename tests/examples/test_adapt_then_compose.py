"""``python -m examples.adapt_then_compose`` as a user runs it: the adapted ridge head is
accurate on the digits, and forgetting experience 3 gives the accuracy of the run that
never saw it (exact forgetting of an experience after the adaptation)."""

import re

import pytest

from tests.helpers import run_example


@pytest.mark.integration
def test_adapt_then_compose_is_accurate_and_forgets_exactly():
    out = run_example("-m", "examples.adapt_then_compose")
    accuracy = {m[1].strip(): float(m[2]) for m in re.finditer(r"^(adapt then compose.*?)\s+accuracy ([0-9.]+)$",
                                                                 out, re.MULTILINE)}
    assert "chosen: " in out and "validation accuracy of each candidate" in out
    full = accuracy["adapt then compose"]
    forgotten = accuracy["adapt then compose, experience 3 forgotten"]
    assert full > 0.8  # ridge on the pre-trained features, 10 classes
    assert forgotten == accuracy["adapt then compose, never saw experience 3"]  # printed to 4 decimals
    assert forgotten < full - 0.1  # experience 3's two classes are gone (a fifth of the test images)
