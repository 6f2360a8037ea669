"""Tools that measure the runner (speed, the image pipeline, GPU-hours, checkpoint size,
the cross-machine spread, the GPU check): they import the runner, which never imports them.
Each is a command: ``python -m benchmarks.tools.<name>``."""
