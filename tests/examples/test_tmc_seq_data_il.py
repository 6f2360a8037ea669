"""``python -m examples.tmc_seq_data_il`` as a user runs it: TMC-Seq learns the digits in
data-incremental experiences (every class each time) far above the pre-trained network's
new head, and more data helps: its accuracy after the last experience beats the first's."""

import re

import pytest

from tests.helpers import run_example

ROW = re.compile(r"^data-IL (?P<method>\S+)\s+final acc (?P<acc>[0-9.]+)\s+after each exp (?P<curve>[0-9. ]+)$")


@pytest.mark.integration
def test_tmc_seq_learns_from_each_data_incremental_experience():
    out = run_example("-m", "examples.tmc_seq_data_il")
    before = float(re.search(r"before training .*: accuracy ([0-9.]+)", out)[1])
    rows = {m["method"]: (float(m["acc"]), [float(a) for a in m["curve"].split()])
            for m in map(ROW.match, out.splitlines()) if m}
    final, curve = rows["tmc-seq"]
    assert len(curve) == 5 and final == curve[-1]
    assert before < 0.2  # a new, untrained head: about chance (0.1)
    assert final > 0.3  # 10 classes: far above chance
    assert final > curve[0] + 0.05  # the later experiences' new images help
