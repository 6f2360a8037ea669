"""``nvidia-smi`` sampled while a measurement runs: the GPU check's steps and the steady state's
last epoch use it (:class:`GpuSampler`)."""

from __future__ import annotations

import shutil
import subprocess
import threading
from typing import List, Optional

__all__ = ["GpuSampler"]


class GpuSampler:
    """Polls ``nvidia-smi`` for utilisation (%) and memory used (MiB) every ``period``
    seconds while a step runs; records nothing where ``nvidia-smi`` is absent."""

    QUERY = ["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits"]

    def __init__(self, period: float = 0.5) -> None:
        self.period = period
        self.available = shutil.which("nvidia-smi") is not None
        self.utilisation: List[float] = []
        self.memory_mib: List[float] = []
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def _poll(self) -> None:
        while not self._stop.wait(self.period):
            try:
                line = subprocess.run(self.QUERY, capture_output=True, text=True, timeout=5).stdout.splitlines()[0]
                used, memory = (float(v) for v in line.split(",")[:2])
            except (OSError, ValueError, IndexError, subprocess.SubprocessError):
                continue
            self.utilisation.append(used)
            self.memory_mib.append(memory)

    def __enter__(self) -> "GpuSampler":
        if self.available:
            self._thread = threading.Thread(target=self._poll, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
