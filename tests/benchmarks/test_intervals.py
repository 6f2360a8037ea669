"""Mean, standard deviation, paired 95% intervals and the verdict rule (benchmarks.intervals,
benchmarks.verdicts) against independent computations: SciPy's Student t and numbers
worked out by hand."""

import math

import pytest

from benchmarks.intervals import FAILS, HOLDS, NOT_RESOLVED, mean_std, paired_difference, t_quantile, verdict
from benchmarks.verdicts import verdict_rows, verdict_table


def test_t_quantile_matches_scipy():
    stats = pytest.importorskip("scipy.stats")
    for df in (1, 2, 3, 4, 9, 29, 30, 31, 45, 100, 1000):
        assert t_quantile(df) == pytest.approx(stats.t.ppf(0.975, df), abs=2e-4)
    with pytest.raises(ValueError):
        t_quantile(0)


def test_mean_and_sample_std_by_hand():
    assert mean_std([0.5]) == (0.5, 0.0)
    mean, std = mean_std([0.40, 0.46, 0.37])
    assert mean == pytest.approx(0.41)
    # deviations -0.01, 0.05, -0.04: squares sum 0.0042, / (n - 1) = 0.0021
    assert std == pytest.approx(math.sqrt(0.0021))


def test_paired_difference_uses_the_common_seeds_and_the_t_interval():
    tmc = {0: 0.4583, 1: 0.3950, 2: 0.3733, 7: 0.9}
    soup = {0: 0.3517, 1: 0.3167, 2: 0.3250}
    d = paired_difference(tmc, soup)
    diffs = [0.4583 - 0.3517, 0.3950 - 0.3167, 0.3733 - 0.3250]
    mean = sum(diffs) / 3
    std = math.sqrt(sum((x - mean) ** 2 for x in diffs) / 2)
    assert (d.n, d.mean, d.std) == (3, pytest.approx(mean), pytest.approx(std))
    assert d.half_width == pytest.approx(4.3027 * std / math.sqrt(3))
    assert paired_difference({0: 1.0}, {1: 1.0}) is None


@pytest.mark.parametrize("better, worse, expected", [
    ([0.50, 0.52, 0.51], [0.40, 0.41, 0.40], HOLDS),  # +0.107 ± 0.016: above 0
    ([0.40, 0.41, 0.40], [0.50, 0.52, 0.51], FAILS),
    ([0.46, 0.40, 0.37], [0.35, 0.32, 0.33], NOT_RESOLVED),  # +0.078 with half-width 0.12
    ([0.46], [0.35], NOT_RESOLVED),  # one seed decides nothing
])
def test_verdict_rule_on_constructed_seeds(better, worse, expected):
    d = paired_difference(dict(enumerate(better)), dict(enumerate(worse)))
    assert verdict(d) == expected


def _rows(finals, scenario="class"):
    """Final-accuracy rows of one run: {method: [accuracy per seed]}."""
    return [dict(dataset="d", scenario=scenario, tasks=2, regime="r", method=m, model="composed", after_task=2,
                 eval_exp="all", accuracy=a, seed=s) for m, accs in finals.items() for s, a in enumerate(accs)]


def test_verdict_table_judges_each_claim_its_rows_allow():
    rows = _rows({"tmc": [0.50, 0.52, 0.51], "soup": [0.40, 0.41, 0.40], "tme": [0.46, 0.60, 0.45],
                  "tmc-seq": [0.30, 0.31, 0.29]})
    judged = {r["claim"]: r for r in verdict_rows(rows)}
    assert judged["TMC > Soup"]["verdict"] == HOLDS and judged["TMC > Soup"]["seeds"] == 3
    assert judged["TMC > Soup"]["difference"] == pytest.approx(100 * (0.50 + 0.52 + 0.51 - 0.40 - 0.41 - 0.40) / 3)
    assert judged["TME > TMC"]["verdict"] == NOT_RESOLVED
    assert judged["TMC > TMC-Seq (class-IL)"]["verdict"] == HOLDS
    assert "TMC-Seq > TMC (data-IL)" not in judged and "TMC > LwF" not in judged  # not run
    table = verdict_table(rows)
    assert "| TMC > Soup | +10.7 [" in table and "**holds**" in table
    assert "**not resolved at 3 seeds**" in table and "TMC > LwF" not in table
    data = {r["claim"] for r in verdict_rows(_rows({"tmc": [0.4, 0.5], "tmc-seq": [0.6, 0.7]}, "data"))}
    assert data == {"TMC-Seq > TMC (data-IL)"}


def test_the_best_rival_claims_compare_with_the_rival_of_the_highest_mean():
    """"TMC > the best replay method": judged against DER when DER's mean is above ER's,
    in every scenario it was run in; the cell names the rival."""
    finals = {"tmc": [0.50, 0.52, 0.51, 0.50, 0.53], "er": [0.45, 0.46, 0.44, 0.47, 0.45],
              "der": [0.49, 0.55, 0.50, 0.52, 0.51], "lwf": [0.20, 0.22, 0.21, 0.20, 0.19],
              "ewc": [0.25, 0.23, 0.26, 0.24, 0.25]}
    for scenario in ("class", "task", "data"):
        judged = {r["claim"]: r for r in verdict_rows(_rows(finals, scenario))}
        replay = judged["TMC > the best replay method (ER, DER)"]
        # against DER (mean 0.514 > ER's 0.454): differences +0.01, -0.03, +0.01, -0.02, +0.02
        assert replay["rival"] == "der" and replay["verdict"] == NOT_RESOLVED and replay["seeds"] == 5
        assert replay["difference"] == pytest.approx(100 * (-0.01 / 5))
        free = judged["TMC > the best replay-free (LwF, EWC)"]
        assert free["rival"] == "ewc" and free["verdict"] == HOLDS
        assert free["difference"] == pytest.approx(100 * (2.56 - 1.23) / 5)
    table = verdict_table(_rows(finals))
    assert "(vs DER): **not resolved at 5 seeds**" in table and "(vs EWC): **holds**" in table
    # with one rival run, the claim is judged against it
    only_er = {r["claim"]: r for r in verdict_rows(_rows({m: finals[m] for m in ("tmc", "er")}))}
    assert only_er["TMC > the best replay method (ER, DER)"]["rival"] == "er"
    assert only_er["TMC > the best replay method (ER, DER)"]["verdict"] == HOLDS
