"""``avalanche-tmc inspect``: what component files hold (reading never executes anything)."""

import argparse
import json
from typing import Any, Dict, Optional, Sequence

from .arguments import add_command, files_argument
from .exits import EXIT_OK
from .outputs import read_components, read_key

__all__ = ["NAME", "register", "run", "inspect_files", "summary"]

NAME = "inspect"
POSITION = 40  # where --help lists it
"""The command's name."""


def register(commands: "argparse._SubParsersAction") -> argparse.ArgumentParser:
    """Add ``inspect`` and its arguments."""
    inspect = add_command(
        commands, NAME, "list what files hold",
        "Print each file's kind, experiences and classes, weight, size, training settings and base "
        "model (reading never executes anything in a file).")
    files_argument(inspect, "files or directories", json_output=True)
    return inspect


def run(args: argparse.Namespace) -> int:
    """``inspect`` from its parsed arguments."""
    return inspect_files(args.files, as_json=args.json, key_file=args.key_file)


def summary(info: Dict[str, Any]) -> str:
    """The text ``inspect`` prints for one file's ``describe`` record."""
    base, settings = info["base"], info["settings"]
    what = (f"component of experience {info['experiences'][0]}" if info["kind"] == "component"
            else f"composition of experiences {info['experiences']}")
    classes = "; ".join(f"task {t}: {c}" for t, c in info["classes"].items()) or "unknown"
    lines = [f"{info['file']}: {what}, {info['payload']}, weight {info['weight']:g}",
             f"  classes: {classes}",
             f"  tensors: {info['tensors']} ({info['values']:,} values, {info['bytes']:,} bytes), "
             f"sha256 {info['sha256'][:16]}",
             f"  base: {base.get('architecture')}, weights {str(base.get('weights_sha256'))[:16]}, head size "
             f"{base.get('head_size')}" + (f", {len(base['linearized'])} linearized parameters ({base.get('dtype')})"
                                           if "linearized" in base else f", head {base.get('head')}, projection "
                                                                         f"{base.get('projection_dim')}")]
    if settings:
        lines.append("  settings: " + ", ".join(f"{k}={v}" for k, v in settings.items()))
    lines.append("  signature: " + dict(verified="verified with the key", absent="absent").get(
        info["signature"], "present, not verified (no key given: --key-file checks it)"))
    return "\n".join(lines)


def inspect_files(files: Sequence[str], as_json: bool = False, key_file: Optional[str] = None) -> int:
    """Print what each file holds."""
    from ..files import describe

    infos = [describe(c) for c in read_components(files, True, read_key(key_file))]
    print(json.dumps(infos, indent=2) if as_json else "\n".join(summary(i) for i in infos))
    return EXIT_OK
