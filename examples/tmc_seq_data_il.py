"""TMC-Seq in data-incremental learning: every experience holds new images of all 10 classes.

scikit-learn's digits (the images the installed digits CNN was not pre-trained on) split
into 5 experiences of new instances (Avalanche's ``ni_benchmark``), every class in each.
``TMCSeqStrategy`` starts each experience's tangent component from the composition of the
earlier ones (sequential; its components are not independent, so it is neither parallel
nor forgettable); ``--methods tmc-seq,tmc`` adds ``TMCStrategy``, which trains each from
zero and composes them. Both use the RSL target ``beta=5``, the data-incremental setting.
It prints each method's accuracy on the whole test set after every experience.

Run: ``python -m examples.tmc_seq_data_il [--epochs 2] [--methods tmc-seq,tmc]`` (about
30 s of CPU time for one method).
"""

import argparse
import warnings
from typing import Dict, List, Optional

import torch
from avalanche.benchmarks import ni_benchmark
from avalanche.benchmarks.utils import as_classification_dataset
from torch.utils.data import TensorDataset

from avalanche_tmc import TangentModel, TMCSeqStrategy, TMCStrategy
from avalanche_tmc.factories import digits_cnn
from avalanche_tmc.factories.benchmarks import digits_splits

STRATEGIES = {"tmc-seq": TMCSeqStrategy, "tmc": TMCStrategy}


def dataset(x: torch.Tensor, y: torch.Tensor):
    """An Avalanche classification dataset of images ``x`` and labels ``y``."""
    data = TensorDataset(x, y)
    data.targets = y.tolist()
    return as_classification_dataset(data)


def accuracy(model: TangentModel, x: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean())


def run(method: str, epochs: int) -> List[float]:
    """The test accuracy after each experience of one method."""
    parts = digits_splits()
    bm = ni_benchmark(dataset(*parts["train"]), dataset(*parts["test"]), n_experiences=5, seed=0)
    torch.manual_seed(0)
    strategy = STRATEGIES[method](model=TangentModel(digits_cnn()), lr=1e-2, beta=5.0, train_mb_size=32,
                                  train_epochs=epochs, evaluator=None)
    curve = []
    for experience in bm.train_stream:
        assert len(set(experience.classes_in_this_experience)) == 10  # data-IL: every class each time
        strategy.train(experience)
        curve.append(accuracy(strategy.model, *parts["test"]))
    return curve


def main(argv: Optional[List[str]] = None) -> Dict[str, List[float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2, help="training epochs per experience")
    parser.add_argument("--methods", default="tmc-seq", help=f"comma-separated, of {', '.join(STRATEGIES)}")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", message="No loggers specified")  # evaluator=None: no metrics, on purpose
    parts = digits_splits()
    print(f"before training (the pre-trained network, new head): "
          f"accuracy {accuracy(TangentModel(digits_cnn()), *parts['test']):.4f}")
    curves = {}
    for method in args.methods.split(","):
        curves[method] = run(method, args.epochs)
        print(f"data-IL {method:8s} final acc {curves[method][-1]:.4f}  after each exp "
              + " ".join(f"{a:.4f}" for a in curves[method]))
    return curves


if __name__ == "__main__":
    main()
