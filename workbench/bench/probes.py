"""Resource use of the loading processes during one measurement: CPU, peak memory, GPU utilisation."""

from __future__ import annotations

import contextlib
import resource
import threading
import time
from pathlib import Path

from workbench.gpu import GpuReader


def _rss_peak_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class ResourceProbe:
    """CPU seconds of this process and its (joined) children, this process's peak RSS, mean GPU use."""

    def __enter__(self) -> ResourceProbe:
        with contextlib.suppress(OSError):  # reset the peak-RSS counter: the peak belongs to this measurement
            Path("/proc/self/clear_refs").write_text("5")
        self._self = resource.getrusage(resource.RUSAGE_SELF)
        self._children = resource.getrusage(resource.RUSAGE_CHILDREN)
        self._start = time.perf_counter()
        self._gpu: list[float] = []
        self._stop = threading.Event()
        self._sampler = None
        self._reader = GpuReader()  # NVML; without a GPU it is empty and no sampler thread starts
        if self._reader.available:
            self._sampler = threading.Thread(target=self._sample_gpu, daemon=True)
            self._sampler.start()
        return self

    def _sample_gpu(self) -> None:
        while not self._stop.wait(0.5):
            busy = self._reader.utilisation()
            if busy is None:
                return
            self._gpu.append(busy)

    def __exit__(self, *exc) -> None:
        self.wall_s = time.perf_counter() - self._start
        me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        self.cpu_s = (
            me.ru_utime
            + me.ru_stime
            - self._self.ru_utime
            - self._self.ru_stime
            + kids.ru_utime
            + kids.ru_stime
            - self._children.ru_utime
            - self._children.ru_stime
        )
        self.peak_rss_mb = _rss_peak_mb()
        self.children_peak_rss_mb = kids.ru_maxrss / 1024  # lifetime maximum over joined workers
        self._stop.set()
        if self._sampler is not None:
            self._sampler.join()
        self._reader.close()
        self.gpu_util = sum(self._gpu) / len(self._gpu) if self._gpu else float("nan")

    @property
    def cpu_percent(self) -> float:
        """Percent of one core (200 = two cores busy)."""
        return 100 * self.cpu_s / self.wall_s if self.wall_s > 0 else float("nan")
