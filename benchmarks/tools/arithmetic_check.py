"""Does this machine compute what the committed rows were computed with? A fingerprint of
the main job's SGD arithmetic, bit for bit::

    python -m benchmarks.tools.arithmetic_check            # compare with the committed one
    AVALANCHE_TMC_ARITHMETIC=native python -m benchmarks.tools.arithmetic_check   # unpinned

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
import sys
from pathlib import Path
from typing import Dict, Optional, Sequence

import torch

__all__ = ["REFERENCE", "sgd_fingerprint", "reference", "differences", "main"]

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "results" / "machines" / "sgd-fingerprint.json"
"""The committed fingerprint and the machine, arithmetic and versions it was made with."""

PARTS = ("features", "parameters", "logits")


def _sha(tensor: torch.Tensor) -> str:
    return hashlib.sha256(tensor.detach().contiguous().numpy().tobytes()).hexdigest()[:16]


def sgd_fingerprint(steps: int = 4, batch: int = 32) -> Dict[str, str]:
    """SHA-256 prefixes of the frozen trunk's features, the parameters after ``steps`` SGD
    steps of ``batch`` inputs, and the logits of every input afterwards (see the module)."""
    from torch import nn

    from avalanche_tmc import replace_head
    from benchmarks.networks.backbones import load_backbone
    from benchmarks.networks.shrink import convolutions_as_matmuls, shrink_convolutions
    from benchmarks.networks.threads import fixed_threads
    from benchmarks.networks.trunk import cache_features, split_backbone
    from benchmarks.runner.presets import MAIN_IMAGE_SIZE, MAIN_REGIME

    generator = torch.Generator().manual_seed(0)
    images = torch.randn(steps * batch, 3, MAIN_IMAGE_SIZE, MAIN_IMAGE_SIZE, generator=generator)
    labels = torch.randint(0, 10, (steps * batch,), generator=generator)
    trunk, top = split_backbone(load_backbone("efficientnet_lite0"), MAIN_REGIME, images[:2])
    features = cache_features(trunk, torch.utils.data.TensorDataset(images, labels)).tensors[0]
    top = top.to(memory_format=torch.channels_last)  # the runner's layout (benchmarks.runner.prepare)
    shrink_convolutions(top, features[:2])
    convolutions_as_matmuls(top, features[:2])
    model = replace_head(copy.deepcopy(top), 10, seed=0).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    with fixed_threads():
        for step in range(steps):
            x, y = features[step * batch:(step + 1) * batch], labels[step * batch:(step + 1) * batch]
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
        with torch.no_grad():
            logits = model.eval()(features)
    parameters = torch.cat([p.detach().flatten() for p in model.parameters()])
    return dict(zip(PARTS, (_sha(features), _sha(parameters), _sha(logits))))


def reference(path: Path = REFERENCE) -> Dict[str, str]:
    """The committed fingerprint (with ``cpu``, ``arithmetic``, ``torch``, ``timm``)."""
    return json.loads(path.read_text(encoding="utf-8"))


def differences(found: Dict[str, str], expected: Dict[str, str]) -> Sequence[str]:
    """The parts (:data:`PARTS`) whose hashes differ."""
    return [part for part in PARTS if found.get(part) != expected.get(part)]


def _versions() -> Dict[str, str]:
    import timm

    return {"torch": torch.__version__, "timm": timm.__version__}


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Print this machine's arithmetic and fingerprint and compare it with the committed one
    (exit 1 when they differ); ``--write`` replaces the committed one."""
    from benchmarks.networks.arithmetic import runner_arithmetic

    p = argparse.ArgumentParser(prog="python -m benchmarks.tools.arithmetic_check",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--write", action="store_true", help=f"replace {REFERENCE.name} with this machine's fingerprint")
    args = p.parse_args(argv)
    arithmetic = runner_arithmetic()  # before anything computes
    print(arithmetic.describe())
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
