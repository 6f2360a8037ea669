"""The ``avalanche-tmc`` argument parser: the program's description, then one subparser per
command, each registered by its own module.

A command is one module of this package that defines ``NAME`` (the command), ``POSITION``
(where ``--help`` lists it), ``register(commands)`` (adds its subparser) and ``run(args)``;
the modules are found here, so adding a command is adding its file."""

import argparse
import difflib
import importlib
import pkgutil
import re
import textwrap
from types import ModuleType
from typing import Dict, List, NoReturn, Optional, Sequence, Tuple

from .exits import EXIT_CODES, EXIT_USAGE

__all__ = ["COMMANDS", "Parser", "command_modules", "build_parser"]


class Parser(argparse.ArgumentParser):
    """An argument parser whose refusal of a command line is one line on stderr (exit code 2,
    ``EXIT_USAGE``), as every other refusal of the command line: the error, with a "did you
    mean" for a misspelled option, choice or command, and a hint to use ``--help``, not the
    usage block."""

    def error(self, message: str) -> NoReturn:
        """Print ``PROG: error: MESSAGE (see PROG --help)`` (one line) and exit with 2."""
        self.exit(EXIT_USAGE, f"{self.prog}: error: {' '.join(self._suggested(message).split())} "
                              f"(see {self.prog} --help)\n")

    def parse_known_args(self, args: Optional[Sequence[str]] = None,  # type: ignore[override]
                         namespace: Optional[argparse.Namespace] = None) -> Tuple[argparse.Namespace, List[str]]:
        """As argparse's; arguments left over are reported by the command's own parser,
        which knows the command's options (for its "did you mean")."""
        parsed, extra = super().parse_known_args(args, namespace)
        command = getattr(parsed, "command", None)
        sub = self._subparser(command) if extra and command else None
        if sub is not None:
            sub.error(f"unrecognized arguments: {' '.join(extra)}")
        return parsed, extra

    def _subparser(self, command: str) -> Optional["Parser"]:
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction) and command in action.choices:
                return action.choices[command]
        return None

    def _options(self) -> List[str]:
        return [o for action in self._actions for o in action.option_strings if o.startswith("--")]

    def _suggested(self, message: str) -> str:
        """``message`` with "did you mean" for each unknown option or invalid choice close
        to a known one."""
        unknown = re.match(r"unrecognized arguments: (.*)", message)
        if unknown:
            parts = []
            for token in unknown.group(1).split():
                name = token.split("=", 1)[0]
                close = difflib.get_close_matches(name, self._options(), n=1, cutoff=0.6) if name.startswith("-") \
                    else []
                parts.append(f"{token} (did you mean {close[0]}?)" if close else token)
            return f"unrecognized arguments: {' '.join(parts)}"
        choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if choice:
            choices = re.findall(r"'([^']*)'", choice.group(2))
            close = difflib.get_close_matches(choice.group(1), choices, n=1, cutoff=0.5)
            if close:
                return f"{message}; did you mean {close[0]!r}?"
        return message


def command_modules() -> Dict[str, ModuleType]:
    """Command name -> its module, for every module of this package that defines ``NAME``,
    ``register`` and ``run``, in ``POSITION`` order (``__main__`` and the modules that use
    this one, ``app`` and ``parser``, are not commands)."""
    package = __name__.rsplit(".", 1)[0]
    found = []
    for info in pkgutil.iter_modules(importlib.import_module(package).__path__):
        if info.name.startswith("_") or info.name in ("app", "parser"):
            continue
        module = importlib.import_module(f"{package}.{info.name}")
        if all(hasattr(module, name) for name in ("NAME", "register", "run")):
            found.append(module)
    return {m.NAME: m for m in sorted(found, key=lambda m: (getattr(m, "POSITION", 1000), m.NAME))}


COMMANDS: Dict[str, ModuleType] = command_modules()
"""Command name -> its module (``register(commands)`` adds its subparser, ``run(args)`` runs it)."""


def build_parser() -> argparse.ArgumentParser:
    """The ``avalanche-tmc`` argument parser (its subparsers are :class:`Parser` too)."""
    parser = Parser(
        prog="avalanche-tmc", formatter_class=argparse.RawDescriptionHelpFormatter,
        description=textwrap.fill(
                    "Train tangent components (or head statistics) one experience at a time, in separate places, "
                    "and compose, forget, inspect and evaluate them as safetensors files. The network and the data "
                    "come from --model and --data factories ('module:function', called with the --model-option "
                    "and --data-option pairs); the defaults are installed and offline: scikit-learn's digits in 5 "
                    "class-incremental experiences and a small CNN pre-trained on other digits "
                    "(avalanche_tmc.factories:digits_cnn and :digits). avalanche_tmc.factories also has Avalanche's "
                    "classic benchmarks on local files (split_mnist, split_fmnist, split_cifar10, split_cifar100) "
                    "and torchvision/timm backbones.", 88),
        epilog="example (two silos and a composer):\n"
               "  avalanche-tmc train-component --experience 0 --out silo_a/\n"
               "  avalanche-tmc train-component --experience 1 2 --out silo_b/\n"
               "  avalanche-tmc compose silo_a silo_b --out composed.safetensors\n"
               "  avalanche-tmc evaluate composed.safetensors\n"
               "  avalanche-tmc forget composed.safetensors silo_b/experience-2.safetensors --out rest.safetensors\n"
               "\n'avalanche-tmc COMMAND --help' describes each command.\n\n" + EXIT_CODES)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMANDS.values():
        module.register(commands)
    return parser
