"""The seed count a confirmatory run needs (benchmarks.results.seed_count) against hand-worked
examples: Student's t at Holm's strictest step, the machine margin, equivalence within ±δ."""

import pytest

from benchmarks.results.seed_count import (
    DIFFERENCE,
    EQUIVALENCE,
    NEVER,
    read_seed_counts,
    seed_count_rows,
    seed_count_table,
    seeds_needed,
)


def no_margin(n):
    return 0.0


def test_a_difference_is_decided_where_its_holm_interval_clears_the_margin():
    """One claim (family 1: the t quantile at 0.975), difference 5 ± std 2 points: at 3 seeds
    the half-width is 4.3027 · 2 / sqrt(3) = 4.968 < 5; a difference of 4 needs 4 seeds
    (3.1824 · 2 / 2 = 3.182 < 4, while 4.968 > 4)."""
    assert seeds_needed(5.0, 2.0, 1, no_margin, 40) == (3, DIFFERENCE)
    assert seeds_needed(-4.0, 2.0, 1, no_margin, 40) == (4, DIFFERENCE)  # either sign (fails)
    # a margin of 1 point: 4 - 3.182 < 1, 4 - 2.7764 · 2 / sqrt(5) = 1.517 > 1
    assert seeds_needed(4.0, 2.0, 1, lambda n: 1.0, 40) == (5, DIFFERENCE)
    # 40 claims: the strictest step's quantile t(1 - 0.05/80, n - 1)
    stats = pytest.importorskip("scipy.stats")
    n, _ = seeds_needed(4.0, 2.0, 40, no_margin, 40)
    half = [stats.t.ppf(1 - 0.05 / 80, k - 1) * 2.0 / k ** 0.5 for k in (n - 1, n)]
    assert half[0] >= 4.0 > half[1]


def test_a_small_difference_is_decided_as_equivalent_where_its_interval_and_margin_fit_inside_delta():
    """Difference 0.5 ± std 1, δ = 2: at 4 seeds 0.5 + 3.1824 / 2 = 2.09 > 2, at 5 seeds
    0.5 + 2.7764 / sqrt(5) = 1.74 < 2; with a margin of 1 the half-width must be under 0.5:
    t(0.975, 17) / sqrt(18) = 0.497, t(0.975, 16) / sqrt(17) = 0.514 - 18 seeds."""
    assert seeds_needed(0.5, 1.0, 1, no_margin, 40, delta=2.0) == (5, EQUIVALENCE)
    assert seeds_needed(0.5, 1.0, 1, lambda n: 1.0, 40, delta=2.0) == (18, EQUIVALENCE)
    assert seeds_needed(0.5, 1.0, 1, lambda n: 1.0, 17, delta=2.0) == (None, NEVER)  # beyond the cap
    assert seeds_needed(1.0, 0.0, 1, lambda n: 1.5, 40, delta=2.0) == (None, NEVER)  # neither, at any count
    with pytest.raises(ValueError):
        seeds_needed(1.0, 1.0, 0, no_margin, 40)
    with pytest.raises(ValueError):
        seeds_needed(1.0, float("nan"), 1, no_margin, 40)


def _rows(finals):
    return [dict(dataset="d", scenario="class", tasks=2, regime="r", method=m, model="composed", after_task=2,
                 eval_exp="all", accuracy=a, seed=s, epochs=20) for m, accs in finals.items()
            for s, a in enumerate(accs)]


def test_the_pilot_s_claims_get_their_seed_counts_and_the_file_reads_back(tmp_path):
    from benchmarks.results.files import write_rows_csv
    from benchmarks.results.machine_moves import MachineMoves
    from benchmarks.results.seed_count import COLUMNS

    finals = {"tmc": [0.500, 0.510, 0.505, 0.495, 0.502], "tmc-seq": [0.499, 0.511, 0.503, 0.495, 0.501],
              "ewc": [0.25, 0.23, 0.26, 0.24, 0.25], "soup": [0.45, 0.50, 0.47, 0.44, 0.49]}
    sgd = MachineMoves("m.csv", seed_sd=2.0, bias=0.0, rows=1, moves=5)
    rows = seed_count_rows(_rows(finals), cap=40, moves=[sgd])
    by_claim = {r["claim"]: r for r in rows}
    assert set(by_claim) == {"TMC > TMC-Seq (class-IL)", "TMC > EWC", "TMC > Soup"}
    assert all(r["family"] == 3 and r["pilot_seeds"] == 5 for r in rows)
    seq, soup = by_claim["TMC > TMC-Seq (class-IL)"], by_claim["TMC > Soup"]
    assert seq["decides"] == EQUIVALENCE and seq["seeds_needed"] <= 5  # tangent rows: no machine margin
    expected = seeds_needed(float(soup["difference"]), float(soup["paired_std"]), 3,
                            lambda n: sgd.margin("soup", n), 40)
    assert (soup["seeds_needed"], soup["decides"]) == expected
    path = write_rows_csv(rows, tmp_path / "seed-count.csv", COLUMNS, "seed-count")
    read = read_seed_counts(path)
    assert [r["claim"] for r in read] == [r["claim"] for r in rows]
    table = seed_count_table(read)
    assert "| TMC > TMC-Seq (class-IL) |" in table and "a Holm family of m = 3" in table
    with pytest.raises(ValueError, match="no verdicts"):
        seed_count_rows(_rows({m: a[:2] for m, a in finals.items()}), cap=40, moves=[sgd])


def test_the_command_refuses_to_overwrite_its_input_and_says_why_it_cannot_size_a_smoke_run(tmp_path, capsys):
    from benchmarks.results.files import write_csv
    from benchmarks.results.seed_count import main

    results = tmp_path / "results.csv"
    write_csv([dict(r, backbone="b", train_seconds=1.0, eval_seconds=1.0, trained_params=1, lr=0.01, tuned="",
                    setting="", trained_in="") for r in _rows({"tmc": [0.5, 0.6], "ewc": [0.2, 0.3]})], results)
    with pytest.raises(SystemExit):
        main([str(results), "--out", str(results)])
    assert "--out names the pilot's results file" in capsys.readouterr().err
    with pytest.raises(SystemExit) as refused:
        main([str(results), "--out", str(tmp_path / "counts.csv")])
    assert refused.value.code == 2 and "cannot size a confirmatory run" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([str(results), "--cap", "2", "--out", str(tmp_path / "counts.csv")])
