"""``avalanche-tmc compose``: sum component (and composition) files into one composition file."""

import argparse
from typing import Optional, Sequence

from .arguments import add_command, files_argument, output_arguments
from .exits import EXIT_OK
from .outputs import check_not_an_input, check_output, read_components, read_key, shown

__all__ = ["NAME", "register", "run", "compose_files"]

NAME = "compose"
POSITION = 20  # where --help lists it
"""The command's name."""


def register(commands: "argparse._SubParsersAction") -> argparse.ArgumentParser:
    """Add ``compose`` and its arguments."""
    compose = add_command(
        commands, NAME, "compose files into a composition file",
        "Sum component files (and composition files) into one composition file: S = sum of w_t delta_t "
        "and W = sum of w_t (statistics: their sum). Every file must come from the same base model; an "
        "experience may appear once.")
    files_argument(compose, "component or composition files, or directories")
    output_arguments(compose, "FILE", "the composition file to write", "--out if it exists")
    compose.add_argument("--mixed-weighting", action="store_true",
                         help="compose files trained with different --weighting (mean: weight 1 each; samples: "
                              "sample counts) anyway; refused by default (exit 4): their weights are not on one scale")
    return compose


def run(args: argparse.Namespace) -> int:
    """``compose`` from its parsed arguments."""
    return compose_files(args.files, args.out, overwrite=args.overwrite, quiet=args.quiet,
                         mixed_weighting=args.mixed_weighting, key_file=args.key_file)


def compose_files(files: Sequence[str], out: str, overwrite: bool = False, quiet: bool = False,
                  mixed_weighting: bool = False, key_file: Optional[str] = None) -> int:
    """Compose component (and composition) files into one composition file."""
    from ..files import component_paths, compose_components, save_component

    check_output(out, overwrite)
    check_not_an_input(out, component_paths(files))
    key = read_key(key_file)
    composition = compose_components(read_components(files, quiet, key), mixed_weighting=mixed_weighting)
    save_component(composition, out, overwrite=overwrite, key=key)
    print(f"wrote {shown(out)}: experiences {composition.experiences}, total weight {composition.weight:g}")
    return EXIT_OK
