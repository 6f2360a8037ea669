"""``python -m avalanche_tmc.cli``: the command line, as ``python -m avalanche_tmc``."""

from avalanche_tmc._safe_path import drop_working_directory

drop_working_directory()  # before the command line's own imports

from avalanche_tmc.cli.app import entry_point  # noqa: E402

if __name__ == "__main__":
    entry_point()
