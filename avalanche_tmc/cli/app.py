"""``main``: parse the command line, run the command, map its error to a documented exit code."""

import os
import sys
import traceback
from typing import Optional, Sequence

from .exits import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_PIPE, describe, exit_code
from .parser import COMMANDS, build_parser

__all__ = ["main", "entry_point"]


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line; returns the exit code (see :data:`~avalanche_tmc.cli.exits.EXIT_CODES`)."""
    import warnings

    # (Avalanche's qpsolvers warning is filtered by avalanche_tmc/__init__.py, precisely)
    warnings.filterwarnings("ignore", message="No loggers specified", category=UserWarning, module="avalanche")
    args = build_parser().parse_args(argv)  # before the heavy imports: --help and usage errors answer at once
    try:
        code = COMMANDS[args.command].run(args)
        sys.stdout.flush()  # a closed pipe is found here, not in the interpreter's shutdown
        return code
    except KeyboardInterrupt:
        print("avalanche-tmc: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # the reader closed the pipe (| head): stop printing, quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_PIPE
    except Exception as error:  # noqa: BLE001  (mapped to documented exit codes)
        code = exit_code(error)
        if code is not None:
            print(f"avalanche-tmc {args.command}: error: {describe(error)}", file=sys.stderr)
            return code
        traceback.print_exc()
        print(f"avalanche-tmc {args.command}: unexpected error (exit {EXIT_ERROR}); please report it with the "
              "traceback above.", file=sys.stderr)
        return EXIT_ERROR


def entry_point() -> None:
    """The ``avalanche-tmc`` console script (and ``python -m avalanche_tmc``)."""
    from .._safe_path import drop_working_directory

    drop_working_directory()
    sys.exit(main())
