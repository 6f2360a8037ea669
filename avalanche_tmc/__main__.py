"""``python -m avalanche_tmc``: the command line (:mod:`avalanche_tmc.cli`), also for
launchers that start Python modules, e.g. ``torchrun --nproc_per_node 2 -m avalanche_tmc
train-component ...``."""

from avalanche_tmc._safe_path import drop_working_directory

drop_working_directory()  # before the command line's own imports

from avalanche_tmc.cli.app import entry_point  # noqa: E402

if __name__ == "__main__":
    entry_point()
