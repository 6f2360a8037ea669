"""What the component-file tests share: tiny strategies trained the same way every time,
and files crafted as an attacker would (metadata edited, and where it says so the hashes
recomputed: an attacker knows the algorithm; only a key stops that)."""

import json
import os
import struct
from pathlib import Path

import torch
from safetensors.torch import load, save

from avalanche_tmc import TangentModel, TMCStrategy, TrainingFreeClassifier, TrainingFreeStrategy, penultimate
from avalanche_tmc.files import content_sha256
from avalanche_tmc.files.signing import metadata_sha256
from tests.helpers import NUM_CLASSES, TinyResNet, quiet_evaluator, randomize_batchnorm

SEED = 100
KEY = b"0123456789abcdef-shared-silo-key"
ROOT = Path(__file__).resolve().parents[3]
JSON_ENTRIES = ("weight", "members", "base", "settings")


def base_net(num_classes=3):
    """The pre-trained network every strategy here starts from (BatchNorm statistics randomized)."""
    torch.manual_seed(0)
    return randomize_batchnorm(TinyResNet(num_classes=num_classes))


def same_net():
    """The network of the ``model`` fixture (BatchNorm statistics as initialised)."""
    torch.manual_seed(0)
    return TinyResNet(num_classes=3)


def tmc(base=None, num_classes=NUM_CLASSES, strategy=TMCStrategy, **kwargs):
    """A TMC strategy on ``base`` (default :func:`base_net`), one epoch per experience."""
    model = TangentModel(base if base is not None else base_net(), num_classes=num_classes,
                         linearize=kwargs.pop("linearize", "all"))
    return strategy(model=model, lr=1e-2, train_mb_size=8, train_epochs=1, evaluator=quiet_evaluator(), **kwargs)


def train(strategy, experiences):
    """Train ``experiences`` in order, each seeded by its id (a component depends on its data and seed only)."""
    for exp in experiences:
        torch.manual_seed(SEED + exp.current_experience)
        strategy.train(exp)
    return strategy


def equal(a, b) -> bool:
    """The same names and bit for bit the same tensors (compared on the CPU, where files are
    read: a strategy's live on the tests' device)."""
    return a.keys() == b.keys() and all(torch.equal(a[n].cpu(), b[n].cpu()) for n in a)


def component_bytes(directory) -> bytes:
    """The bytes of ``directory``'s ``experience-0.safetensors``."""
    with open(os.path.join(directory, "experience-0.safetensors"), "rb") as f:
        return f.read()


def parts(path):
    """(metadata, tensors) of a safetensors file, read without the library."""
    data = open(path, "rb").read()
    (length,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + length])["__metadata__"], load(data)


def craft(path, out, edit=None, tensors=None, rehash=False):
    """``path`` with its metadata entries edited (``edit(metadata)``, JSON entries decoded)
    and/or other tensors; ``rehash``: hashes recomputed, as an attacker can."""
    metadata, original = parts(path)
    tensors = original if tensors is None else tensors
    decoded = {k: json.loads(v) if k in JSON_ENTRIES else v for k, v in metadata.items()}
    if edit is not None:
        edit(decoded)
    metadata = {k: json.dumps(v) if k in JSON_ENTRIES else v for k, v in decoded.items()}
    if rehash:
        metadata["content_sha256"] = content_sha256(tensors)
        metadata.pop("hmac_sha256", None)
        metadata["file_sha256"] = metadata_sha256(metadata)
    with open(out, "wb") as f:
        f.write(save(dict(tensors), metadata=metadata))
    return str(out)


def set_entry(path, value):
    """An ``edit`` for :func:`craft`: the entry at ``path`` (keys and indices) set to ``value``."""
    def edit(metadata):
        *parents, last = path
        target = metadata
        for key in parents:
            target = target[key]
        target[last] = value
    return edit


def small_strategy(cls=TMCStrategy, width=4, seed=0, **kwargs):
    """A tangent strategy on a fresh TinyResNet of ``width`` (seeded by ``seed``), one epoch."""
    torch.manual_seed(seed)
    model = TangentModel(TinyResNet(width=width, num_classes=3), num_classes=NUM_CLASSES)
    return cls(model=model, lr=1e-2, train_mb_size=8, train_epochs=1, evaluator=quiet_evaluator(), **kwargs)


def small_training_free(seed=0, device="cpu"):
    """A training-free strategy on a fresh TinyResNet's penultimate features."""
    torch.manual_seed(seed)
    model = TrainingFreeClassifier(penultimate(TinyResNet(num_classes=3)), NUM_CLASSES)
    return TrainingFreeStrategy(model=model, ridge_lambda=1.0, train_mb_size=8, evaluator=quiet_evaluator(),
                                device=device)


def train_unshuffled(strategy, experiences):
    """Train ``experiences`` in order, unshuffled, each seeded by its id (as checkpoints are tested)."""
    for exp in experiences:
        torch.manual_seed(100 + exp.current_experience)
        strategy.train(exp, shuffle=False)
    return strategy


def nothing_learned(strategy) -> bool:
    """Nothing learned, no classes recorded, and the model's δ still zero."""
    return (len(strategy.learned()) == 0 and not strategy.learned_classes()
            and all(not t.any() for t in strategy.model.delta.values()))
