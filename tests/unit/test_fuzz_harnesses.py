"""The short pass of `make fuzz`: every atheris harness in fuzz/ runs a few hundred inputs without a crash.

Keeps the harnesses working as the parsers change (a harness that no longer imports fails here, not months
later in a long fuzzing run). Needs atheris (the `fuzz` extra); `make fuzz` runs the same harnesses for minutes.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("atheris")
pytestmark = pytest.mark.slow

FUZZ = Path(__file__).resolve().parents[2] / "fuzz"


def test_every_harness_runs_without_a_crash():
    harnesses = sorted(p.stem.removeprefix("fuzz_") for p in FUZZ.glob("fuzz_*.py"))
    assert {"manifest", "shard_index", "tar_shard", "split_file", "sweep_config", "ignite_objects"} <= set(harnesses)
    done = subprocess.run([sys.executable, str(FUZZ / "run.py"), "--runs", "300"], capture_output=True, text=True,
                          timeout=600)
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    assert [line.split()[0] for line in lines] == harnesses
    assert all(int(line.split()[1]) >= 300 and line.endswith("no crash") for line in lines), lines
