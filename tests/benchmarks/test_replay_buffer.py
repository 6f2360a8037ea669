"""Issue 59, item 2: replay sized to the data. A replay buffer that holds the whole training set
replays every past sample (joint training in disguise): the run's header warns, the table says
what fraction of the training set the buffer was, and no claim is judged against such a row."""

from benchmarks.results.claims import NO_VERDICT, verdict_table, whole_buffer_rows
from benchmarks.results.tables import markdown_table
from benchmarks.runner.terminal import replay_text
from tests.benchmarks.oracles import verdict_rows


def _rows(finals, fraction):
    return [dict(dataset="d", scenario="class", tasks=2, backbone="b", method=m, model="composed", after_task=2,
                 eval_exp="all", accuracy=a, train_seconds=1.0, eval_seconds=1.0, regime="r", seed=s, epochs=20,
                 arithmetic="avx2", replay_fraction=fraction if m in ("er", "der") else "")
            for m, accs in finals.items() for s, a in enumerate(accs)]


FINALS = {"tmc": [0.50, 0.51, 0.52, 0.50, 0.51], "er": [0.90, 0.91, 0.92, 0.90, 0.93],
          "der": [0.85, 0.86, 0.84, 0.85, 0.86]}


def test_the_header_says_the_buffer_against_the_training_set_and_warns_when_it_holds_all_of_it():
    assert replay_text(["tangent", "naive"], 300, 1800) == ""
    assert replay_text(["er", "der"], 300, 1800) == (", replay buffer (ER, DER) 300 samples, 17% of the 1800 "
                                                     "training samples")
    whole = replay_text(["er"], 300, 300)
    assert whole.startswith(", replay buffer (ER) 300 samples, 100% of the 300 training samples (WARNING: the buffer "
                            "holds the whole training set") and "no verdict is drawn from their rows" in whole


def test_no_claim_is_judged_against_a_buffer_that_holds_the_whole_training_set():
    small = {r["claim"]: r for r in verdict_rows(_rows(FINALS, 300 / 1800))}
    assert small["TMC > the best replay method (ER, DER)"]["verdict"] == "fails"  # a buffer of a sixth: judged
    whole_rows = _rows(FINALS, 1.0)
    assert whole_buffer_rows(whole_rows) == {("er", ("d", "class", 2, "r")), ("der", ("d", "class", 2, "r"))}
    cell = {r["claim"]: r for r in verdict_rows(whole_rows)}["TMC > the best replay method (ER, DER)"]
    assert cell["verdict"] == NO_VERDICT and cell["withheld"] == "ER's replay buffer holds the whole training set"
    assert "**no verdict** (ER's replay buffer holds the whole training set)" in verdict_table(whole_rows)
    # files written before the column: judged as before
    assert {r["claim"]: r for r in verdict_rows(_rows(FINALS, ""))}["TMC > the best replay method (ER, DER)"][
        "verdict"] == "fails"


def test_the_table_gives_the_buffer_as_a_fraction_of_the_training_set():
    table = markdown_table(_rows(FINALS, 300 / 1800))
    assert "| 300 samples (17% of the training set) |" in table
    assert "300 samples (100% of the training set: all of it, joint training in disguise)" in markdown_table(
        _rows(FINALS, 1.0))
    assert "| 300 samples |" in markdown_table(_rows(FINALS, ""))


def test_a_row_whose_training_loss_rose_is_marked_not_averaged_in_silently():
    """Issue 59, item 1: a diverged component was averaged into TME's mean without a word. A
    row whose training loss ended above twice its start (the divergence guard's record) is
    marked in the table, with the seeds and experiences it happened in."""
    rows = _rows({"tmc": [0.50, 0.51], "tme": [0.21, 0.30]}, "")
    rows = [dict(r, loss_rose="2 3" if r["method"] == "tme" and r["seed"] == 0 else "") for r in rows]
    table = markdown_table(rows)
    assert "| TME | *25.5 ± 6.4* † |" in table and "| TMC | **50.5 ± 0.7** |" in table
    assert ("- † TME, C-d (2 tasks, r): the training loss ended above twice its start or went non-finite in seed 0 "
            "(experience 2 3): "
            "most likely diverged at the learning rate set; its mean includes those seeds") in table


def test_the_buffer_is_300_while_it_is_a_fifth_of_the_data_at_most_else_20_a_class():
    from benchmarks.runner.config import replay_buffer_size

    assert replay_buffer_size(1800, 30) == 300  # the main job's class-IL run: 17%, kept
    assert replay_buffer_size(1500, 10) == 300  # exactly a fifth
    assert replay_buffer_size(300, 10) == 60  # the folder: 20 a class would be 200, a fifth is 60
    assert replay_buffer_size(1400, 10) == 200  # 20 a class, under a fifth
    assert replay_buffer_size(3, 10) == 1
    assert replay_buffer_size(1000, 10, default=100) == 100


def test_the_table_shows_the_buffer_the_rows_record():
    rows = [dict(r, replay_buffer=60 if r["method"] in ("er", "der") else "") for r in _rows(FINALS, 0.2)]
    table = markdown_table(rows)
    assert "| O(1) + buffer 60 | 60 samples (20% of the training set) |" in table
    assert "| 60 samples + logits (20% of the training set) |" in table
