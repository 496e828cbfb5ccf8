"""The stack stops exactly what it started: pid files carry the process start time."""

import os
import sys
import time
from pathlib import Path

import pytest

from workbench.errors import WorkbenchError
from workbench.stack.process import ManagedProcess, _start_ticks
from workbench.stack.provision import require_tool


def test_start_then_stop(tmp_path):
    proc = ManagedProcess("sleeper", tmp_path)
    pid = proc.start([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"],
                     dict(os.environ), tmp_path)
    assert proc.pid() == pid
    assert proc.stop(grace_s=5) is True
    assert proc.pid() is None and not proc.pid_file.exists()
    assert proc.stop() is False  # idempotent


def test_reused_pid_is_never_signalled(tmp_path):
    """A pid file whose start time does not match belongs to another process: ignore it, kill nothing."""
    proc = ManagedProcess("stale", tmp_path)
    me = os.getpid()
    proc.pid_file.write_text(f"{me} {_start_ticks(me) + 1}\n")
    assert proc.pid() is None
    assert proc.stop() is False
    assert Path(f"/proc/{me}").exists()


def test_process_that_exits_is_not_running(tmp_path):
    proc = ManagedProcess("quick", tmp_path)
    proc.start([sys.executable, "-c", "print('bye')"], dict(os.environ), tmp_path)
    for _ in range(50):
        if proc.pid() is None:
            break
        time.sleep(0.1)
    assert proc.pid() is None
    assert "bye" in proc.tail()


def test_missing_tool_names_it_and_how_to_get_it(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(WorkbenchError, match="'go' is not on PATH: install Go"):
        require_tool("go")
