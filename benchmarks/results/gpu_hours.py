"""The paper presets' GPU-hours file (kind ``gpu-hours``, written by ``python -m
benchmarks.tools.gpu_hours --out FILE``): its checked reader and the table a page shows."""

from pathlib import Path
from typing import Dict, List, Sequence

from benchmarks.results.files import GPU_HOURS_COLUMNS, ReportFileError, read_written_csv
from benchmarks.results.reading import TEXT, Cell

__all__ = ["GPU_HOURS_CELLS", "read_gpu_hours", "gpu_hours_table"]

GPU_HOURS_CELLS: Dict[str, Cell] = {
    "preset": TEXT, "train_images": Cell(int, 1), "test_images": Cell(int, 1), "work": Cell(float, 0.0, above=True),
    "seeds": Cell(int, 1), "hours_per_seed": Cell(float, 0.0, above=True), "hours": Cell(float, 0.0, above=True),
    "images_per_second": Cell(float, 0.0, above=True), "tangent_ratio": Cell(float, 0.0, above=True)}
"""What each cell of a GPU-hours file holds (counts and hours: finite, above 0)."""


def read_gpu_hours(path: Path) -> List[Dict[str, str]]:
    """The rows of a GPU-hours file, every cell checked (one row per preset, one throughput)."""
    rows = read_written_csv(path, "gpu-hours", GPU_HOURS_COLUMNS, "python -m benchmarks.tools.gpu_hours",
                            GPU_HOURS_CELLS, ("preset",))
    if len({(r["images_per_second"], r["tangent_ratio"]) for r in rows}) > 1:
        raise ReportFileError(f"{path}: its rows were estimated at different throughputs: write it again with "
                              "python -m benchmarks.tools.gpu_hours --out FILE")
    return rows


def gpu_hours_table(rows: Sequence[Dict[str, str]]) -> str:
    """Markdown: each preset's GPU-hours per seed and over its seeds, their assumptions and total."""
    seeds = sorted({int(r["seeds"]) for r in rows})
    over = f"{seeds[0]} seeds" if len(seeds) == 1 else "its seeds"
    first = rows[0]
    lines = [f"GPU-hours at {first['images_per_second']} plain training images/s and a tangent step "
             f"{first['tangent_ratio']}x a plain one (every row of the preset, training and evaluation; a lower bound: "
             "data loading is not counted).", "",
             f"| preset | train / test images | work per seed (plain-step images) | GPU-hours per seed | "
             f"GPU-hours ({over}) |", "|---|---:|---:|---:|---:|"]
    lines += [f"| `{r['preset']}` | {int(r['train_images']):,} / {int(r['test_images']):,} | "
              f"{float(r['work']):.1f} M | {float(r['hours_per_seed']):.1f} | {float(r['hours']):.1f} |" for r in rows]
    total, per_seed = sum(float(r["hours"]) for r in rows), sum(float(r["hours_per_seed"]) for r in rows)
    at = f"at their {over}" if len(seeds) == 1 else "at their seeds"
    lines += ["", f"All {len(rows)} presets {at}: {total:.0f} GPU-hours ({per_seed:.0f} per seed)."]
    return "\n".join(lines)
