"""Generated image folders laid out as the paper's folder datasets, for tests and for
measuring the image pipeline: ``make_image_folder(root, layout="caltech256", ...)`` or
``python -m benchmarks.datasets.synthetic --layout caltech256 --out DIR --classes 10 --per-class 12``.

The images are JPEGs of varied, non-square sizes (300-500 px a side by default, like
Caltech-256's photos) holding a smooth colour gradient, a few filled shapes, low-frequency
texture and pixel noise, so that decoding one costs about what decoding a photo of that
size costs (a flat image decodes much faster). Each class has its own hue and shape, so a
network can tell them apart. Everything is drawn from ``seed``: the same call writes the
same files.

Layouts (what the matching loader of :mod:`benchmarks.datasets.folders` reads from
``data_root=root``):

* ``caltech256``: ``root/caltech256/256_ObjectCategories/NNN.<name>/NNN_MMMM.jpg``;
* ``mit67``: ``root/mit67/Images/<class>/<file>.jpg`` with ``TrainImages.txt`` /
  ``TestImages.txt`` (80 % / 20 % of each class, at least one each);
* ``oxford_pets``: ``root/oxford_pets/images/<Class>_<n>.jpg`` (one flat folder);
* ``tinyimagenet``: ``root/tiny-imagenet-200/train/<wnid>/images/<wnid>_<n>.JPEG``,
  ``val/images/val_<n>.JPEG`` + ``val/val_annotations.txt`` (a fifth of ``per_class``
  per class, at least one), ``wnids.txt`` (the real one is 64×64: pass
  ``min_size=max_size=64``);
* ``folder``: ``root/class<NN>/img<NNNN>.jpg``, a researcher's own folder (``--dataset
  folder --data-root root``).
"""

from __future__ import annotations

import argparse
import colorsys
from pathlib import Path
from typing import List, Optional, Sequence, Union

import numpy as np

from .registry import FOLDER_DATASETS

__all__ = ["LAYOUTS", "synthetic_image", "make_image_folder", "main"]

LAYOUTS = FOLDER_DATASETS  # one generated layout per registered folder dataset


def synthetic_image(rng: np.random.Generator, width: int, height: int, label: int = 0, classes: int = 1):
    """A photo-like RGB PIL image of ``width`` × ``height``: gradient, shapes, texture, noise."""
    from PIL import Image, ImageDraw, ImageFilter

    hue = (label / max(classes, 1) + rng.normal(0, 0.02)) % 1.0
    base = np.array(colorsys.hsv_to_rgb(hue, 0.55, 0.75)) * 255
    corners = np.clip(base + rng.normal(0, 45, (2, 2, 3)), 0, 255).astype(np.float32)
    y = np.linspace(0, 1, height, dtype=np.float32)[:, None, None]
    x = np.linspace(0, 1, width, dtype=np.float32)[None, :, None]
    img = ((1 - y) * (1 - x) * corners[0, 0] + (1 - y) * x * corners[0, 1]
           + y * (1 - x) * corners[1, 0] + y * x * corners[1, 1])
    # low-frequency texture: coarse noise upsampled smoothly (like foliage, walls, fur)
    coarse = rng.normal(0, 28, (max(height // 24, 2), max(width // 24, 2), 3)).astype(np.float32)
    texture = Image.fromarray(np.clip(coarse + 128, 0, 255).astype(np.uint8))
    texture = texture.resize((width, height), Image.BICUBIC)
    img = img + (np.asarray(texture, dtype=np.float32) - 128)
    picture = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(picture)
    for k in range(int(rng.integers(3, 7))):
        x0, x1 = sorted(rng.integers(0, width, 2).tolist())
        y0, y1 = sorted(rng.integers(0, height, 2).tolist())
        box = (x0, y0, max(x1, x0 + 8), max(y1, y0 + 8))
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        kind = (label + k) % 3 if k == 0 else int(rng.integers(0, 3))  # the first shape is the class's
        if kind == 0:
            draw.ellipse(box, fill=colour)
        elif kind == 1:
            draw.rectangle(box, fill=colour)
        else:
            draw.polygon([(box[0], box[3]), ((box[0] + box[2]) // 2, box[1]), (box[2], box[3])], fill=colour)
    picture = picture.filter(ImageFilter.GaussianBlur(radius=float(rng.uniform(0.6, 1.4))))
    pixels = np.asarray(picture, dtype=np.float32) + rng.normal(0, 5, (height, width, 3)).astype(np.float32)
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))


def _write(path: Path, rng: np.random.Generator, label: int, classes: int, min_size: int, max_size: int) -> None:
    width, height = (int(v) for v in rng.integers(min_size, max_size + 1, 2))
    if width == height and min_size != max_size:  # keep them non-square, as photos are
        width = width + 1 if width < max_size else width - 1
    path.parent.mkdir(parents=True, exist_ok=True)
    synthetic_image(rng, width, height, label, classes).save(path, "JPEG", quality=int(rng.integers(80, 93)))


def make_image_folder(
    root: Union[str, Path],
    layout: str = "caltech256",
    classes: int = 10,
    per_class: Union[int, Sequence[int]] = 12,
    min_size: int = 300,
    max_size: int = 500,
    seed: int = 0,
) -> Path:
    """Write a generated dataset under ``root`` laid out as ``layout`` (one of :data:`LAYOUTS`)
    and return ``root``: pass it as ``data_root`` to the matching ``load_<layout>``.

    ``per_class``: images per class, or one count per class (e.g. to make a class too small).
    ``min_size`` / ``max_size``: bounds of each side, drawn independently (non-square).
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout={layout!r}: use one of {', '.join(LAYOUTS)}")
    if classes < 1:
        raise ValueError(f"classes={classes}: need at least one class")
    if not 8 <= min_size <= max_size:
        raise ValueError(f"need 8 <= min_size <= max_size, got min_size={min_size}, max_size={max_size}")
    counts: List[int] = [int(per_class)] * classes if isinstance(per_class, int) else [int(n) for n in per_class]
    if len(counts) != classes or min(counts) < 0:
        raise ValueError(f"per_class: one non-negative count or {classes} of them, got {per_class!r}")
    root = Path(root)
    rng = np.random.default_rng(seed)

    def write(path: Path, label: int) -> None:
        _write(path, rng, label, classes, min_size, max_size)

    if layout == "caltech256":
        base = root / "caltech256" / "256_ObjectCategories"
        for c, n in enumerate(counts):
            folder = base / f"{c + 1:03d}.shape-{c + 1:03d}"
            folder.mkdir(parents=True, exist_ok=True)
            for j in range(n):
                write(folder / f"{c + 1:03d}_{j + 1:04d}.jpg", c)
    elif layout == "mit67":
        base = root / "mit67"
        train_lines, test_lines = [], []
        for c, n in enumerate(counts):
            name = f"room{c:02d}"
            (base / "Images" / name).mkdir(parents=True, exist_ok=True)
            n_train = min(max(int(round(0.8 * n)), 1), n - 1) if n > 1 else n
            for j in range(n):
                write(base / "Images" / name / f"img{j:04d}.jpg", c)
                (train_lines if j < n_train else test_lines).append(f"{name}/img{j:04d}.jpg")
        (base / "TrainImages.txt").write_text("".join(line + "\n" for line in train_lines))
        (base / "TestImages.txt").write_text("".join(line + "\n" for line in test_lines))
    elif layout == "folder":
        for c, n in enumerate(counts):
            for j in range(n):
                write(root / f"class{c:02d}" / f"img{j:04d}.jpg", c)
    elif layout == "oxford_pets":
        base = root / "oxford_pets" / "images"
        base.mkdir(parents=True, exist_ok=True)
        for c, n in enumerate(counts):
            name = f"Breed{c:02d}" if c % 2 == 0 else f"breed_{c:02d}"  # cats capitalised, dogs not
            for j in range(n):
                write(base / f"{name}_{j + 1}.jpg", c)
    else:
        base = root / "tiny-imagenet-200"
        wnids = [f"n{c + 1:08d}" for c in range(classes)]
        (base / "val" / "images").mkdir(parents=True, exist_ok=True)
        annotations = []
        for c, (wnid, n) in enumerate(zip(wnids, counts)):
            (base / "train" / wnid / "images").mkdir(parents=True, exist_ok=True)
            for j in range(n):
                write(base / "train" / wnid / "images" / f"{wnid}_{j}.JPEG", c)
            for _ in range(max(n // 5, 1) if n else 0):
                file_name = f"val_{len(annotations)}.JPEG"
                write(base / "val" / "images" / file_name, c)
                annotations.append(f"{file_name}\t{wnid}\t0\t0\t{min_size - 1}\t{min_size - 1}")
        (base / "val" / "val_annotations.txt").write_text("".join(line + "\n" for line in annotations))
        (base / "wnids.txt").write_text("".join(w + "\n" for w in wnids))
    return root


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m benchmarks.datasets.synthetic``: write a generated folder dataset."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.datasets.synthetic",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--layout", choices=LAYOUTS, default="caltech256")
    parser.add_argument("--out", required=True, help="the folder to write (then pass it as data_root)")
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--per-class", type=int, default=12)
    parser.add_argument("--min-size", type=int, default=300)
    parser.add_argument("--max-size", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    root = make_image_folder(args.out, args.layout, args.classes, args.per_class, args.min_size, args.max_size,
                             args.seed)
    print(f"wrote {args.classes} x {args.per_class} {args.layout} images under {root}: "
          f"python -m benchmarks.datasets {args.layout} --data-root {root}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
