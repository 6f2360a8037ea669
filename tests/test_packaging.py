"""The distributions: the wheel holds the library only and works in a fresh venv.

``python -m build --no-isolation`` (offline: it uses this environment's setuptools)
builds the sdist from a copy of the source tree, then the wheel *from that sdist*, so
a file missing from the sdist breaks the wheel too. The copy leaves out build
leftovers (``build/``, ``*.egg-info``): setuptools puts whatever is in an old
``build/lib`` into a new wheel.

The wheel is then installed with ``pip install --no-deps`` into a fresh virtual
environment whose only link to this one is a ``.pth`` line naming this environment's
site-packages (for torch and avalanche). ``.pth`` files are not run for directories
added that way, so neither this environment's editable install nor its torchvision
fallback ``.pth`` is active there: what works there, the wheel brought.
"""

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

import avalanche_tmc

ROOT = Path(__file__).resolve().parents[1]
VERSION = avalanche_tmc.__version__
DIST_INFO = f"avalanche_tmc-{VERSION}.dist-info"
WHEEL_TOP_LEVEL = {
    "avalanche_tmc",
    "avalanche_tmc_torchvision_fallback.py",
    "avalanche_tmc_torchvision_fallback.pth",
    DIST_INFO,
}
NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv", "venv", "build", "dist", "site", "*.egg-info", "__pycache__", "*.pyc",
    ".*_cache", ".gl", "results", "runs", "node_modules",
)


def _run(cmd, **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kwargs)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def dists(tmp_path_factory):
    """(wheel, sdist) built by ``python -m build --no-isolation`` from a copy of the source."""
    try:
        import build  # noqa: F401
    except ImportError:
        pytest.fail("the 'build' package is missing: pip install -c constraints.txt -e '.[test]'")
    tmp = tmp_path_factory.mktemp("dist")
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=NOT_SOURCE, symlinks=True)
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(tmp / "out"), str(src)])
    wheels = list((tmp / "out").glob("*.whl"))
    sdists = list((tmp / "out").glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, list((tmp / "out").iterdir())
    return wheels[0], sdists[0]


@pytest.mark.integration
def test_wheel_holds_only_the_library(dists):
    wheel, _ = dists
    assert wheel.name == f"avalanche_tmc-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        metadata = z.read(f"{DIST_INFO}/METADATA").decode()
        pth = z.read("avalanche_tmc_torchvision_fallback.pth").decode()
    assert {n.split("/")[0] for n in names} == WHEEL_TOP_LEVEL
    assert "avalanche_tmc/__init__.py" in names and f"{DIST_INFO}/licenses/LICENSE" in names
    assert not any(n.startswith(("benchmarks/", "baselines/", "examples/", "tests/")) for n in names)
    # the .pth is one import line (Python runs only lines starting with 'import')
    assert pth == "import avalanche_tmc_torchvision_fallback as f; f.install()\n"
    assert f"Version: {VERSION}\n" in metadata
    assert "License-Expression: MIT\n" in metadata
    assert len(re.findall(r"^Classifier: ", metadata, re.M)) >= 3
    for extra in ("test", "benchmarks", "docs"):
        assert f"Provides-Extra: {extra}\n" in metadata
    assert "Requires-Dist: avalanche-lib>=0.6.0\n" in metadata


@pytest.mark.integration
def test_wheel_ships_py_typed(dists):
    """PEP 561: type checkers read the library's hints only if the wheel has ``py.typed``."""
    wheel, _ = dists
    with zipfile.ZipFile(wheel) as z:
        assert "avalanche_tmc/py.typed" in z.namelist()
        assert z.read("avalanche_tmc/py.typed") == b""


@pytest.mark.integration
def test_sdist_holds_the_source(dists):
    _, sdist = dists
    assert sdist.name == f"avalanche_tmc-{VERSION}.tar.gz"
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for needed in ("pyproject.toml", "setup.py", "LICENSE", "README.md", "PKG-INFO",
                   "avalanche_tmc/__init__.py", "avalanche_tmc_torchvision_fallback.py",
                   "tests/conftest.py", "constraints.txt"):
        assert needed in names, needed
    assert not any("__pycache__" in n for n in names)


@pytest.fixture(scope="module")
def fresh_venv(dists, tmp_path_factory) -> Path:
    """A new venv with the wheel installed (``--no-deps``); its python."""
    wheel, _ = dists
    venv = tmp_path_factory.mktemp("venv") / "env"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    site = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    Path(site, "zz_project_env.pth").write_text("\n".join(sorted(ours)) + "\n", encoding="utf-8")
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
          "--disable-pip-version-check", "-q", "-c", str(ROOT / "constraints.txt"), str(wheel)])
    return python


CHECK = """
import importlib.metadata, os, sys
{first}
{second}
site = os.path.realpath(sys.argv[1])
assert os.path.realpath(avalanche_tmc.__file__).startswith(site), avalanche_tmc.__file__
assert avalanche_tmc.__version__ == importlib.metadata.version("avalanche-tmc") == sys.argv[2]
files = importlib.metadata.distribution("avalanche-tmc").files
top = {{f.parts[0] for f in files if not f.parts[0].endswith(".dist-info") and f.parts[0] not in ("..", "__pycache__")}}
assert top == {{"avalanche_tmc", "avalanche_tmc_torchvision_fallback.py",
               "avalanche_tmc_torchvision_fallback.pth"}}, top
model = avalanche_tmc.TangentModel(__import__("torch").nn.Linear(3, 2))
assert issubclass(avalanche_tmc.TMCStrategy, avalanche.training.templates.SupervisedTemplate)
print("ok", avalanche_tmc.__file__)
"""


@pytest.mark.integration
@pytest.mark.parametrize("order", ["avalanche_tmc first", "avalanche first"])
def test_wheel_imports_in_a_fresh_venv(fresh_venv, tmp_path, order):
    imports = ["import avalanche_tmc", "import avalanche, avalanche.training.templates"]
    if order == "avalanche first":
        imports.reverse()
    site = _run([str(fresh_venv), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    proc = _run([str(fresh_venv), "-c", CHECK.format(first=imports[0], second=imports[1]), site, VERSION],
                cwd=tmp_path, env=env)
    assert proc.stdout.startswith("ok "), proc.stdout


def _declared(pyproject: str, extra=None):
    """Normalized distribution names of ``dependencies`` (or of the optional ``extra``)."""
    import tomllib

    project = tomllib.loads(pyproject)["project"]
    specs = project["dependencies"] if extra is None else project["optional-dependencies"][extra]
    return {re.split(r"[<>=!~ \[;]", s, maxsplit=1)[0].lower().replace("_", "-") for s in specs}


def test_every_import_of_the_library_is_declared():
    """Every module the installed package imports (at the top or inside a function) is the
    standard library, the package itself, or a declared dependency; timm and huggingface_hub
    only through the ``timm`` extra (imported inside ``factories.timm_model``), matplotlib
    through the ``plots`` extra (imported inside ``plot_stream``)."""
    import ast
    import importlib.metadata

    if sys.version_info < (3, 11):
        pytest.skip("tomllib and sys.stdlib_module_names need Python 3.11")
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    allowed = _declared(pyproject) | {"avalanche-lib"}
    optional = _declared(pyproject, "timm") | _declared(pyproject, "plots")
    distributions = importlib.metadata.packages_distributions()
    undeclared = {}
    for path in sorted((ROOT / "avalanche_tmc").rglob("*.py")) + [ROOT / "avalanche_tmc_torchvision_fallback.py"]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                tops = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                tops = [node.module.split(".")[0]]
            else:
                continue
            for top in tops:
                if top in sys.stdlib_module_names or top in ("avalanche_tmc", "avalanche_tmc_torchvision_fallback"):
                    continue
                dists = {d.lower().replace("_", "-") for d in distributions.get(top, [top])}
                if not dists & (allowed | optional):
                    undeclared.setdefault(top, []).append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not undeclared, f"imports not declared in pyproject.toml: {undeclared}"
