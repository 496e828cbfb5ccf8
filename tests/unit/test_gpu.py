"""GPU utilisation and names through NVML: empty and quiet without a GPU, the driver's numbers with one."""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
import threading
import time

import pytest

from workbench.bench.probes import ResourceProbe
from workbench.environment import _gpus
from workbench.gpu import GpuReader, gpus


def _nvml_sees_a_gpu() -> bool:
    with GpuReader() as reader:
        return reader.available


NO_GPU = not _nvml_sees_a_gpu()


@pytest.mark.skipif(not NO_GPU, reason="this machine has a GPU; the no-GPU path is covered by the no-package test")
def test_without_a_gpu_everything_is_empty_and_nothing_raises():
    with GpuReader() as reader:
        assert (reader.available, reader.utilisation(), reader.describe()) == (False, None, [])
    assert gpus() == [] and _gpus() == []


def test_without_nvidia_ml_py_everything_is_empty(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` raises ImportError
    with GpuReader() as reader:
        assert (reader.available, reader.utilisation(), reader.describe()) == (False, None, [])
    assert gpus() == []


def test_probe_without_a_gpu_starts_no_sampler_and_reports_nan(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    before = threading.active_count()
    with ResourceProbe() as probe:
        assert probe._sampler is None and threading.active_count() == before
        sum(range(10_000))
    assert math.isnan(probe.gpu_util) and probe.wall_s > 0


@pytest.mark.gpu
def test_with_a_gpu_nvml_reads_what_nvidia_smi_shows():
    with GpuReader() as reader:
        assert reader.available
        busy = reader.utilisation()
        assert busy is not None and 0 <= busy <= 100
        names = reader.describe()
    if shutil.which("nvidia-smi"):
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.split("\n")
        assert names == [line.strip() for line in smi if line.strip()]
    with ResourceProbe() as probe:
        time.sleep(1.2)  # at least two 0.5 s samples
    assert 0 <= probe.gpu_util <= 100
