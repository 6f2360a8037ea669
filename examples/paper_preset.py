"""A paper preset of the benchmark runner, end to end on a generated image folder, in seconds.

``benchmarks/datasets/synthetic.py`` writes a small image folder laid out as Caltech-256
(5 classes of generated JPEGs; nothing downloads), and a ResNet-18 with random weights is
saved to a file (a paper preset never fetches weights: ``--weights`` names them). Then the
runner runs the preset ``c-caltech256-5`` (the authors' recipe: transforms, linearized from
after the stem, decay on δ) shrunk with flags, as the tests shrink it: 32 px images, one
epoch, one seed, TMC only. It prints the runner's own output and the composed model's final
accuracy read back from the results file. The numbers mean nothing (random weights, generated
images): the example shows the command and the files, not a result.

Run: ``python -m examples.paper_preset [--workdir DIR]`` (about 20 s of CPU time); the
runner's command it runs is printed first.
"""

import argparse
import csv
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import List, Optional

import torch
from torchvision.models import resnet18

from benchmarks.datasets.synthetic import make_image_folder

PRESET = "c-caltech256-5"
# shrunk as tests/benchmarks/test_paper_preset.py shrinks it
SMALL = ["--backbone", "resnet18", "--image-size", "32", "--epochs", "1", "--seeds", "1", "--jobs", "1",
         "--threads", "1", "--workers", "0", "--methods", "tmc", "--data-option", "train_per_class=5"]


def main(argv: Optional[List[str]] = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", help="folder for the images, weights and results (default: a temporary one)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.workdir or tmp)
        data, weights, out = root / "images", root / "resnet18-random.pth", root / "results"
        make_image_folder(data, layout="caltech256", classes=5, per_class=7, min_size=40, max_size=64)
        torch.manual_seed(0)
        torch.save(resnet18().state_dict(), weights)
        command = [sys.executable, "-m", "benchmarks.run", "--preset", PRESET, "--data-root", str(data),
                   "--weights", str(weights), *SMALL, "--out", str(out)]
        print("$ python " + " ".join(shlex.quote(a) for a in command[1:]), flush=True)
        env = dict(os.environ, AVALANCHE_TMC_CACHE=str(root / "cache"), PYTHONWARNINGS="ignore")
        done = subprocess.run(command, env=env)
        if done.returncode != 0:
            sys.exit(f"the runner failed (exit {done.returncode})")
        with open(out / "results.csv", newline="") as f:
            rows = list(csv.DictReader(f))
    last = max(int(r["after_task"]) for r in rows)
    final = next(float(r["accuracy"]) for r in rows
                 if r["method"] == "tmc" and r["model"] == "composed" and r["eval_exp"] == "all"
                 and int(r["after_task"]) == last)
    print(f"{PRESET} on a generated folder: {len(rows)} result rows; tmc composed accuracy after task {last}: "
          f"{final:.4f}")
    return final


if __name__ == "__main__":
    main()
