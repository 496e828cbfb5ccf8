"""Start and stop the stack's own server processes, tracked by pid files.

A pid file holds the pid and the process start time (from /proc), so `down` stops exactly the process
the stack started, never one that merely reused its pid, and never anything found by name.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from workbench.net.netns import exec_prefix


def _start_ticks(pid: int) -> int | None:
    """The process start time in clock ticks since boot, or None if no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name (field 2) may contain spaces, so split after its closing parenthesis.
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] == "Z":  # exited, not yet reaped: dead for our purposes
        _reap(pid)
        return None
    return int(fields[19])  # field 22: starttime


@dataclass(frozen=True)
class ManagedProcess:
    """One server process of the stack: its pid file and log file."""

    name: str
    run_dir: Path

    @property
    def pid_file(self) -> Path:
        return self.run_dir / f"{self.name}.pid"

    @property
    def log_file(self) -> Path:
        return self.run_dir / f"{self.name}.log"

    def pid(self) -> int | None:
        """The pid if the process this stack started is still alive, else None (stale files are removed)."""
        try:
            pid_text, ticks_text = self.pid_file.read_text().split()
            pid, ticks = int(pid_text), int(ticks_text)
        except (FileNotFoundError, ValueError):
            return None
        if _start_ticks(pid) != ticks:
            self.pid_file.unlink(missing_ok=True)
            return None
        return pid

    def start(self, command: list[str], env: dict[str, str], cwd: Path, namespace: str | None = None) -> int:
        """Launch detached in its own session (so it survives the CLI) with output appended to the log; inside
        the network namespace `namespace` when one is given (`ip netns exec` execs the command: same pid)."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        command = exec_prefix(namespace) + command
        with self.log_file.open("ab") as log:
            log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} starting: {' '.join(command)}\n".encode())
            log.flush()
            proc = subprocess.Popen(
                command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        ticks = _start_ticks(proc.pid)
        self.pid_file.write_text(f"{proc.pid} {ticks}\n")
        return proc.pid

    def stop(self, grace_s: float = 20.0) -> bool:
        """SIGTERM the process group, SIGKILL after `grace_s`. Returns True if something was stopped."""
        pid = self.pid()
        if pid is None:
            return False
        _signal_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and self.pid() is not None:
            _reap(pid)
            time.sleep(0.2)
        if self.pid() is not None:
            _signal_group(pid, signal.SIGKILL)
            time.sleep(0.5)
            _reap(pid)
        self.pid_file.unlink(missing_ok=True)
        return True

    def kill(self) -> None:
        """SIGKILL at once, as a crash would (fault tests)."""
        pid = self.pid()
        if pid is not None:
            _signal_group(pid, signal.SIGKILL)
            time.sleep(0.3)
            _reap(pid)

    def tail(self, lines: int = 50) -> str:
        if not self.log_file.exists():
            return ""
        with self.log_file.open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 200_000))
            return b"\n".join(f.read().splitlines()[-lines:]).decode(errors="replace")


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)


def _reap(pid: int) -> None:
    """Collect the exit status if the process is our child (a zombie would look alive in /proc)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
