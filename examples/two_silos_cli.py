"""Two silos and a composer with the command line: only component files travel.

Silo A trains experiences 0 and 1 of scikit-learn's digits (5 class-incremental
experiences of 2 classes), silo B experiences 2, 3 and 4, each with ``avalanche-tmc
train-component`` in its own process and folder (the same pre-trained network and data on
both: the installed, offline default factories ``avalanche_tmc.factories:digits_cnn`` and
``:digits``). A composer composes their files into one composition file, evaluates it on
the test stream, then forgets silo B's experience 4 and inspects the result. Every command
is printed as a user would type it.

The composition equals the one trained in memory (``tests/examples/test_two_silos_cli.py``
trains the same experiences with ``TMCStrategy`` and checks the composed file against it).

Run: ``python -m examples.two_silos_cli [--workdir DIR] [--epochs 2]`` (a temporary folder
by default; about a minute of CPU time, most of it three start-ups of Avalanche and of the
CNN's pre-training; the two silos run at once).
"""

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import List


def start(*args: str) -> subprocess.Popen:
    """Start ``avalanche-tmc ARGS`` (as ``python -m avalanche_tmc``) and echo it."""
    print("$ avalanche-tmc " + " ".join(shlex.quote(a) for a in args), flush=True)
    return subprocess.Popen([sys.executable, "-m", "avalanche_tmc", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONWARNINGS="ignore"))


def finish(process: subprocess.Popen) -> str:
    """Wait for a command; its stdout (echoed), or exit with its error."""
    out, err = process.communicate()
    if process.returncode != 0:
        sys.exit(f"avalanche-tmc failed (exit {process.returncode}):\n{err}")
    print(out, end="")
    return out


def avalanche_tmc(*args: str) -> str:
    """Run ``avalanche-tmc ARGS``, echo it, return its stdout."""
    return finish(start(*args))


def main(argv: List[str] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", help="folder for the silos' and the composer's files (default: a temporary one)")
    parser.add_argument("--epochs", default="2", help="training epochs per experience")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.workdir or tmp)
        train = ["--epochs", args.epochs, "--quiet"]
        # each silo on its own, at the same time
        silos = [start("train-component", "--experience", "0", "1", "--out", str(root / "silo_a"), *train),
                 start("train-component", "--experience", "2", "3", "4", "--out", str(root / "silo_b"), *train)]
        for silo in silos:
            finish(silo)
        composed = str(root / "composed.safetensors")
        avalanche_tmc("compose", str(root / "silo_a"), str(root / "silo_b"), "--out", composed)
        report = json.loads(avalanche_tmc("evaluate", composed, "--json", "--quiet"))
        rest = str(root / "rest.safetensors")
        avalanche_tmc("forget", composed, str(root / "silo_b" / "experience-4.safetensors"), "--out", rest)
        without = json.loads(avalanche_tmc("inspect", rest, "--json"))[0]
    print(f"two silos composed: experiences {report['experiences']} accuracy {report['accuracy']:.4f} "
          f"on {report['samples']} test images")
    print(f"experience 4 forgotten: {without['kind']} of experiences {without['experiences']}, total weight "
          f"{without['weight']:g}")


if __name__ == "__main__":
    main()
