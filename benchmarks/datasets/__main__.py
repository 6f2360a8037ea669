"""``python -m benchmarks.datasets [NAME ...] [--data-root DIR] [--image-size N] [--all]``.

Without a name: every registered dataset, its kind (offline / folder) and what it needs,
loading none. With names: loads those (folder datasets from ``--data-root``) and prints
their size, classes and load time, or why one is unavailable and the layout it expects;
exit 1 if one is. ``--all``: load every offline dataset (about two minutes)."""

import argparse
import sys
from typing import List, Optional

from benchmarks.datasets.registry import DATASETS, OFFLINE_DATASETS, describe, summarise


def main(argv: Optional[List[str]] = None) -> int:
    """Run the listing or the check; the exit status (0, 1: a dataset unavailable, 2: bad usage)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.datasets", description=__doc__.split("\n\n")[1])
    parser.add_argument("names", nargs="*", metavar="NAME", help="datasets to load and check")
    parser.add_argument("--data-root", help="the folder holding a folder dataset (caltech256 ..., folder)")
    parser.add_argument("--image-size", type=int, default=32,
                        help="the side the images are resized to, as the runner's --image-size (default 32)")
    parser.add_argument("--all", action="store_true", help="load every offline dataset")
    args = parser.parse_args(argv)
    from benchmarks.networks.arithmetic import runner_arithmetic

    runner_arithmetic()  # the runner's one CPU arithmetic (AVX2), before torch computes
    unknown = [n for n in args.names if n not in DATASETS]
    if unknown:
        parser.error(f"unknown dataset(s) {', '.join(unknown)}; valid names: {', '.join(DATASETS)}")
    if not 1 <= args.image_size <= 4096:
        parser.error(f"--image-size {args.image_size}: give 1 to 4096")
    names = list(OFFLINE_DATASETS) if args.all else args.names
    if not names:
        describe(list(DATASETS))
        print("\ncheck one: python -m benchmarks.datasets NAME [--data-root DIR]  (--all loads every offline one)")
        return 0
    return 1 if summarise(names, args.image_size, data_root=args.data_root) else 0


if __name__ == "__main__":
    sys.exit(main())
