"""The torchvision import fallback acts only when torchvision's compiled ops cannot load."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(code: str) -> str:
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          cwd=ROOT, check=True).stdout.strip()


# a fresh interpreter, without the hook a .pth file may have installed at start-up
PRELUDE = "import sys; sys.meta_path[:] = [f for f in sys.meta_path " \
          "if type(f).__name__ != '_TorchvisionImportHook']; import avalanche_tmc_torchvision_fallback as f; "


@pytest.mark.integration
def test_torchvision_imports_and_fallback_matches_whether_ops_load():
    out = run(PRELUDE + "import torch, os, importlib.util as u; "
              "d = os.path.dirname(u.find_spec('torchvision').origin); "
              "loads = f._load_compiled_ops(torch, d); f.install(); import torchvision, torchvision.models; "
              "print(loads, f._STATE['fallback'])")
    loads, fallback = out.split()
    assert fallback == str(loads == "False")  # declared exactly when the compiled ops did not load


@pytest.mark.integration
def test_nothing_is_declared_when_the_compiled_ops_load():
    out = run(PRELUDE + "import torch; f._load_compiled_ops = lambda torch, d: True; "
              "print(f.apply(), 'library' in f._STATE)")
    assert out == "False False"
