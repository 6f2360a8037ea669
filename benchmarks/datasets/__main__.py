"""``python -m benchmarks.datasets [NAME ...] [--image-size N]``: what each dataset is and
needs, its size, classes and load time (default: the offline ones)."""

import argparse

from benchmarks.datasets.registry import DATASETS, summarise

OFFLINE = [n for n in DATASETS if n not in ("caltech256", "mit67", "oxford_pets", "tinyimagenet")]

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=summarise.__doc__)
    parser.add_argument("names", nargs="*", default=OFFLINE)
    parser.add_argument("--image-size", type=int, default=32)
    args = parser.parse_args()
    summarise(args.names, args.image_size)
