"""Names from the file system as the runner writes and prints them (:func:`safe_name`)."""

__all__ = ["safe_name"]


def safe_name(text: str) -> str:
    """A name from the file system as the runner writes and prints it: control characters
    (a newline, a terminal escape sequence), line separators and bytes that are not UTF-8 (a
    name's surrogate escapes) shown as escapes, and HTML comment markers broken up, so that
    every name the runner writes its own report reads back
    (:func:`benchmarks.results.reading.unsafe_cell`) and no name sets a terminal's title."""

    def one(ch: str) -> str:
        if 0xDC80 <= ord(ch) <= 0xDCFF:  # a byte that is not UTF-8, as os.fsdecode escapes it
            return f"\\x{ord(ch) - 0xDC00:02x}"
        if ch.isprintable() and not 0xD800 <= ord(ch) <= 0xDFFF:
            return ch
        return ch.encode("unicode_escape", "backslashreplace").decode("ascii")

    shown = "".join(one(ch) for ch in str(text))
    return shown.replace("<!--", "<! --").replace("-->", "-- >")
