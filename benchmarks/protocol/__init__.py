"""The evaluation protocol: the scenarios (class-, task-, data-incremental benchmarks) and the
task-IL evaluation under the task mask; :mod:`.choices` is standard library only."""
