"""Checks of the command line's inputs and outputs, made before any slow work: an output
that cannot be written, exists, or is one of the inputs is refused first."""

import os
import sys
from typing import TYPE_CHECKING, Any, List, Optional, Sequence

from .exits import UsageError

if TYPE_CHECKING:
    from ..files import Component

__all__ = ["shown", "check_writable", "check_output", "check_not_an_input", "read_key", "read_components"]


def shown(path: Any) -> str:
    """A file name as errors print it, control characters escaped (the component files' one helper)."""
    from ..files.component import _shown

    return _shown(path)


def check_writable(directory: str, what: str) -> None:
    """:func:`avalanche_tmc.files.filesystem.check_writable` (create ``directory`` if
    needed and write a file there: an unusable output is found before any training, not
    after), its error a :class:`UsageError` naming ``what``."""
    from ..files.filesystem import check_writable as probe

    try:
        probe(directory)
    except OSError as error:
        raise UsageError(f"{what} {shown(directory)} cannot be written ({shown(error.strerror or error)}).") \
            from None


def check_output(path: str, overwrite: bool) -> None:
    """``--out`` names a file that may be written: not a directory, absent unless
    ``overwrite``, in a writable directory."""
    if os.path.isdir(path):
        raise UsageError(f"{shown(path)} is a directory; --out names the file to write.")
    if os.path.lexists(path) and not overwrite:
        from ..files import ComponentExistsError

        raise ComponentExistsError(f"{shown(path)} exists; pass --overwrite to replace it.")
    check_writable(os.path.dirname(os.path.abspath(path)), "the directory of --out")


def check_not_an_input(out: str, inputs: Sequence[str]) -> None:
    """Refuse an ``--out`` that is one of the input files (the same file by another path, a
    symlink or a hard link included): with ``--overwrite`` it would replace an input, maybe
    the only copy of a component, by the result."""
    if not os.path.exists(out):
        return  # not an input: every input exists
    for path in inputs:
        try:
            same = os.path.samefile(out, path)
        except OSError:
            same = os.path.realpath(out) == os.path.realpath(path)
        if same:
            raise UsageError(f"--out {shown(out)} is the input file {shown(path)}: writing the result there would "
                             "replace an input (perhaps the only copy of a component). Write it to another file.")


def read_key(key_file: Optional[str]) -> Optional[bytes]:
    """The key of ``--key-file`` (None: the library then reads ``$AVALANCHE_TMC_KEY_FILE``)."""
    from ..files import read_key_file

    return read_key_file(key_file) if key_file else None


def read_components(paths: Sequence[str], quiet: bool, key: Optional[bytes] = None) -> List["Component"]:
    """The component files named by ``paths`` (files or directories), read and checked."""
    from tqdm import tqdm

    from ..files import component_paths, load_component

    files = component_paths(paths)
    if not files:
        raise UsageError(f"No .safetensors files in {[shown(p) for p in paths]}.")
    return [load_component(p, key=key) for p in tqdm(files, desc="reading", unit="file",
                                                      disable=quiet or len(files) < 2, file=sys.stderr)]
