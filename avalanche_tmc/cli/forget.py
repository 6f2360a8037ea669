"""``avalanche-tmc forget``: subtract component files from a composition file, exactly."""

import argparse
from typing import Optional, Sequence

from .arguments import add_command, output_arguments
from .exits import EXIT_OK
from .outputs import check_not_an_input, check_output, read_components, read_key, shown

__all__ = ["NAME", "register", "run", "forget_files"]

NAME = "forget"
POSITION = 30  # where --help lists it
"""The command's name."""


def register(commands: "argparse._SubParsersAction") -> argparse.ArgumentParser:
    """Add ``forget`` and its arguments."""
    forget = add_command(
        commands, NAME, "remove components from a composition file",
        "Subtract component files from a composition file, exactly: the result equals composing the "
        "remaining components. Each file must be the very file that was composed.")
    forget.add_argument("composition", metavar="COMPOSITION", help="the composition file")
    forget.add_argument("components", nargs="+", metavar="FILE", help="component files to forget")
    output_arguments(forget, "FILE", "the new composition file", "--out if it exists")
    return forget


def run(args: argparse.Namespace) -> int:
    """``forget`` from its parsed arguments."""
    return forget_files(args.composition, args.components, args.out, overwrite=args.overwrite, quiet=args.quiet,
                        key_file=args.key_file)


def forget_files(composition_file: str, components: Sequence[str], out: str, overwrite: bool = False,
                 quiet: bool = False, key_file: Optional[str] = None) -> int:
    """Subtract component files from a composition file and write the result to ``out``."""
    from ..files import component_paths, forget_component, load_component, save_component

    check_output(out, overwrite)
    check_not_an_input(out, [composition_file, *component_paths(components)])
    key = read_key(key_file)
    composition = load_component(composition_file, key=key)
    for component in read_components(components, quiet, key):
        composition = forget_component(composition, component)
    save_component(composition, out, overwrite=overwrite, key=key)
    print(f"wrote {shown(out)}: experiences {composition.experiences}, total weight {composition.weight:g}")
    return EXIT_OK
