"""The arguments several commands share (factories, outputs, logging, files, ``--key-file``)
and the one place that turns them from the parsed command line into explicit values."""

import argparse
import textwrap

from ..loggers import LOGGERS  # standard library only: keeps --help fast
from .argtypes import BATCH_SIZE, MAX_BATCH_SIZE, device
from .loading import DEFAULT_DATA, DEFAULT_MODEL, Factories
from .logs import LogSettings

__all__ = ["Formatter", "EXIT_CODES_POINTER", "add_command", "factory_arguments", "output_arguments",
           "logging_arguments", "files_argument", "factories_of", "log_settings_of"]


class Formatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Descriptions as written, defaults shown (not for a required option, a flag, or an
    option without a default: no "(default: None)")."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if (action.required or action.default is None or action.default is False or action.default == []
                or action.default == argparse.SUPPRESS or not action.option_strings):
            return action.help or ""
        return super()._get_help_string(action) or ""


EXIT_CODES_POINTER = "exit codes: 'avalanche-tmc --help' lists them (0 success, 2 bad command line, 3 unusable file)."
"""The epilog of every command's ``--help``: the exit codes are listed once, in the program's."""


def add_command(commands: "argparse._SubParsersAction", name: str, summary: str,
                description: str) -> argparse.ArgumentParser:
    """A subcommand with its one-line ``summary``, wrapped ``description``, a pointer to the
    exit codes (listed once, by ``avalanche-tmc --help``) below its options, and ``--key-file``."""
    parser = commands.add_parser(name, formatter_class=Formatter, epilog=EXIT_CODES_POINTER, help=summary,
                                 description=textwrap.fill(description, 88))
    parser.add_argument("--key-file", metavar="FILE", default=None,
                        help="shared key (at least 16 bytes) of the federation: files written are signed with it "
                             "(HMAC-SHA256), files read must be signed with it; default: the file named by "
                             "$AVALANCHE_TMC_KEY_FILE, else no signatures")
    return parser


def factory_arguments(parser: argparse.ArgumentParser) -> None:
    """``--model``, ``--data``, their options, ``--device`` and ``--eval-batch-size``."""
    group = parser.add_argument_group("model and data (the same on every silo)")
    group.add_argument("--model", default=DEFAULT_MODEL, metavar="MODULE:FUNCTION",
                       help="factory returning the pre-trained network, its head sized for the classes: an installed "
                            "module's function or path/to/file.py:function (the working directory is not searched)")
    group.add_argument("--data", default=DEFAULT_DATA, metavar="MODULE:FUNCTION",
                       help="factory returning an Avalanche benchmark (train_stream, test_stream): module:function "
                            "or path/to/file.py:function")
    group.add_argument("--model-option", action="append", default=[], metavar="KEY=VALUE",
                       help="keyword argument of the model factory (repeat it); VALUE is read as JSON if it parses, "
                            "e.g. --model-option num_classes=10")
    group.add_argument("--data-option", action="append", default=[], metavar="KEY=VALUE",
                       help="keyword argument of the data factory (repeat it), e.g. --data-option n_experiences=5 "
                            "--data-option dataset_root=/usr/share/datasets/fashion-mnist")
    group.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                       help="keyword argument of both factories (e.g. a seed both take)")
    group.add_argument("--device", default="cpu", type=device, help="torch device: cpu, cuda, cuda:N, mps, xpu")
    group.add_argument("--eval-batch-size", type=BATCH_SIZE, default=256,
                       help=f"batch size of evaluation and statistics (at most {MAX_BATCH_SIZE})")


def output_arguments(parser: argparse.ArgumentParser, metavar: str, written: str, replaced: str) -> None:
    """``--out``, ``--overwrite`` and ``--quiet``."""
    parser.add_argument("--out", required=True, metavar=metavar, help=written)
    parser.add_argument("--overwrite", action="store_true", help=f"replace {replaced}")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def logging_arguments(parser: argparse.ArgumentParser, ranks: bool = False) -> None:
    """``--logger``, ``--log-dir`` and (``ranks``) ``--all-ranks``."""
    group = parser.add_argument_group("logging")
    group.add_argument("--logger", action="append", choices=LOGGERS, default=[],
                       help="log accuracy and loss with Avalanche's logger (repeat it for several): text (stdout), "
                            "csv, tensorboard (needs tensorboard), wandb (offline; needs wandb)")
    group.add_argument("--log-dir", default="avalanche-tmc-logs", metavar="DIR",
                       help="directory of the csv, tensorboard and wandb logs (rank-<r>/ per torchrun process); "
                            "the csv files are appended to, so calls into one directory keep each other's rows")
    if ranks:
        group.add_argument("--all-ranks", action="store_true",
                           help="under torchrun, every process prints (its files, progress, text log); by default "
                                "only rank 0 does")


def files_argument(parser: argparse.ArgumentParser, what: str, json_output: bool = False) -> None:
    """The ``FILE`` arguments (and ``--json``)."""
    parser.add_argument("files", nargs="+", metavar="FILE", help=what)
    if json_output:
        parser.add_argument("--json", action="store_true", help="print JSON")


def factories_of(args: argparse.Namespace) -> Factories:
    """The factories of :func:`factory_arguments` (a malformed option: a usage error)."""
    return Factories.parse(args.model, args.data, args.option, args.model_option, args.data_option)


def log_settings_of(args: argparse.Namespace, command: str, all_ranks: bool = False) -> LogSettings:
    """The logging of :func:`logging_arguments` (``all_ranks``: ``--all-ranks``, where the command has it)."""
    return LogSettings(tuple(args.logger), args.log_dir, command, all_ranks)
