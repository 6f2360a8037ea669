"""Loggers chosen by name (issue 31, item 2): a run resumed in a new process, its strategy and
loggers built again as the docs say (``make_loggers(..., resume=True)``), keeps its CSV logs:
the header once and every row, the rows of an uninterrupted run."""

import csv
import pickle
import warnings

import pytest
import torch
from avalanche.evaluation.metrics import accuracy_metrics
from avalanche.logging import CSVLogger as AvalancheCSVLogger
from avalanche.training.plugins import EvaluationPlugin

from avalanche_tmc import TangentModel, TMCStrategy, load_learned, save_learned
from avalanche_tmc.loggers import AppendingCSVLogger, make_loggers
from avalanche_tmc.training.metrics import CSVLogger, loss_metrics
from tests.helpers import NUM_CLASSES, TinyResNet, small_benchmark

warnings.filterwarnings("ignore", message="No loggers specified")
FILES = ("training_results.csv", "eval_results.csv")


def _build(log_dir, resume):
    """The strategy and its loggers, built the same way in every process of a run."""
    torch.manual_seed(0)
    metrics = dict(epoch=True, experience=True, stream=True)
    evaluator = EvaluationPlugin(accuracy_metrics(**metrics), loss_metrics(**metrics),
                                 loggers=make_loggers(["csv"], str(log_dir), resume=resume))
    model = TangentModel(TinyResNet(num_classes=3), num_classes=NUM_CLASSES)
    return TMCStrategy(model=model, lr=1e-2, train_mb_size=8, train_epochs=2, evaluator=evaluator)


def _run(bm, log_dir, state, stop_after=None, resume=True):
    strategy = _build(log_dir, resume)
    done = load_learned(strategy, str(state)) if state.exists() else []
    for exp in bm.train_stream:
        if exp.current_experience in done:
            continue
        torch.manual_seed(100 + exp.current_experience)
        strategy.train(exp)
        strategy.eval(bm.test_stream)
        save_learned(strategy, str(state))
        if exp.current_experience == stop_after:
            break  # the process dies here: nothing is closed or flushed by hand
    return strategy


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.reader(f))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    bm = small_benchmark(n_experiences=4)
    uninterrupted, resumed = tmp_path_factory.mktemp("uninterrupted"), tmp_path_factory.mktemp("resumed")
    _run(bm, uninterrupted / "logs", uninterrupted / "state.safetensors", resume=False)
    _run(bm, resumed / "logs", resumed / "state.safetensors", stop_after=1)
    _run(bm, resumed / "logs", resumed / "state.safetensors")  # a new strategy goes on from experience 2
    return uninterrupted / "logs" / "csv", resumed / "logs" / "csv"


@pytest.mark.parametrize("name", FILES)
def test_a_resumed_run_keeps_the_header_once_and_every_row(runs, name):
    uninterrupted, resumed = (_rows(folder / name) for folder in runs)
    header = uninterrupted[0]
    assert [row for row in resumed if row == header] == [header] and resumed[0] == header
    # every experience: 4 trained x 2 epochs, or 4 evaluations of the 4-experience test stream
    assert len(uninterrupted) - 1 == (8 if name == "training_results.csv" else 16)
    keys = [tuple(row[:2]) for row in uninterrupted[1:]]  # (experience, epoch) / (evaluated, trained)
    assert [tuple(row[:2]) for row in resumed[1:]] == keys and len(set(keys)) == len(keys)
    # a resumed run ends where an uninterrupted one does: the very same numbers
    assert resumed == uninterrupted


def test_without_resume_the_files_start_afresh_as_avalanche_does(runs, tmp_path):
    make_loggers(["csv"], str(tmp_path / "logs"))[0].close()
    written = tmp_path / "logs" / "csv" / "training_results.csv"
    written.write_text(written.read_text() + "0,1,0.5,0,1.0,0\n")
    fresh = make_loggers(["csv"], str(tmp_path / "logs"))[0]
    assert type(fresh) is CSVLogger
    fresh.close()
    assert len(_rows(written)) == 1


def test_the_headers_are_avalanches(tmp_path):
    avalanche, appending = AvalancheCSVLogger(str(tmp_path / "a")), AppendingCSVLogger(str(tmp_path / "b"))
    for logger in (avalanche, appending):
        logger.close()
    for name in FILES:
        assert (tmp_path / "b" / name).read_text() == (tmp_path / "a" / name).read_text()
    assert isinstance(appending, CSVLogger)  # the named losses are read too


def test_a_row_cut_by_a_crash_is_dropped_and_a_foreign_file_refused(tmp_path):
    logger = AppendingCSVLogger(str(tmp_path))
    logger.print_eval_metrics(0, 0, 0.5, 1.25, 0)
    logger.close()
    path = tmp_path / "eval_results.csv"
    path.write_text(path.read_text() + "1,0,0.2")  # the process died mid-row
    logger = AppendingCSVLogger(str(tmp_path))
    logger.print_eval_metrics(1, 0, 0.25, 2.0, 0)
    logger.close()
    assert _rows(path)[1:] == [["0", "0", "0.5000", "1.2500", "0"], ["1", "0", "0.2500", "2.0000", "0"]]
    (tmp_path / "training_results.csv").write_text("step,loss\n1,2\n")
    with pytest.raises(ValueError, match=r"training_results.csv: its first line is 'step,loss'.*another folder"):
        AppendingCSVLogger(str(tmp_path))
    assert (tmp_path / "training_results.csv").read_text() == "step,loss\n1,2\n"


def test_a_pickled_logger_reopens_its_files_for_appending(tmp_path):
    logger = AppendingCSVLogger(str(tmp_path))
    logger.print_train_metrics(0, 1, 0.5, 0, 3.0, 0)
    copy = pickle.loads(pickle.dumps(logger))
    logger.close()
    copy.print_train_metrics(0, 2, 0.75, 0, 2.0, 0)
    copy.close()
    rows = _rows(tmp_path / "training_results.csv")
    assert rows[0][0] == "training_exp" and [r[1] for r in rows[1:]] == ["1", "2"]


# ---------------------------------------------------------------------------- issue 42, class 3: one writer at a time


def _in_thread(call):
    import threading

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(0.5)
    return thread


def test_a_resume_never_cuts_a_row_another_writer_is_appending(tmp_path):
    """A writer holding the file's lock is mid-row (no newline yet): a logger opened meanwhile
    waits for it instead of dropping the row as if a crash had cut it."""
    import fcntl
    import os

    AppendingCSVLogger(str(tmp_path)).close()
    path = tmp_path / "eval_results.csv"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, b"1,0,0.5000")  # the other writer's row, half written
        opened = []
        thread = _in_thread(lambda: opened.append(AppendingCSVLogger(str(tmp_path))))
        assert thread.is_alive() and not opened  # waiting for the lock
        assert path.read_text().endswith("1,0,0.5000")  # nothing cut
        os.write(fd, b",1.2500,0\n")
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
    thread.join(10)
    assert opened
    opened[0].print_eval_metrics(2, 0, 0.25, 2.0, 0)
    opened[0].close()
    assert _rows(path)[1:] == [["1", "0", "0.5000", "1.2500", "0"], ["2", "0", "0.2500", "2.0000", "0"]]


def test_every_row_is_appended_whole_under_the_lock(tmp_path):
    import fcntl
    import os

    logger = AppendingCSVLogger(str(tmp_path))
    path = tmp_path / "training_results.csv"
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another process is writing
        thread = _in_thread(lambda: logger.print_train_metrics(0, 1, 0.5, 0, 3.0, 0))
        assert thread.is_alive() and len(_rows(path)) == 1  # the row waits, not written in pieces
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
    thread.join(10)
    other = AppendingCSVLogger(str(tmp_path))  # two writers: their rows stay whole
    for epoch in range(5):
        logger.print_train_metrics(0, epoch, 0.5, 0, 3.0, 0)
        other.print_train_metrics(1, epoch, 0.25, 0, 2.0, 0)
    logger.close()
    other.close()
    rows = _rows(path)
    assert all(len(r) == 6 for r in rows) and len(rows) == 1 + 1 + 10


def test_a_row_cut_by_a_writer_that_crashed_meanwhile_is_dropped_before_the_next_row(tmp_path):
    """Another writer died mid-row after this logger opened the file: the next row is not glued onto it."""
    logger = AppendingCSVLogger(str(tmp_path))
    path = tmp_path / "eval_results.csv"
    with open(path, "a") as other:
        other.write("9,9,0.99")  # a crashed writer's half row
    logger.print_eval_metrics(1, 0, 0.25, 2.0, 0)
    logger.close()
    assert _rows(path)[1:] == [["1", "0", "0.2500", "2.0000", "0"]]


@pytest.mark.parametrize("kept", ["whole", "cut"])
def test_a_header_without_its_line_end_is_kept_and_every_later_row_gets_one(tmp_path, kept):
    """Issue 52, item 11: a header line lacking its final newline (a crash between the header
    and its line end, or mid-header) was dropped as a cut row, and every later row written
    without a header."""
    AppendingCSVLogger(str(tmp_path)).close()
    path = tmp_path / "eval_results.csv"
    header = path.read_text().rstrip("\n")
    path.write_text(header if kept == "whole" else header[:5])
    for step in (0, 1):
        logger = AppendingCSVLogger(str(tmp_path))
        logger.print_eval_metrics(step, 0, 0.5, 1.25, 0)
        logger.close()
    assert path.read_text().splitlines()[0] == header
    assert _rows(path)[1:] == [["0", "0", "0.5000", "1.2500", "0"], ["1", "0", "0.5000", "1.2500", "0"]]
    assert path.read_text().endswith("\n")
