"""A private stack for one test module: its services up and healthy for a block, every node stopped after.

Why: the cluster and security tests each run their own servers (own loopback address, ports and state folder)
beside the main stack; starting, checking and stopping them is written here once.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from workbench.config import Settings
from workbench.stack import down, up
from workbench.stack.manager import process_of, select


@contextmanager
def running(settings: Settings, services: list[str]) -> Iterator[Settings]:
    """The services up and healthy for the block, every node stopped afterwards (by pid file)."""
    try:
        start(settings, services)
        yield settings
    finally:
        down(settings, services)
        left = [s.node_name for s in select(settings, services) if process_of(s).pid() is not None]
        assert not left, f"still running: {left}"


def start(settings: Settings, services: list[str], attempts: int = 1) -> list:
    """Bring `services` up; every one of them healthy, or the test fails naming the broken ones.

    `attempts` > 1: up() again, which waits on a node still starting (a loaded machine starts slowly).
    """
    for _ in range(attempts):
        rows = up(settings, services)
        if all(r.healthy for r in rows):
            break
    broken = [f"{r.service}: {r.detail}" for r in rows if not r.healthy]
    assert not broken, broken
    return rows
