"""Model factories: pre-trained networks with a new seeded head, weights never downloaded.

Each function returns an ``nn.Module`` whose classification layer is a new ``nn.Linear``
over ``num_classes`` classes, initialised from ``seed`` (:func:`~avalanche_tmc.replace_head`):
every process or silo that calls it with the same options gets the same weights, so the
components it trains compose. Keyword options only, so the command line can call them with
``--model-option KEY=VALUE``.

* :func:`torchvision_model`, :func:`timm_model`: a torchvision or timm architecture with
  weights from a local file (``weights=PATH``: a state dict as ``.pth``/``.pt``/``.bin`` or
  ``.safetensors``) or from the library's own cache (``weights="IMAGENET1K_V1"`` etc. for
  torchvision: ``torch.hub.get_dir()/checkpoints``; ``weights="cache"`` for timm: the
  Hugging Face cache). A file that is not there raises :class:`WeightsNotFoundError` saying
  where it looked and how to fill the cache; nothing is downloaded at run time.
* :func:`small_cnn`: a small seeded CNN for 1- or 3-channel images of any size (the
  classic benchmarks' MNIST, Fashion-MNIST and CIFAR), optionally from a weights file.
* :func:`digits_cnn`: that CNN pre-trained on 400 of scikit-learn's digits that
  :func:`~avalanche_tmc.factories.benchmarks.digits` leaves out (about a second, single
  threaded and deterministic: the same weights in every process on a machine).
"""

import contextlib
import hashlib
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, Iterator, Optional, Union

import torch
from torch import Tensor, nn

__all__ = ["WeightsNotFoundError", "read_state_dict", "load_weights", "hub_checkpoint_dir", "check_hub_hash",
           "timm_cached_file", "small_cnn", "digits_cnn", "torchvision_model", "timm_model"]

PathLike = Union[str, "os.PathLike[str]"]


class WeightsNotFoundError(FileNotFoundError):
    """A weights file is not where it was looked for, or is not the published one; nothing
    is downloaded, and the message says which file to put where. The one class for this
    error: these factories raise it, and so do the benchmark runner's backbone loaders
    (``benchmarks.networks.backbones``)."""


def read_state_dict(path: PathLike) -> Dict[str, Tensor]:
    """The state dict in ``path``: a ``.safetensors`` file, or a ``torch.save`` file read
    with ``weights_only=True`` (tensors only), bare or inside a checkpoint dict under
    ``state_dict`` / ``model`` / ``model_state_dict``; a ``module.`` prefix that
    ``nn.DataParallel`` puts on every key is stripped. A missing file is a
    :class:`WeightsNotFoundError`, anything but a state dict a ``ValueError``. The one reader
    of weights files: the factories below and the benchmark runner's backbones use it."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise WeightsNotFoundError(f"weights file {path} does not exist. Pass weights=<path of a state dict saved "
                                   "with torch.save(model.state_dict(), path)>; nothing is downloaded at run time.")
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        state = load_file(str(path))
    else:
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    for key in ("state_dict", "model", "model_state_dict"):  # common checkpoint wrappers
        if isinstance(state, dict) and isinstance(state.get(key), dict):
            state = state[key]
    if not isinstance(state, dict):
        raise ValueError(f"{path} holds a {type(state).__name__}, not a state dict.")
    return {re.sub(r"^module\.", "", k): v for k, v in state.items()}


def load_weights(net: nn.Module, path: PathLike) -> nn.Module:
    """Load the state dict in ``path`` (:func:`read_state_dict`) into ``net``, strictly;
    returns ``net``."""
    missing, unexpected = net.load_state_dict(read_state_dict(path), strict=False)
    if missing or unexpected:
        raise ValueError(f"{path} does not fit {type(net).__name__}: missing {missing[:5]}, unexpected "
                         f"{unexpected[:5]}{' ...' if len(missing) > 5 or len(unexpected) > 5 else ''}.")
    return net


_HUB_HASH = re.compile(r"-([0-9a-f]{8,})\.pth?$")


def hub_checkpoint_dir() -> Path:
    """Where torch keeps downloaded weights (``torch.hub.get_dir()/checkpoints``): the cache
    the torchvision weights are read from, never filled here."""
    return Path(torch.hub.get_dir()) / "checkpoints"


def check_hub_hash(path: PathLike) -> None:
    """A file named like torch hub's downloads (``name-<hex>.pth``) must have a SHA-256
    starting with that hex (torch hub's own check): else :class:`WeightsNotFoundError`
    (a truncated or different file). Other names are not checked."""
    path = Path(path)
    match = _HUB_HASH.search(path.name)
    if match is None:
        return
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    if not digest.hexdigest().startswith(match.group(1)):
        raise WeightsNotFoundError(f"weights file {path} is damaged or not the published one: its SHA-256 "
                                   f"{digest.hexdigest()[:16]}... does not start with {match.group(1)}, as its name "
                                   "says; download it again.")


@contextlib.contextmanager
def _seeded(seed: int) -> Iterator[None]:
    """Run the block with torch's CPU generator seeded by ``seed``, then put the caller's
    generator state back (a factory call does not change the caller's random numbers)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        yield


def _with_head(net: nn.Module, num_classes: Optional[int], seed: int) -> nn.Module:
    from ..tangent import replace_head

    net = net if num_classes is None else replace_head(net, int(num_classes), seed=int(seed))
    return net.eval()


# ---------------------------------------------------------------------------- small CNNs


def small_cnn(*, in_channels: int = 1, num_classes: int = 10, width: int = 32, seed: int = 0,
              weights: Optional[PathLike] = None) -> nn.Module:
    """Two 3x3 convolutions (BatchNorm, ReLU), global average pooling and a linear head:
    a network for images of any size, initialised from ``seed`` or loaded from ``weights``."""
    with _seeded(seed):
        net = nn.Sequential(
            nn.Conv2d(int(in_channels), width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(width, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, int(num_classes)),
        )
    if weights is not None:
        load_weights(net, weights)
    return net.eval()


# Bump when the pre-training below changes: the cached weights of the old recipe are then not read.
_DIGITS_RECIPE = 1


def _digits_cache_file(seed: int, epochs: int, split_seed: int) -> Path:
    from .benchmarks import cache_dir

    name = f"recipe{_DIGITS_RECIPE}-seed{seed}-epochs{epochs}-split{split_seed}-torch{torch.__version__}.safetensors"
    return cache_dir() / "digits_cnn" / name


def _read_cached_state(path: Path, like: Dict[str, Tensor]) -> Optional[Dict[str, Tensor]]:
    """The state in ``path`` if it has exactly ``like``'s names, shapes and dtypes and finite
    values (else None: missing, unreadable, another network's or holding NaN or infinities,
    and pre-trained again: a NaN cache was trained on and reported as a divergence)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        state = load_file(os.fspath(path))
    except (OSError, SafetensorError, ValueError):
        return None
    same = state.keys() == like.keys() and all(
        state[k].shape == v.shape and state[k].dtype == v.dtype and bool(torch.isfinite(state[k]).all())
        for k, v in like.items())
    return state if same else None


def _pretrain_digits(seed: int, epochs: int, split_seed: int) -> Dict[str, Tensor]:
    from .benchmarks import digits_splits

    x, y = digits_splits(split_seed)["pretrain"]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: the same floating-point sums, hence weights, in every process
    gen = torch.Generator().manual_seed(seed)
    try:
        net = small_cnn(in_channels=1, num_classes=10, seed=seed).train()
        optimizer = torch.optim.Adam(net.parameters(), lr=3e-3)
        for _ in range(epochs):
            for idx in torch.randperm(len(y), generator=gen).split(32):
                optimizer.zero_grad()
                nn.functional.cross_entropy(net(x[idx]), y[idx]).backward()
                optimizer.step()
    finally:
        torch.set_num_threads(threads)
    return {k: v.detach().clone() for k, v in net.state_dict().items()}


@lru_cache(maxsize=4)
def _pretrained_digits_state(seed: int, epochs: int, split_seed: int) -> Dict[str, Tensor]:
    """The pre-trained weights, from the disk cache (``cache_dir()/digits_cnn``) when a
    process pre-trained them before: every command-line process and example would
    otherwise spend seconds on the same training. Writing the cache is best effort."""
    from safetensors.torch import save_file

    from ..files.filesystem import atomic_path

    path = _digits_cache_file(seed, epochs, split_seed)
    state = _read_cached_state(path, small_cnn(in_channels=1, num_classes=10, seed=seed).state_dict())
    if state is None:
        state = _pretrain_digits(seed, epochs, split_seed)
        try:
            with atomic_path(path) as tmp:
                save_file({k: v.contiguous() for k, v in state.items()}, os.fspath(tmp))
        except OSError:
            pass  # a read-only or full cache folder: the next process pre-trains again
    return state


def digits_cnn(*, num_classes: int = 10, seed: int = 0, head_seed: Optional[int] = None, epochs: int = 30,
               split_seed: int = 0, weights: Optional[PathLike] = None) -> nn.Module:
    """:func:`small_cnn` pre-trained (Adam, learning rate 3e-3, ``epochs`` epochs, batch 32,
    one thread) on the 400 digits that :func:`~avalanche_tmc.factories.benchmarks.digits`
    never uses, with a new ``num_classes``-way head seeded by ``head_seed`` (default
    ``seed``). ``weights``: load this file instead of pre-training."""
    net = small_cnn(in_channels=1, num_classes=10, seed=seed)
    if weights is not None:
        load_weights(net, weights)
    else:
        net.load_state_dict(_pretrained_digits_state(int(seed), int(epochs), int(split_seed)))
    return _with_head(net, num_classes, seed if head_seed is None else head_seed)


# ---------------------------------------------------------------------------- torchvision, timm


def torchvision_model(*, name: str = "resnet18", num_classes: Optional[int] = 10, weights: Optional[str] = None,
                      seed: int = 0, **options: Any) -> nn.Module:
    """``torchvision.models.get_model(name, **options)`` with ``weights``: None (random,
    seeded), a state-dict file, or a torchvision weights name (``"DEFAULT"``,
    ``"IMAGENET1K_V1"``, ...) read from torch's cache (``torch.hub.get_dir()/checkpoints``);
    then a new ``num_classes``-way head (None: keep the network's own)."""
    import torchvision

    with _seeded(seed):
        net = torchvision.models.get_model(name, weights=None, **options)
    if weights is None:
        return _with_head(net, num_classes, seed)
    if os.sep in str(weights) or Path(str(weights)).suffix or Path(str(weights)).expanduser().exists():
        return _with_head(load_weights(net, weights), num_classes, seed)
    try:
        entry = torchvision.models.get_model_weights(name)[str(weights)]
    except KeyError:
        raise ValueError(f"torchvision has no weights {weights!r} for {name!r} (and no such file); its weights: "
                         f"{[w.name for w in torchvision.models.get_model_weights(name)]}.") from None
    file = hub_checkpoint_dir() / os.path.basename(entry.url)
    if not file.is_file():
        raise WeightsNotFoundError(
            f"torchvision's {name} weights {entry} are not in torch's cache ({file}). Fill the cache once where "
            f"downloading is allowed: python -c \"import torchvision; torchvision.models.get_model('{name}', "
            f"weights='{entry.name}')\" (or copy the file there, or pass weights=<file>). Nothing is downloaded at "
            "run time.")
    return _with_head(load_weights(net, file), num_classes, seed)


def timm_cached_file(net: nn.Module) -> Optional[Path]:
    """The cached weights of a timm model's pretrained tag (the Hugging Face cache, then
    torch's), or None: read where the user's own downloads put them, never downloaded."""
    cfg = dict(getattr(net, "pretrained_cfg", None) or {})
    if cfg.get("hf_hub_id"):
        from huggingface_hub import try_to_load_from_cache

        for filename in ("model.safetensors", "pytorch_model.bin", "open_clip_pytorch_model.bin"):
            found = try_to_load_from_cache(cfg["hf_hub_id"], filename)
            if isinstance(found, str) and os.path.isfile(found):
                return Path(found)
    if cfg.get("url"):
        file = hub_checkpoint_dir() / os.path.basename(cfg["url"])
        if file.is_file():
            return file
    return None


def timm_model(*, name: str = "resnet18", num_classes: Optional[int] = 10, weights: Optional[str] = None,
               seed: int = 0, **options: Any) -> nn.Module:
    """``timm.create_model(name, pretrained=False, **options)`` with ``weights``: None (random,
    seeded), a state-dict file, or ``"cache"`` (the weights of ``name``'s pretrained tag,
    e.g. ``"resnet18.a1_in1k"``, from the Hugging Face cache); then a new ``num_classes``-way
    head. Needs timm (``pip install timm``)."""
    try:
        import timm
    except ImportError:
        raise ImportError("timm_model needs timm: pip install timm (or avalanche-tmc[timm]).") from None
    with _seeded(seed):
        net = timm.create_model(name, pretrained=False, **options)
    if weights is None:
        return _with_head(net, num_classes, seed)
    if weights != "cache":
        return _with_head(load_weights(net, weights), num_classes, seed)
    file = timm_cached_file(net)
    if file is None:
        cfg = getattr(net, "pretrained_cfg", {}) or {}
        raise WeightsNotFoundError(
            f"timm's weights for {name!r} ({cfg.get('hf_hub_id') or cfg.get('url')}) are not in the Hugging Face "
            "cache or torch's. Fill the cache once where downloading is allowed: python -c \"import timm; "
            f"timm.create_model('{name}', pretrained=True)\" (or pass weights=<file>). Nothing is downloaded at run "
            "time.")
    from timm.models import load_checkpoint

    load_checkpoint(net, str(file))
    return _with_head(net, num_classes, seed)
