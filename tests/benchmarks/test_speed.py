"""benchmarks.tools.speed's command line runs end to end on a tiny network (plumbing only: no timed
assertions): presets, refusals, the saved record, the allocator pinning."""

from benchmarks.tools.speed_timing import NETWORKS, NetworkSpec
from tests.helpers import TinyResNet


def test_network_presets_expand_and_unknown_names_are_refused(capsys):
    import pytest

    from benchmarks.tools.speed import _network_names, main
    from benchmarks.tools.speed_timing import PRESETS

    assert _network_names("small,vit_small@224") == list(PRESETS["small"]) + ["vit_small@224"]
    assert _network_names("all") == list(NETWORKS)
    assert all(n in NETWORKS for preset in PRESETS.values() for n in preset)
    with pytest.raises(SystemExit):
        main(["--networks", "resnet19"])
    assert "unknown network(s) ['resnet19']" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--amp", "fp16"])
    assert "--amp fp16 is for CUDA" in capsys.readouterr().err


def test_save_writes_the_tables_headed_by_the_command(tmp_path, monkeypatch):
    import benchmarks.tools.speed as speed

    monkeypatch.setitem(NETWORKS, "tiny", NetworkSpec("tiny", 8, 4, lambda: TinyResNet(in_channels=3, num_classes=5)))
    out = tmp_path / "speed.md"
    speed.main(["--networks", "tiny", "--rounds", "1", "--ensemble-rounds", "0", "--task-counts", "1",
                "--no-pin-allocator", "--save", str(out)])
    text = out.read_text()
    assert text.startswith("<!-- written by: python -m benchmarks.tools.speed --networks tiny --rounds 1")
    assert "| tiny (8px, 4) |" in text and "Inference per batch" in text and "at commit " in text


def test_allocator_pinning_takes_effect_on_glibc():
    """In a process of its own (it changes the allocator of the process that calls it)."""
    import platform
    import subprocess
    import sys

    import pytest

    if platform.system() != "Linux" or not platform.libc_ver()[0] == "glibc":
        pytest.skip("glibc only")
    code = "from benchmarks.tools.speed import pin_allocator; print(pin_allocator())"
    done = subprocess.run([sys.executable, "-c", code],
                          capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "True"
