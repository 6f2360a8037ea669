"""A process of the parallel-training tests, run from the checkout's root.

``python -m torch.distributed.run --standalone --nproc_per_node=2 -m tests.avalanche_tmc.parallel_job OUT``
trains a TMC strategy and a training-free head on 4 experiences across the ranks
(:func:`avalanche_tmc.distributed.train_parallel`); without torchrun the same command is
the sequential reference. Each rank writes what it ends with to ``OUT/rank<r>.safetensors``
(composed δ, every component, summed statistics, the head) and the devices they live on.

``--device`` (cpu, cuda, cuda:N; default cpu) and ``--backend`` (gloo, nccl; default gloo):
what the tests' ``--device`` / ``--dist-backend`` chose. With NCCL each rank trains on its
own GPU (``cuda:LOCAL_RANK``, set by ``init_parallel``).

``--fail-rank R --fail-experience E``: rank R raises on experience E (``--hang``: it
sleeps instead); ``--timeout`` the seconds a rank waits at the composition.
"""

import argparse
import json
import os
import time
import warnings

import torch
from avalanche.core import SupervisedPlugin
from safetensors.torch import save_file

from avalanche_tmc import TangentModel, TMCStrategy, TrainingFreeClassifier, TrainingFreeStrategy, penultimate
from avalanche_tmc.distributed import init_parallel, shutdown_parallel, train_parallel
from tests.helpers import (
    NUM_CLASSES,
    TinyResNet,
    prepare_device,
    quiet_evaluator,
    randomize_batchnorm,
    resolve_device,
    small_benchmark,
    tensor_dataset,
)

warnings.filterwarnings("ignore")


class InjectedFailure(SupervisedPlugin):
    """Raise (or hang) on one rank, at the start of one experience."""

    def __init__(self, rank: int, experience: int, hang: bool):
        super().__init__()
        self.rank, self.experience, self.hang = rank, experience, hang

    def before_training_exp(self, strategy, **kwargs):
        if int(os.environ.get("RANK", "0")) == self.rank and strategy.experience.current_experience == self.experience:
            if self.hang:
                time.sleep(600)
            raise RuntimeError(f"injected failure on experience {self.experience}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--fail-rank", type=int, default=None)
    parser.add_argument("--fail-experience", type=int, default=None)
    parser.add_argument("--hang", action="store_true")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--backend", default="gloo", choices=["gloo", "nccl"])
    args = parser.parse_args()
    torch.set_num_threads(1)
    device = resolve_device(args.device)
    prepare_device(device)
    rank, world = init_parallel(backend=args.backend, timeout=args.timeout)
    if args.backend == "nccl":
        device = torch.device("cuda", torch.cuda.current_device())  # this rank's own GPU
    bm = small_benchmark(n_experiences=4, train=tensor_dataset(48))
    plugins = [] if args.fail_rank is None else [InjectedFailure(args.fail_rank, args.fail_experience, args.hang)]

    torch.manual_seed(0)
    net = randomize_batchnorm(TinyResNet(num_classes=3))
    tmc = TMCStrategy(model=TangentModel(net, num_classes=NUM_CLASSES), lr=1e-2, train_mb_size=8, train_epochs=2,
                      evaluator=quiet_evaluator(), plugins=plugins, device=device)
    report = train_parallel(tmc, bm.train_stream, seed=100, timeout=args.timeout)

    head = TrainingFreeStrategy(model=TrainingFreeClassifier(penultimate(net), NUM_CLASSES, projection_dim=16),
                                train_mb_size=8, evaluator=quiet_evaluator(), device=device)
    train_parallel(head, bm.train_stream, seed=100, timeout=args.timeout)

    tensors = {f"composed.{n}": t for n, t in tmc.composed_delta.items()}
    tensors.update({f"component{k}.{n}": t for k, d in tmc.components.items() for n, t in d.items()})
    tensors.update({f"stats.{k}": t for k, t in head.statistics.summed().items()})
    tensors["head.weight"] = head.model.weight
    tensors["model.delta"] = torch.cat([t.reshape(-1) for t in tmc.model.delta.values()])
    devices = sorted({t.device.type for t in tensors.values()})
    os.makedirs(args.out, exist_ok=True)
    metadata = dict(report=json.dumps(dict(rank=rank, world=world, assignment=report.assignment,
                                           bytes_reduced=report.bytes_reduced,
                                           bytes_broadcast=report.bytes_broadcast)),
                    keys=json.dumps([tmc.tangent_plugin.composition.keys, head.statistics.keys]),
                    classes=json.dumps({str(t): sorted(c) for t, c in tmc.tangent_plugin.task_classes.items()}),
                    ridge_lambda=json.dumps(head.model.ridge_lambda), devices=json.dumps(devices))
    save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()},
              os.path.join(args.out, f"rank{rank}.safetensors"), metadata=metadata)
    shutdown_parallel()


if __name__ == "__main__":
    main()
