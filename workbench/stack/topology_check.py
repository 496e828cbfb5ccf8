"""Checks a topology must pass before its servers start: does it fit in memory, are its addresses free, is the
node it joins there.

A ring that does not fit would start, swap or be killed by the kernel half-way, and leave a stack where
some nodes run and some do not: refusing it up front, with the numbers, is cheaper for everyone.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from pathlib import Path

from workbench.errors import WorkbenchError

MEMINFO = Path("/proc/meminfo")


def mem_available_mib(meminfo: Path = MEMINFO) -> int | None:
    """MemAvailable of /proc/meminfo in MiB (what the kernel can hand out without swapping); None if unknown."""
    try:
        for line in meminfo.read_text().splitlines():
            name, _, value = line.partition(":")
            if name == "MemAvailable":
                return int(value.split()[0]) // 1024  # kB
    except (OSError, ValueError, IndexError):
        return None
    return None


def check_memory(needs: list[tuple[str, int, int]], hint: str, available_mib: int | None = None) -> None:
    """Refuse a topology whose nodes need more memory than is available.

    `needs`: (what, nodes, MiB per node) for each kind of node about to start. Unknown free memory (no
    /proc/meminfo) is not a reason to refuse.
    """
    available = mem_available_mib() if available_mib is None else available_mib
    total = sum(nodes * mib for _, nodes, mib in needs)
    if available is None or total <= available:
        return
    parts = ", ".join(f"{nodes} x {mib:,} MiB for {what}" for what, nodes, mib in needs)
    raise WorkbenchError(
        f"this topology needs {total:,} MiB of memory ({parts}) but only {available:,} MiB are available "
        f"(MemAvailable in {MEMINFO}): {hint}")



def answers(host: str, port: int, timeout_s: float = 1.0) -> OSError | None:
    """None when `host:port` accepts a TCP connection, else the error."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except OSError as exc:
        return exc


def check_free(endpoints: list[tuple[str, int]], who: str) -> None:
    """Refuse to start `who` on an address another process already serves.

    Why: a node that cannot bind dies, and one that can (another port of the same node) may join whatever
    answers at its seed's address, e.g. the main stack's Cassandra, whose ring it then changes.
    """
    taken = [f"{host}:{port}" for host, port in endpoints if answers(host, port) is None]
    if taken:
        raise WorkbenchError(
            f"{', '.join(taken)} already in use by a process this stack did not start, so {who} cannot start "
            "there: stop that server, or give this stack other addresses (WORKBENCH_HOST) or ports")


def wait_for_port(host: str, port: int, deadline_s: float, alive: Callable[[], bool], what: str, hint: str) -> None:
    """Wait until `host:port`, served by a process of ours that `alive()` watches, accepts TCP connections
    (a node another node must join through); one line naming `what` and its address when it does not."""
    deadline = time.monotonic() + deadline_s
    while True:
        if not alive():
            raise WorkbenchError(f"{what} at {host}:{port} is not running: {hint}")
        error = answers(host, port)
        if error is None:
            return
        if time.monotonic() >= deadline:
            raise WorkbenchError(f"{what} at {host}:{port} does not answer after {deadline_s:.0f} s ({error}): {hint}")
        time.sleep(1.0)
