"""Names from the file system as the runner writes and prints them (:func:`safe_name`)."""

from avalanche_tmc.cli.outputs import shown

__all__ = ["safe_name"]


def safe_name(text: str) -> str:
    """A name from the file system as the runner writes and prints it: the library's escaping
    of file names (:func:`avalanche_tmc.cli.outputs.shown`: control characters, line
    separators and bytes that are not UTF-8 as escapes), and HTML comment markers broken up,
    so that every name the runner writes its own report reads back
    (:func:`benchmarks.results.reading.unsafe_cell`) and no name sets a terminal's title."""
    return shown(text).replace("<!--", "<! --").replace("-->", "-- >")
