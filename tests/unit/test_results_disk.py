"""Results on a full or read-only disk: one clear error naming the path, and no half-written file.

A real 64 KiB tmpfs stands in for the full disk (mounting needs root, as on the CI machines; the
tests are skipped with the reason elsewhere).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from workbench.errors import WorkbenchError
from workbench.results import check_writable, write_results

ROWS = [{"loader": "cassandra", "payload": "x" * 2000, "i": i} for i in range(100)]  # ~200 KB as JSON


@pytest.fixture
def tiny_disk(tmp_path: Path):
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True,
                          text=True, timeout=30)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a 64 KiB tmpfs here (needs root): {done.stderr.strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], capture_output=True, timeout=30)


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_full_disk_is_one_clear_error_and_leaves_no_partial_file(tiny_disk):
    folder = tiny_disk / "bench"
    with pytest.raises(WorkbenchError, match=r"cannot write results to .*bench\.json: No space left on device; "
                                             r"free space or choose another --results-dir"):
        write_results(folder, "bench", ROWS, {"python": "3.11"})
    assert leftovers(folder) == []  # neither bench.json nor its temporary file


def test_read_only_disk_is_reported_before_any_measurement(tiny_disk):
    subprocess.run(["mount", "-o", "remount,ro", str(tiny_disk)], check=True, timeout=30)
    with pytest.raises(WorkbenchError, match=r"cannot write results to .*: Read-only file system"):
        check_writable(tiny_disk / "sweep")
    with pytest.raises(WorkbenchError, match="Read-only file system"):
        write_results(tiny_disk / "sweep", "bench", ROWS[:1], {})
