"""Emoji in five drawing styles (domain-incremental): the iconify JSON sets from npm,
their shared catalogue, and a cairosvg renderer."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import re
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import Tensor

from benchmarks.datasets.packages import PIP, MissingPackageError

from .base import ImageTensorDataset, Normalization, stratified_split
from .cache import CACHE_VERSION, cache_dir, cached_tensors, digest

__all__ = [
    "EMOJI_STYLES", "EMOJI_CATEGORIES", "EMOJI_NPM_PACKAGES", "CAIROSVG_INSTALL", "emoji_install_command",
    "emoji_packages_dir", "IconSet", "canonical_emoji_category", "emoji_catalog", "emoji_svg", "render_svg",
    "render_emoji", "load_emoji_styles",
]

EMOJI_STYLES = ("twemoji", "openmoji", "noto", "fluent-emoji-flat", "fluent-emoji-high-contrast")
EMOJI_CATEGORIES = (
    "Smileys & Emotion", "People & Body", "Animals & Nature", "Food & Drink",
    "Travel & Places", "Activities", "Objects", "Symbols", "Flags",
)  # fmt: skip  (Unicode emoji group order)
EMOJI_NPM_PACKAGES = tuple(f"@iconify-json/{style}" for style in EMOJI_STYLES)
CAIROSVG_INSTALL = f"{PIP} cairosvg"


def emoji_install_command(prefix: Optional[Path] = None) -> str:
    """The npm command that installs the five icon sets into ``prefix``."""
    prefix = prefix or cache_dir() / "emoji"
    return f"npm install --prefix {prefix} --no-audit --no-fund " + " ".join(EMOJI_NPM_PACKAGES)


def emoji_packages_dir(data_root: Optional[Union[str, Path]] = None) -> Path:
    """The ``@iconify-json`` folder holding all five sets.

    Looked for under ``$AVALANCHE_TMC_EMOJI_DIR``, ``data_root/emoji``, ``data_root``,
    ``<cache>/emoji`` and ``~/.cache/avalanche_tmc/emoji`` (each an npm prefix:
    ``<prefix>/node_modules/@iconify-json``).
    """
    prefixes = [Path(p) for p in filter(None, [os.environ.get("AVALANCHE_TMC_EMOJI_DIR")])]
    if data_root is not None:
        prefixes += [Path(data_root) / "emoji", Path(data_root)]
    prefixes += [cache_dir() / "emoji", Path.home() / ".cache" / "avalanche_tmc" / "emoji"]
    prefixes = list(dict.fromkeys(prefixes))
    for prefix in prefixes:
        folder = prefix / "node_modules" / "@iconify-json"
        if all((folder / style / "icons.json").is_file() for style in EMOJI_STYLES):
            return folder
    raise MissingPackageError(
        "The emoji icon sets are not installed (looked under "
        + ", ".join(str(p / "node_modules" / "@iconify-json") for p in prefixes)
        + f"). Run `{emoji_install_command()}`."
    )


@dataclass
class IconSet:
    """One iconify JSON set: icons, aliases, default size and per-icon categories."""

    prefix: str
    icons: Dict[str, Dict[str, Any]]
    aliases: Dict[str, Dict[str, Any]]
    width: int
    height: int
    categories: Dict[str, str] = field(default_factory=dict)
    version: str = "?"

    @classmethod
    def read(cls, folder: Path) -> "IconSet":
        """Read ``icons.json`` (+ ``metadata.json`` categories, ``package.json`` version)."""
        data = json.loads((folder / "icons.json").read_text())
        meta_path, package_path = folder / "metadata.json", folder / "package.json"
        meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
        version = json.loads(package_path.read_text()).get("version", "?") if package_path.is_file() else "?"
        categories = {name: cat for cat, names in meta.get("categories", {}).items() for name in names}
        return cls(
            data["prefix"], data["icons"], data.get("aliases", {}),
            data.get("width", 16), data.get("height", 16), categories, version,
        )  # fmt: skip

    def names(self) -> set:
        """Every name the set answers to (icons and aliases)."""
        return set(self.icons) | set(self.aliases)

    def category(self, name: str) -> Optional[str]:
        """The set's own category for ``name`` (an alias takes its parent's)."""
        if name in self.categories:
            return self.categories[name]
        parent = self.aliases.get(name, {}).get("parent")
        return self.categories.get(parent) if parent else None

    def resolve(self, name: str) -> Dict[str, Any]:
        """Icon data with aliases followed and their flips / rotations merged (iconify rules)."""
        hflip, vflip, rotate, seen = False, False, 0, set()
        while name in self.aliases and name not in seen:
            seen.add(name)
            alias = self.aliases[name]
            hflip ^= bool(alias.get("hFlip", False))
            vflip ^= bool(alias.get("vFlip", False))
            rotate += int(alias.get("rotate", 0))
            name = alias["parent"]
        icon = self.icons[name]
        return {
            "body": icon["body"],
            "left": icon.get("left", 0), "top": icon.get("top", 0),
            "width": icon.get("width", self.width), "height": icon.get("height", self.height),
            "hFlip": hflip ^ bool(icon.get("hFlip", False)),
            "vFlip": vflip ^ bool(icon.get("vFlip", False)),
            "rotate": (rotate + int(icon.get("rotate", 0))) % 4,
        }  # fmt: skip


def canonical_emoji_category(raw: str) -> Optional[str]:
    """Map a set's category name ("Animals Nature", "Animals & Nature") to a Unicode group;
    None for non-Unicode ones (OpenMoji's "Extras ...")."""
    words = re.sub(r"[^a-z]+", " ", raw.lower()).split()
    for canonical in EMOJI_CATEGORIES:
        if words == re.sub(r"[^a-z]+", " ", canonical.lower()).split():
            return canonical
    return None


def emoji_catalog(sets: Sequence[IconSet]) -> Tuple[List[str], List[str]]:
    """Names shared by all ``sets`` (icons or aliases; sorted) and each one's category.

    Category rule: majority vote over the sets' own ``metadata.json`` categories mapped to
    the 9 Unicode emoji groups (ignoring OpenMoji's "Extras"); ties go to the earliest
    set in ``EMOJI_STYLES`` order (Twemoji first). Names no set categorises are dropped.
    """
    shared = sorted(set.intersection(*(s.names() for s in sets)))
    names, categories = [], []
    for name in shared:
        votes = [c for c in (canonical_emoji_category(s.category(name) or "") for s in sets) if c]
        if not votes:
            continue
        counts = Counter(votes)
        best = max(counts.values())
        names.append(name)
        categories.append(next(c for c in votes if counts[c] == best))  # first-voter tie-break
    return names, categories


def emoji_svg(icon: Mapping[str, Any], size: int) -> str:
    """A standalone SVG document of ``size`` px for a resolved icon (``currentColor`` = black)."""
    box = f'{icon["left"]} {icon["top"]} {icon["width"]} {icon["height"]}'
    return (
        '<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" '
        f'color="#000000" width="{size}" height="{size}" viewBox="{box}">{icon["body"]}</svg>'
    )


def render_svg(svg: str, size: int, hflip: bool = False, vflip: bool = False, rotate: int = 0) -> np.ndarray:
    """Rasterise with cairosvg onto white; flips then clockwise quarter turns (iconify's
    order). Returns ``uint8 (3, size, size)``."""
    import cairosvg
    from PIL import Image

    png = cairosvg.svg2png(bytestring=svg.encode("utf-8"), output_width=size, output_height=size)
    with Image.open(io.BytesIO(png)) as img:
        rgba = img.convert("RGBA")
    canvas = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
    rgb = np.asarray(Image.alpha_composite(canvas, rgba).convert("RGB"))
    if hflip:
        rgb = rgb[:, ::-1]
    if vflip:
        rgb = rgb[::-1]
    if rotate:
        rgb = np.rot90(rgb, k=-rotate, axes=(0, 1))
    return np.ascontiguousarray(rgb.transpose(2, 0, 1))


def _render_batch(jobs: Sequence[Tuple[str, bool, bool, int]], size: int) -> np.ndarray:
    """Render many ``(svg, hflip, vflip, rotate)`` jobs; ``uint8 (len, 3, size, size)``."""
    return np.stack([render_svg(svg, size, h, v, r) for svg, h, v, r in jobs])


def render_emoji(
    sets: Sequence[IconSet], names: Sequence[str], image_size: int, workers: Optional[int] = None
) -> Tensor:
    """Render every name in every set: ``uint8 (len(sets), len(names), 3, S, S)``.

    ``workers`` processes share the work (default: the CPU count, at most 8).
    """
    if importlib.util.find_spec("cairosvg") is None:
        raise MissingPackageError(f"emoji_styles needs cairosvg (and the system libcairo2): run `{CAIROSVG_INSTALL}`")
    jobs = []
    for icon_set in sets:
        for name in names:
            icon = icon_set.resolve(name)
            jobs.append((emoji_svg(icon, image_size), icon["hFlip"], icon["vFlip"], icon["rotate"]))
    workers = workers or min(os.cpu_count() or 1, 8)
    chunks = [jobs[i : i + 256] for i in range(0, len(jobs), 256)]
    if workers <= 1 or len(chunks) <= 1:
        arrays = [_render_batch(chunk, image_size) for chunk in chunks]
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            arrays = list(pool.map(_render_batch, chunks, [image_size] * len(chunks)))
    images = torch.from_numpy(np.concatenate(arrays))
    return images.view(len(sets), len(names), 3, image_size, image_size)


def _select_emoji_categories(categories: Sequence[str], choice: Union[None, int, Sequence[str]]) -> List[str]:
    """The categories to keep, in label order: all 9, the ``choice`` largest (Unicode order
    among them), or the given names."""
    if choice is None:
        return [c for c in EMOJI_CATEGORIES if c in set(categories)]
    if isinstance(choice, int):
        counts = Counter(categories)
        largest = sorted(counts, key=lambda c: (-counts[c], EMOJI_CATEGORIES.index(c)))[:choice]
        return [c for c in EMOJI_CATEGORIES if c in largest]
    chosen = [canonical_emoji_category(c) or c for c in choice]
    unknown = [c for c in chosen if c not in EMOJI_CATEGORIES]
    if unknown:
        raise ValueError(f"unknown emoji categories {unknown}; valid: {list(EMOJI_CATEGORIES)}")
    return chosen


def load_emoji_styles(
    data_root: Optional[Union[str, Path]] = None,
    image_size: int = 32,
    normalization: Normalization = "imagenet",
    styles: Optional[Sequence[str]] = None,
    categories: Union[None, int, Sequence[str]] = None,
    test_fraction: float = 0.3,
    split_seed: int = 0,
    limit_per_category: Optional[int] = None,
    cache: bool = True,
    workers: Optional[int] = None,
) -> Tuple[ImageTensorDataset, ImageTensorDataset]:
    """Emoji in five drawing styles; ``targets`` = Unicode category, ``domains`` = style.

    The 1,567 emoji present in all five iconify sets are rendered (cairosvg) in each style.
    The train/test split is by emoji (seeded, stratified by category; ``test_fraction``
    of each category's emoji go to test), so a test emoji is unseen in every style.
    ``categories``: None (all 9), an int k (the k largest), or a list of names; labels
    follow Unicode group order. ``styles`` picks / orders the domains.
    ``limit_per_category`` keeps the first k emoji (by name) of each category (for tests).
    Rendering all 7,835 images takes ~half a minute; the result is cached on disk.
    One dataset per style: ``dataset.subset(...)`` of the indices where ``domains`` is that style.
    """
    styles = list(styles or EMOJI_STYLES)
    unknown = [s for s in styles if s not in EMOJI_STYLES]
    if unknown:
        raise ValueError(f"unknown emoji styles {unknown}; valid: {list(EMOJI_STYLES)}")
    folder = emoji_packages_dir(data_root)
    all_sets = [IconSet.read(folder / style) for style in EMOJI_STYLES]
    names, cats = emoji_catalog(all_sets)  # the catalog does not depend on `styles`
    if limit_per_category is not None:
        seen: Counter = Counter()
        keep = [i for i, c in enumerate(cats) if seen.update([c]) or seen[c] <= limit_per_category]
        names, cats = [names[i] for i in keep], [cats[i] for i in keep]
    sets = [all_sets[EMOJI_STYLES.index(s)] for s in styles]

    def build() -> Dict[str, Any]:
        return {"images": render_emoji(sets, names, image_size, workers), "names": list(names)}

    key = f"emoji-{image_size}px-{digest(CACHE_VERSION, styles, [s.version for s in sets], names)}"
    rendered = cached_tensors(key, build, cache, image_size=image_size, keys=("images", "names"))["images"]

    label_names = _select_emoji_categories(cats, categories)
    chosen = np.array([i for i, c in enumerate(cats) if c in label_names], dtype=np.int64)
    labels = np.array([label_names.index(cats[i]) for i in chosen], dtype=np.int64)
    train_pos, test_pos = stratified_split(labels, test_fraction=test_fraction, seed=split_seed)

    def assemble(pos: np.ndarray) -> ImageTensorDataset:
        emoji_idx = torch.as_tensor(chosen[pos])
        n_styles, n = len(sets), len(pos)
        return ImageTensorDataset(
            rendered[:, emoji_idx].reshape(n_styles * n, 3, image_size, image_size),
            torch.as_tensor(labels[pos]).repeat(n_styles),
            label_names,
            normalization,
            domains=torch.arange(n_styles).repeat_interleave(n),
            domain_names=styles,
            names=[names[i] for i in chosen[pos]] * n_styles,
        )

    return assemble(train_pos), assemble(test_pos)
