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
    """:func:`avalanche_tmc.files.filesystem.check_writable` (write a file in ``directory``,
    or in its parent if it is to be created: an unusable output is found before any
    training, not after; nothing is created, so a refused command leaves no empty folder),
    its error a :class:`UsageError` naming ``what``. A missing parent folder is refused,
    never created: it is more often a typo than a wish."""
    from ..files.filesystem import check_writable as probe

    parent = os.path.dirname(os.path.abspath(directory))
    if not os.path.isdir(directory) and not os.path.lexists(directory) and not os.path.isdir(parent):
        raise UsageError(f"{what} {shown(directory)}: the folder {shown(parent)} does not exist; create it "
                         f"(mkdir -p {shown(parent)}) or choose another place.")
    try:
        probe(directory, create=False)
    except OSError as error:
        raise UsageError(f"{what} {shown(directory)} cannot be written ({shown(error.strerror or error)}).") \
            from None


def check_output(path: str, overwrite: bool, new_folder: bool = False) -> None:
    """``--out`` names a file that may be written: not a directory, absent unless
    ``overwrite``, in a writable directory that exists (``new_folder``: or that will be
    made in an existing one: ``train-component``'s ``--out DIR``)."""
    if os.path.isdir(path) or path.endswith(tuple(filter(None, ("/", os.sep, os.altsep)))):
        raise UsageError(f"--out {shown(path)} is a directory; --out names the file to write (e.g. "
                         f"{shown(os.path.join(path, 'composed.safetensors'))}).")
    if os.path.lexists(path) and not overwrite:
        from ..files import ComponentExistsError

        raise ComponentExistsError(f"{shown(path)} exists; pass --overwrite to replace it.")
    folder = os.path.dirname(os.path.abspath(path))
    if not new_folder and not os.path.isdir(folder):
        raise UsageError(f"--out {shown(path)}: the folder {shown(folder)} does not exist; create it "
                         f"(mkdir -p {shown(folder)}) or choose another --out.")
    check_writable(folder, "the directory of --out")


def check_not_an_input(out: str, inputs: Sequence[str]) -> None:
    """Refuse an ``--out`` that is one of the input files (the same file by another path, a
    symlink or a hard link included): with ``--overwrite`` it would replace an input, maybe
    the only copy of a component, by the result."""
    from ..files.filesystem import same_file

    if not os.path.exists(out):
        return  # not an input: every input exists
    for path in inputs:
        if same_file(out, path):
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
