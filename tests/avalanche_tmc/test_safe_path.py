"""``python -m avalanche_tmc`` imports nothing from its working directory, not even while
the package's ``__init__`` runs (issue 42, class 1)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# modules the package's __init__ (or the command line after it) imports that the interpreter
# has not loaded before `-m` runs it; `-S` (no site) loads fewer at start-up
PLANTED = ("ast", "typing", "avalanche_tmc_torchvision_fallback", "argparse", "json", "pkgutil", "inspect",
           "textwrap", "dataclasses")


@pytest.mark.integration
@pytest.mark.parametrize("module", ["avalanche_tmc", "avalanche_tmc.cli"])
@pytest.mark.parametrize("flags", [[], ["-S"]], ids=["site", "no-site"])
def test_python_m_runs_no_module_planted_in_the_working_directory(tmp_path, module, flags):
    marker = tmp_path / "RAN"
    for name in PLANTED:
        (tmp_path / f"{name}.py").write_text(f"open({str(marker)!r}, 'a').write('{name} ')\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_WAIT_POLICY="PASSIVE")
    done = subprocess.run([sys.executable, *flags, "-m", module, "--help"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert not marker.exists(), f"planted modules ran: {marker.read_text()}"
    assert done.returncode == 0, done.stderr[-3000:]
    assert "usage: avalanche-tmc" in done.stdout


@pytest.mark.integration
def test_the_package_imported_by_another_module_keeps_the_working_directory(tmp_path):
    """Only ``-m avalanche_tmc`` drops it: ``-m`` of the user's own module importing the
    package still finds the user's modules next to it."""
    (tmp_path / "mine.py").write_text("import avalanche_tmc, sys, helper\nprint(helper.VALUE)\n")
    (tmp_path / "helper.py").write_text("VALUE = 'found'\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_WAIT_POLICY="PASSIVE")
    done = subprocess.run([sys.executable, "-m", "mine"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "found"
