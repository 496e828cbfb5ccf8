"""workbench.memory: with the thresholds fixed, a 40 MB buffer freed and allocated again reuses its pages."""

import subprocess
import sys

import pytest

from workbench import memory

PROBE = """
import resource, sys
from workbench import memory
applied = memory.apply(sys.argv[1] == "1")
buf = bytearray(40 << 20); buf[::4096] = b"x" * len(buf[::4096]); del buf
start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    buf = bytearray(40 << 20); buf[::4096] = b"x" * len(buf[::4096]); del buf
print(applied, (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - start) // 5, memory.describe(sys.argv[1] == "1"))
"""


def probe(enabled: bool) -> tuple[bool, int, str]:
    out = subprocess.run([sys.executable, "-c", PROBE, "1" if enabled else "0"], capture_output=True, text=True,
                         check=True, timeout=60).stdout.split(maxsplit=2)
    return out[0] == "True", int(out[1]), out[2].strip()


@pytest.mark.skipif(memory._glibc() is None, reason="glibc's mallopt only")
def test_fixed_thresholds_reuse_a_big_buffer_instead_of_faulting_it_in_again():
    applied, faults, described = probe(True)
    assert applied and faults < 100 and "mmap_threshold=64MiB" in described
    # 40 MB is above glibc's largest dynamic threshold: without the fixed ones, a fresh mmap each time
    applied, faults, described = probe(False)
    assert not applied and faults > 5_000 and described == "glibc defaults (WORKBENCH_MALLOC_TUNING=0)"


def test_the_first_call_decides_for_the_process():
    first = memory.apply(True)
    assert memory.apply(False) == first
