"""GPU facts through NVML (nvidia-ml-py): the driver's own counters, read in-process.

Polling ``nvidia-smi`` started a process per sample (tens of ms of CPU on the machine being measured, and a
5 s timeout when the driver is busy); NVML answers in microseconds. Without a GPU, a driver or the
nvidia-ml-py package, every reader is simply empty: `available` is False, utilisation is None, nothing raises.
"""

from __future__ import annotations

import contextlib
from types import ModuleType


def _nvml() -> ModuleType | None:
    """The initialised pynvml module, or None where NVML cannot be used (no package, no driver, no GPU)."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    return pynvml


class GpuReader:
    """Handles to every GPU NVML sees, opened once; `close()` (or ``with``) releases NVML again."""

    def __init__(self) -> None:
        self._nvml = _nvml()
        self._handles: list = []
        if self._nvml is not None:
            try:
                count = self._nvml.nvmlDeviceGetCount()
                self._handles = [self._nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            except self._nvml.NVMLError:
                self.close()

    @property
    def available(self) -> bool:
        return bool(self._handles)

    def utilisation(self) -> float | None:
        """Mean busy percentage of the GPUs over the driver's last sample period, or None without a GPU."""
        if not self._handles:
            return None
        try:
            rates = [self._nvml.nvmlDeviceGetUtilizationRates(h).gpu for h in self._handles]
        except self._nvml.NVMLError:  # a GPU that fell off the bus or a driver reset: no reading, not a crash
            return None
        return sum(rates) / len(rates)

    def describe(self) -> list[str]:
        """``"<name>, <total memory> MiB"`` per GPU: what the environment record has always held."""
        if not self._handles:
            return []
        try:
            return [f"{_text(self._nvml.nvmlDeviceGetName(h))}, {self._nvml.nvmlDeviceGetMemoryInfo(h).total >> 20} MiB"
                    for h in self._handles]
        except self._nvml.NVMLError:
            return []

    def close(self) -> None:
        if self._nvml is not None:
            with contextlib.suppress(self._nvml.NVMLError):
                self._nvml.nvmlShutdown()
        self._nvml, self._handles = None, []

    def __enter__(self) -> GpuReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value  # bytes in older nvidia-ml-py releases


def gpus() -> list[str]:
    """The GPUs of this machine as ``"<name>, <memory> MiB"`` lines; empty without one."""
    with GpuReader() as reader:
        return reader.describe()
