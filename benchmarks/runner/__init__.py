"""The runner behind ``python -m benchmarks.run``: its configuration and presets, the command
line's arguments and refusals, the output folder, a group's training and resume files,
the forked jobs and the gloo-process training, and the command line's factories."""
