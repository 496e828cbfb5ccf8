"""Cassandra ingest on the C++ driver (acsylla): the window in flight, progress in the writing thread,
via_proxy, and a stalled network ending in one line within the timeouts, then a clean resume."""

from __future__ import annotations

import threading
import time

import pytest
from backend_checks import Hooked
from backend_checks import cassandra_backend as backend

from workbench.backends.registry import make_backend
from workbench.data import SyntheticSource
from workbench.errors import WorkbenchError
from workbench.ingest import ingest, verify
from workbench.net.toxiproxy import Toxiproxy

pytestmark = pytest.mark.services

N = 30


def test_at_most_workers_in_flight_and_progress_in_the_writing_thread(stack, unique, keyspaces):
    src = SyntheticSource(N, mean_kb=20, name=unique)
    b = backend(stack, keyspaces, unique, workers=3)
    b.prepare(["train"])
    reported: list[tuple[int, int]] = []
    threads: set[str] = set()
    ahead: list[int] = []  # samples taken from the source but not yet reported, each time one is taken

    def progress(n: int, nbytes: int) -> None:
        threads.add(threading.current_thread().name)
        reported.append((n, nbytes))

    def samples():
        for taken, sample in enumerate(src):
            ahead.append(taken - sum(n for n, _ in reported))
            yield sample

    b.write(samples(), progress)
    assert threads == {threading.current_thread().name}
    assert sum(n for n, _ in reported) == N and sum(s for _, s in reported) == sum(len(s.data) for s in src)
    assert max(ahead) <= 3 and max(ahead) >= 1  # the window is used, and never wider than `workers`
    assert verify(src, b).ok


def test_via_proxy_writes_through_the_proxy_port(stack, unique, keyspaces):
    src = SyntheticSource(10, mean_kb=8, name=unique)
    summary = ingest(src, backend(stack, keyspaces, unique, via_proxy=True), progress=False)
    assert summary.samples == 10
    assert verify(src, make_backend("cassandra", stack, unique)).ok

    closed = stack.model_copy(update={"proxy_cassandra_port": 1})
    b = make_backend("cassandra", closed, f"{unique}_x", via_proxy=True)
    with pytest.raises(WorkbenchError, match=r"cannot reach Cassandra at 127\.0\.0\.1:1\b") as error:
        b.write(iter(src), lambda n, size: None)
    assert "\n" not in str(error.value)


def test_a_stalled_network_fails_within_the_timeout_and_the_ingest_resumes(stack, unique, keyspaces):
    """Inserts stuck behind 4 s of added latency (timeout 1 s): one line naming a sample, no hang; then
    a resumed ingest stores exactly the rest."""
    quick = stack.model_copy(update={"timeout_s": 1.0})
    src = SyntheticSource(N, mean_kb=8, name=unique)
    b = backend(quick, keyspaces, unique, via_proxy=True, workers=2)
    proxy = Toxiproxy(stack)
    toxic = f"stall_{unique}"  # on the shared proxy for a few seconds, then removed by name
    added: list[str] = []

    def stall() -> None:
        added.append(proxy.add_toxic("cassandra", "latency", {"latency": 4000}, "downstream", name=toxic))

    start = time.monotonic()
    try:
        with pytest.raises(WorkbenchError, match=r"writing sample \S+ \((data|metadata) row\) to Cassandra failed") \
                as error:
            ingest(Hooked(src, 8, stall), b, progress=False)
    finally:
        if added:
            proxy.remove_toxic("cassandra", toxic)
    assert time.monotonic() - start < 20 and "\n" not in str(error.value)
    assert added, "the fault was never injected"

    stored = len(b.stored_ids())
    assert 0 < stored < N
    resumed = ingest(src, b, progress=False)
    assert resumed.already_stored >= stored and resumed.already_stored + resumed.samples == N
    report = verify(src, b)
    assert report.ok and report.found == N


def test_ingest_from_a_thread_that_runs_an_event_loop(stack, unique, keyspaces):
    """A notebook cell runs inside an event loop: the writer's own loop then runs beside it, and still
    calls progress one call at a time."""
    import asyncio

    src = SyntheticSource(10, mean_kb=8, name=unique)
    b = backend(stack, keyspaces, unique)

    async def cell() -> int:
        return ingest(src, b, progress=False).samples

    assert asyncio.run(cell()) == 10
    assert verify(src, b).ok
