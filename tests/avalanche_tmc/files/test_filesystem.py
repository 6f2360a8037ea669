"""Writes and reads on the file system (issue 21): exclusive atomic writes, temporaries of
dead writers removed, only regular files read."""

import multiprocessing
import os
import signal
import socket
import stat
import subprocess
import sys
import time

import pytest
import torch

import avalanche_tmc.files as cf
from avalanche_tmc import TangentModel
from avalanche_tmc.files.filesystem import atomic_path, check_writable, write_atomically
from tests.avalanche_tmc.files.common import ROOT, same_net
from tests.helpers import NUM_CLASSES, random_delta


def _write_once(path, barrier, results, model_state):
    model = TangentModel(same_net(), num_classes=NUM_CLASSES)
    component = cf.tangent_component(model, random_delta(model), 0)
    barrier.wait()
    try:
        cf.save_component(component, path, overwrite=False)
        results.put("won")
    except cf.ComponentExistsError:
        results.put("exists")


def test_of_two_concurrent_exclusive_writers_exactly_one_wins(tmp_path):
    """Issue 21: two `compose` without --overwrite writing the same --out both succeeded (10 of 10 tries)."""
    context = multiprocessing.get_context("fork")
    for attempt in range(10):
        path = str(tmp_path / f"out-{attempt}.safetensors")
        barrier, results = context.Barrier(2), context.Queue()
        workers = [context.Process(target=_write_once, args=(path, barrier, results, None)) for _ in range(2)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(60)
        assert sorted(results.get(timeout=5) for _ in workers) == ["exists", "won"], attempt
        cf.load_component(path)
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]


@pytest.mark.integration
def test_an_existing_output_is_kept_and_temporaries_of_dead_writers_are_removed(files, tmp_path, model):
    """Issue 21: a SIGKILLed compose sometimes left a partial .tmp."""
    before = open(files[0], "rb").read()
    with pytest.raises(cf.ComponentExistsError, match="exists"):
        cf.save_component(cf.load_component(files[1]), files[0], overwrite=False)
    assert open(files[0], "rb").read() == before
    dead = subprocess.Popen(["true"])
    dead.wait()
    host = socket.gethostname()
    stale = tmp_path / f".experience-0.safetensors.{host}.{dead.pid}.abcd.tmp"
    alive = tmp_path / f".experience-0.safetensors.{host}.{os.getppid()}.abcd.tmp"  # a writer still running
    stale.write_bytes(b"partial")
    alive.write_bytes(b"partial")
    cf.save_component(cf.load_component(files[0]), files[0])
    assert not stale.exists() and alive.exists()
    assert [c.experience for c in cf.load_components(str(tmp_path))] == [0, 1, None]


class _Alarm:
    def __enter__(self):
        signal.signal(signal.SIGALRM, lambda *_: (_ for _ in ()).throw(TimeoutError("the read blocked")))
        signal.alarm(10)

    def __exit__(self, *exc):
        signal.alarm(0)


def test_only_regular_files_are_read(tmp_path):
    """Issue 21: a FIFO hung load_components; a symlink to /dev/zero read until memory ran out."""
    fifo = tmp_path / "experience-0.safetensors"
    os.mkfifo(fifo)
    zero = tmp_path / "experience-1.safetensors"
    zero.symlink_to("/dev/zero")
    with _Alarm():
        for path in (fifo, zero, tmp_path):
            with pytest.raises(cf.ComponentFileError, match="not a regular file"):
                cf.load_component(str(path))
        with pytest.raises(cf.ComponentFileError, match="not a regular file"):
            cf.load_components(str(tmp_path))


_WRITER = """
import sys, torch
import avalanche_tmc.files as cf
tensors = {"x": torch.randn(2_000_000)}
print("ready", flush=True)
while True:
    cf.save_component(cf.Component("composition", "delta", tensors, 0.0, [], {}), sys.argv[1])
"""


@pytest.mark.integration
def test_temporaries_of_killed_writers_are_removed_by_the_next_write(tmp_path):
    """Issue 21: a SIGKILLed compose sometimes left a partial .tmp behind."""
    path = tmp_path / "out.safetensors"
    left = 0
    for _ in range(3):
        writer = subprocess.Popen([sys.executable, "-c", _WRITER, str(path)], cwd=ROOT, stdout=subprocess.PIPE)
        assert writer.stdout.readline().strip() == b"ready"
        time.sleep(0.5)
        writer.kill()
        writer.wait()
        left += len([n for n in os.listdir(tmp_path) if n.endswith(".tmp")])
    cf.save_component(cf.Component("composition", "delta", {"x": torch.zeros(3)}, 0.0, [], {}), str(path))
    assert [n for n in os.listdir(tmp_path) if n.endswith(".tmp")] == [], left


def test_exclusive_writes_without_hard_links(files, tmp_path, monkeypatch):
    def no_links(*args):
        raise PermissionError("hard links are not supported here")

    monkeypatch.setattr(os, "link", no_links)
    component = cf.load_component(files[0])
    out = str(tmp_path / "out.safetensors")
    cf.save_component(component, out, overwrite=False)
    with pytest.raises(cf.ComponentExistsError):
        cf.save_component(component, out, overwrite=False)
    assert cf.load_component(out).sha256 == component.sha256
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]


def test_an_atomic_write_puts_exactly_the_bytes_in_place_and_refuses_to_replace_when_told(tmp_path):
    path = tmp_path / "new" / "out.bin"
    write_atomically(str(path), b"abc")  # the directory is made
    assert path.read_bytes() == b"abc"
    write_atomically(str(path), b"defg")
    assert path.read_bytes() == b"defg"
    with pytest.raises(cf.ComponentExistsError, match="exists"):
        write_atomically(str(path), b"x", overwrite=False)
    assert path.read_bytes() == b"defg" and os.listdir(path.parent) == ["out.bin"]  # no temporaries left


def test_atomic_path_puts_the_file_written_to_the_temporary_in_place_or_nothing(tmp_path):
    """Issue 32: the one atomic write for writers that want a path (the benchmark runner's
    CSVs, tables, plots and progress files use it too)."""
    path = tmp_path / "new" / "results.csv"
    with atomic_path(path) as tmp:
        assert tmp.parent == path.parent and tmp.name.endswith(".tmp") and not path.exists()
        tmp.write_text("a,b\n", encoding="utf-8")
    assert path.read_text(encoding="utf-8") == "a,b\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644 & ~_umask()  # an ordinary file, not mkstemp's 0o600
    with pytest.raises(RuntimeError), atomic_path(path) as tmp:
        tmp.write_text("half", encoding="utf-8")
        raise RuntimeError("killed half way")
    assert path.read_text(encoding="utf-8") == "a,b\n" and os.listdir(path.parent) == ["results.csv"]
    path.chmod(0o600)
    with atomic_path(path, mode=stat.S_IMODE(path.stat().st_mode)) as tmp:  # keep the replaced file's mode
        tmp.write_text("c\n", encoding="utf-8")
    assert path.read_text(encoding="utf-8") == "c\n" and stat.S_IMODE(path.stat().st_mode) == 0o600


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_check_writable_makes_the_folder_and_raises_the_os_error(tmp_path):
    check_writable(tmp_path / "a" / "b")  # made
    assert (tmp_path / "a" / "b").is_dir() and os.listdir(tmp_path / "a" / "b") == []
    (tmp_path / "file").write_text("x")
    with pytest.raises(OSError):
        check_writable(tmp_path / "file" / "sub")  # under a file: cannot be made


def test_file_names_in_errors_have_their_control_characters_escaped(files, tmp_path):
    """Issue 30, case 9: a refused file whose name holds terminal escape sequences was echoed raw in the error."""
    evil = tmp_path / "x\x1b]0;owned\x07\x1b[2J.safetensors"
    evil.write_bytes(b"not a safetensors file at all")
    errors = []
    for attempt in (lambda: cf.load_component(str(evil)), lambda: cf.load_component(str(tmp_path / "gone\x1b[31m")),
                    lambda: cf.save_component(cf.load_component(files[0]), str(evil), overwrite=False),
                    lambda: cf.read_key_file(str(tmp_path / "key\x1b[2J"))):
        with pytest.raises((cf.ComponentFileError, cf.ComponentExistsError)) as error:
            attempt()
        errors.append(str(error.value))
    relabelled = tmp_path / "y\x1b[2J.safetensors"
    relabelled.write_bytes(open(files[0], "rb").read())
    with pytest.raises(cf.IncompatibleComponentsError) as error:  # a name inside a message about two files
        cf.compose_components([cf.load_component(files[0]), cf.load_component(str(relabelled))])
    errors.append(str(error.value))
    assert all("\x1b" not in e and "\x07" not in e for e in errors), errors
    assert all("\\x1b" in e for e in errors), errors
