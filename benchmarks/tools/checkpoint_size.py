"""Checkpoint sizes of a tangent strategy: ``python -m benchmarks.tools.checkpoint_size``.

A torchvision ResNet-18 (random weights, 10 classes) wrapped in a ``TangentModel`` trains
TME (which keeps every component) on 5 tiny experiences of random 32 px images, one epoch
each; after the first and the last experience it writes Avalanche's pickled checkpoint
(``avalanche_tmc.save_checkpoint``) and the pickle-free learned state
(``avalanche_tmc.save_learned``) and prints their sizes next to the network's. What a
checkpoint must hold: the network, the model's δ, the running sum and one δ per kept
component (``tests/avalanche_tmc/training/test_checkpoint.py`` bounds it).
"""

import argparse
import os
import tempfile
import time
from typing import Dict, Optional, Sequence

import torch
from avalanche.benchmarks.scenarios.deprecated.generators import nc_benchmark
from avalanche.training.plugins import EvaluationPlugin
from torch.utils.data import TensorDataset

__all__ = ["main"]

CLASSES = 10


def _random_images(n: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x, y = torch.randn(n, 3, 32, 32, generator=generator), torch.arange(n) % CLASSES
    data = TensorDataset(x, y)
    data.targets = y.tolist()
    return data


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, float]:
    """Print the sizes (MB); returns them by name."""
    import torchvision

    from avalanche_tmc import TangentModel, TMEStrategy, save_checkpoint, save_learned

    parser = argparse.ArgumentParser(prog="python -m benchmarks.tools.checkpoint_size",
                                     description=__doc__.split("\n\n")[0])
    parser.parse_args(argv)
    from benchmarks.networks.arithmetic import runner_arithmetic

    runner_arithmetic()  # the runner's one CPU arithmetic (AVX2), before torch computes
    torch.set_num_threads(1)
    bm = nc_benchmark(_random_images(20, 0), _random_images(10, 1), n_experiences=5, task_labels=False, seed=0)
    torch.manual_seed(0)
    net = torchvision.models.resnet18(num_classes=CLASSES)
    sizes = {"network": sum(t.numel() * t.element_size() for t in net.state_dict().values()) / 1e6}
    print(f"ResNet-18 network: {sizes['network']:.1f} MB")
    strategy = TMEStrategy(model=TangentModel(net, num_classes=CLASSES), lr=1e-4, train_mb_size=4, train_epochs=1,
                           evaluator=EvaluationPlugin(loggers=[]))
    with tempfile.TemporaryDirectory() as folder:
        for exp in bm.train_stream:
            start = time.time()
            strategy.train(exp)
            done = exp.current_experience + 1
            if done in (1, len(bm.train_stream)):
                ckpt, learned = os.path.join(folder, "ckpt.pkl"), os.path.join(folder, "learned.safetensors")
                save_checkpoint(strategy, ckpt)
                save_learned(strategy, learned)
                sizes[f"checkpoint after {done}"] = os.path.getsize(ckpt) / 1e6
                sizes[f"learned after {done}"] = os.path.getsize(learned) / 1e6
                print(f"after {done} experience(s): save_checkpoint {sizes[f'checkpoint after {done}']:.1f} MB, "
                      f"save_learned {sizes[f'learned after {done}']:.1f} MB ({time.time() - start:.0f} s)")
    return sizes


if __name__ == "__main__":
    import warnings

    warnings.filterwarnings("ignore", message="No loggers specified")
    main()
