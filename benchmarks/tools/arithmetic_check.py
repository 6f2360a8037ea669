"""Does this machine compute what the committed rows were computed with? A fingerprint of
the main job's SGD arithmetic, bit for bit::

    python -m benchmarks.tools.arithmetic_check            # compare with the committed one
    AVALANCHE_TMC_ARITHMETIC=native python -m benchmarks.tools.arithmetic_check   # unpinned
    python -m benchmarks.tools.arithmetic_check --attribute  # which of the pin's variables matter here
    python -m benchmarks.tools.arithmetic_check --costs      # pinned against native, timed (idle machine)

The fingerprint (:func:`sgd_fingerprint`): the main job's network at its real shapes
(EfficientNet-Lite0 with its ImageNet weights at 64 px, the frozen trunk before ``blocks.6``
computed by the runner's :func:`~benchmarks.networks.trunk.cache_features`, the trained top
laid out as the runner lays it out, a new 10-class head), four SGD steps (momentum 0.9, the
non-linear methods' optimizer) on seeded inputs, then the logits of every input: a SHA-256
of the features, of the trained parameters and of the logits. A few seconds. The committed
one (:data:`REFERENCE`) was made on the machine its ``cpu`` names; the test suite
(tests/benchmarks/test_arithmetic.py) holds every machine to it, so on an AVX-512 machine
it is a real cross-machine test of the pin (:mod:`benchmarks.networks.arithmetic`).
"""

import argparse
import copy
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, Optional, Sequence, Tuple

import torch

__all__ = ["REFERENCE", "ATTRIBUTIONS", "sgd_fingerprint", "step_costs", "compare_costs", "attribute", "reference",
           "differences", "main"]

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "results" / "machines" / "sgd-fingerprint.json"
"""The committed fingerprint and the machine, arithmetic and versions it was made with."""

PARTS = ("features", "parameters", "logits")


def _sha(tensor: torch.Tensor) -> str:
    return hashlib.sha256(tensor.detach().contiguous().numpy().tobytes()).hexdigest()[:16]


def _main_job_unit(images: int) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, "torch.nn.Module", float]:
    """Seeded inputs and labels at the main job's size, the frozen trunk's features of them
    (the runner's :func:`~benchmarks.networks.trunk.cache_features`, timed), and the trained top
    laid out as the runner lays it out, with a new 10-class head."""
    from avalanche_tmc import replace_head
    from benchmarks.networks.backbones import load_backbone
    from benchmarks.networks.shrink import convolutions_as_matmuls, shrink_convolutions
    from benchmarks.networks.trunk import cache_features, split_backbone
    from benchmarks.runner.presets import MAIN_IMAGE_SIZE, MAIN_REGIME

    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(images, 3, MAIN_IMAGE_SIZE, MAIN_IMAGE_SIZE, generator=generator)
    labels = torch.randint(0, 10, (images,), generator=generator)
    trunk, top = split_backbone(load_backbone("efficientnet_lite0"), MAIN_REGIME, inputs[:2])
    start = time.perf_counter()
    features = cache_features(trunk, torch.utils.data.TensorDataset(inputs, labels)).tensors[0]
    seconds = time.perf_counter() - start
    top = top.to(memory_format=torch.channels_last)  # the runner's layout (benchmarks.runner.prepare)
    shrink_convolutions(top, features[:2])
    convolutions_as_matmuls(top, features[:2])
    return inputs, labels, features, replace_head(copy.deepcopy(top), 10, seed=0).train(), seconds


def _sgd_steps(model: "torch.nn.Module", features: torch.Tensor, labels: torch.Tensor, steps: int, batch: int) -> None:
    """``steps`` SGD steps (momentum 0.9, cross-entropy) over consecutive batches, one thread."""
    from torch import nn

    from benchmarks.networks.threads import fixed_threads

    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    with fixed_threads():
        for step in range(steps):
            first = (step * batch) % len(features)
            x, y = features[first:first + batch], labels[first:first + batch]
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()


def sgd_fingerprint(steps: int = 4, batch: int = 32) -> Dict[str, str]:
    """SHA-256 prefixes of the frozen trunk's features, the parameters after ``steps`` SGD
    steps of ``batch`` inputs, and the logits of every input afterwards (see the module)."""
    from benchmarks.networks.threads import fixed_threads

    _, labels, features, model, _ = _main_job_unit(steps * batch)
    _sgd_steps(model, features, labels, steps, batch)
    with fixed_threads(), torch.no_grad():
        logits = model.eval()(features)
    parameters = torch.cat([p.detach().flatten() for p in model.parameters()])
    return dict(zip(PARTS, (_sha(features), _sha(parameters), _sha(logits))))


def step_costs(steps: int = 60, batch: int = 32) -> Dict[str, float]:
    """What this process's arithmetic costs on the main job's unit, one thread: milliseconds
    per image of the frozen trunk's features (256 images) and per SGD step of ``batch``
    (``steps`` steps after 5 of warm-up)."""
    _, labels, features, model, trunk_seconds = _main_job_unit(256)
    _sgd_steps(model, features, labels, 5, batch)
    start = time.perf_counter()
    _sgd_steps(model, features, labels, steps, batch)
    return {"trunk_ms_per_image": 1000 * trunk_seconds / 256,
            "sgd_ms_per_step": 1000 * (time.perf_counter() - start) / steps}


def reference(path: Path = REFERENCE) -> Dict[str, str]:
    """The committed fingerprint (with ``cpu``, ``arithmetic``, ``torch``, ``timm``)."""
    return json.loads(path.read_text(encoding="utf-8"))


def differences(found: Dict[str, str], expected: Dict[str, str]) -> Sequence[str]:
    """The parts (:data:`PARTS`) whose hashes differ."""
    return [part for part in PARTS if found.get(part) != expected.get(part)]


def _versions() -> Dict[str, str]:
    import timm

    return {"torch": torch.__version__, "timm": timm.__version__}


def compare_costs(rounds: int = 3) -> Dict[str, Dict[str, float]]:
    """:func:`step_costs` pinned and native, each in its own process (a process computes with
    one arithmetic), alternating ``rounds`` times; the median of each."""
    runs: Dict[str, list] = {"pinned": [], "native": []}
    for _ in range(rounds):
        for name in runs:
            env = dict(os.environ, AVALANCHE_TMC_ARITHMETIC="native" if name == "native" else "pinned")
            done = subprocess.run([sys.executable, "-m", "benchmarks.tools.arithmetic_check", "--costs-here"],
                                  capture_output=True, text=True, env=env, check=True)
            runs[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
    return {name: {k: sorted(r[k] for r in found)[len(found) // 2] for k in found[0]} for name, found in runs.items()}


ATTRIBUTIONS = (("none",), ("ATEN_CPU_CAPABILITY",), ("ONEDNN_MAX_CPU_ISA",), ("MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS"),
                ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA"), ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_CBWR",
                                                                "MKL_ENABLE_INSTRUCTIONS"))
"""The sets of the pin's variables whose fingerprints :func:`attribute` compares."""


def attribute() -> Dict[str, Dict[str, str]]:
    """The fingerprint with each set of :data:`ATTRIBUTIONS` set, alone, before the process
    starts (a fresh process each; ``none``: the CPU's own arithmetic): which variables are
    necessary, and which sufficient, for the pinned fingerprint on this machine."""
    from avalanche_tmc.arithmetic import PIN_VARIABLES

    found = {}
    for names in ATTRIBUTIONS:
        env = {k: v for k, v in os.environ.items() if k not in PIN_VARIABLES and k != "AVALANCHE_TMC_ARITHMETIC"}
        env.update({name: PIN_VARIABLES[name] for name in names if name in PIN_VARIABLES})
        done = subprocess.run([sys.executable, "-m", "benchmarks.tools.arithmetic_check", "--fingerprint-here"],
                              capture_output=True, text=True, env=env, check=True)
        found[" + ".join(names)] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Print this machine's arithmetic and fingerprint and compare it with the committed one
    (exit 1 when they differ); ``--write`` replaces the committed one."""
    from benchmarks.networks.arithmetic import runner_arithmetic

    p = argparse.ArgumentParser(prog="python -m benchmarks.tools.arithmetic_check",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--write", action="store_true", help=f"replace {REFERENCE.name} with this machine's fingerprint")
    p.add_argument("--costs", action="store_true", help="time the main job's unit pinned and native (3 processes "
                   "each, alternating; run it on an idle machine) instead")
    p.add_argument("--attribute", action="store_true", help="the fingerprint with each of the pin's variables "
                   "alone, ATen's and oneDNN's together, and all of them: which ones matter on this machine")
    p.add_argument("--costs-here", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--fingerprint-here", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.fingerprint_here:  # the environment as the caller set it: no pin, no opt-out
        from avalanche_tmc.arithmetic import cpu_arithmetic

        print(json.dumps(dict(sgd_fingerprint(), arithmetic=cpu_arithmetic().label)))
        return 0
    if args.attribute:
        expected = reference()
        for names, found in attribute().items():
            same = [part for part in PARTS if found[part] == expected[part]]
            print(f"{names}: {found['arithmetic']}; the committed fingerprint's "
                  f"{', '.join(same) if same else 'no part'}{' (all)' if len(same) == len(PARTS) else ''}")
        return 0
    arithmetic = runner_arithmetic()  # before anything computes
    if args.costs_here:
        print(json.dumps(step_costs()))
        return 0
    print(arithmetic.describe())
    if args.costs:
        costs = compare_costs()
        for name, found in costs.items():
            print(f"{name}: trunk {found['trunk_ms_per_image']:.3f} ms/image, "
                  f"SGD step {found['sgd_ms_per_step']:.1f} ms")
        ratios = {k: costs["native"][k] / costs["pinned"][k] for k in costs["native"]}
        print(f"native/pinned: trunk {ratios['trunk_ms_per_image']:.2f}, SGD step {ratios['sgd_ms_per_step']:.2f}")
        return 0
    found = sgd_fingerprint()
    print(" ".join(f"{part} {value}" for part, value in found.items()))
    if args.write:
        REFERENCE.write_text(json.dumps(dict(found, cpu=arithmetic.cpu, arithmetic=arithmetic.describe(),
                                             **_versions()), indent=1) + "\n", encoding="utf-8")
        print(f"written: {REFERENCE}")
        return 0
    expected = reference()
    if {k: expected.get(k) for k in ("torch", "timm")} != _versions():
        print(f"the committed fingerprint was made with torch {expected.get('torch')}, timm {expected.get('timm')}; "
              f"this is torch {torch.__version__}: not comparable (constraints.txt pins the versions)")
        return 1
    differ = differences(found, expected)
    if differ:
        print(f"DIFFERENT from the committed fingerprint ({expected['cpu']}): {', '.join(differ)}")
        return 1
    print(f"the same, bit for bit, as the committed fingerprint ({expected['cpu']}; {expected['arithmetic']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
