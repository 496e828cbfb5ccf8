"""Loaders under faults: dropped connections, a dead path, a crashed server; every sample exactly once or a clear error.

Faults go through toxiproxy (every loader reads with via_proxy=True) and the stack's own process
control (kill -9, then `up`). Every test restores a clean network and healthy services.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable

import pytest
from loader_checks import ingested

from workbench.backends import make_backend
from workbench.data import SyntheticSource
from workbench.errors import WorkbenchError
from workbench.loaders import make_loader
from workbench.net.toxiproxy import Toxiproxy
from workbench.stack import up
from workbench.stack.process import ManagedProcess

pytestmark = [pytest.mark.services, pytest.mark.slow]

LAYOUTS = {"cassandra": {}, "s3-objects": {}, "s3-shards": {"maxcount": 6}, "ignite": {}}
PROXY = {"cassandra": "cassandra", "s3-objects": "s3", "s3-shards": "s3", "ignite": "ignite"}
# Small windows, so requests are still being made while a fault is on.
SLOW = {
    "cassandra": {"concurrency": 2, "batch_size": 4, "prefetch_buffers": 1},
    "s3-objects": {"concurrency": 2},
    "s3-shards": {"parallel_shards": 1, "shuffle_buffer": 0},
    "ignite": {"concurrency": 1, "get_batch": 4},
}
LOADERS = [*LAYOUTS, "cassandra-py"]  # cassandra: the C++ driver (acsylla); cassandra-py: the Python driver
SLOW["cassandra-py"], PROXY["cassandra-py"] = SLOW["cassandra"], PROXY["cassandra"]


@pytest.fixture(scope="module")
def dataset(stack):
    """60 small synthetic JPEGs in every backend the hardened loaders read."""
    name = f"faults_{uuid.uuid4().hex[:8]}"
    source = SyntheticSource(60, mean_kb=8, seed=23)
    with ingested(stack, name, source, LAYOUTS):
        yield name, Counter(str(s.id) for s in source)


@pytest.fixture
def toxi(stack):
    proxy = Toxiproxy(stack)
    proxy.reset()
    try:
        yield proxy
    finally:
        proxy.reset()


def consume(loader, on_item=None, pause_s: float = 0.02) -> Counter:
    keys: Counter = Counter()
    for n, item in enumerate(loader, start=1):
        keys[item.key] += 1
        if on_item is not None:
            on_item(n)
        time.sleep(pause_s)  # a slow consumer: the epoch lasts long enough for the fault to hit
    return keys


@pytest.mark.parametrize("name", LOADERS)
def test_reset_peer_mid_epoch_delivers_exactly_once(stack, dataset, toxi, name):
    dataset_name, expected = dataset
    proxy = PROXY[name]
    fired: list[threading.Thread] = []

    def fault() -> None:
        toxi.add_toxic(proxy, "reset_peer", {"timeout": 0}, "downstream", name="chaos_reset")
        time.sleep(0.5)
        with contextlib.suppress(WorkbenchError):  # already gone if the test ended first (reset)
            toxi.remove_toxic(proxy, "chaos_reset")

    def on_item(n: int) -> None:
        if n == 5:
            timer = threading.Timer(0, fault)
            timer.start()
            fired.append(timer)

    try:
        with make_loader(name, stack, dataset=dataset_name, via_proxy=True, **SLOW[name]) as loader:
            keys = consume(loader, on_item)
    finally:
        for timer in fired:
            timer.join(10)
    assert fired, "the fault was never injected"
    assert keys == expected, f"lost {sum((expected - keys).values())}, duplicated {sum((keys - expected).values())}"


@pytest.mark.parametrize("name", LOADERS)
def test_dead_path_gives_up_within_the_budget(stack, dataset, toxi, name):
    dataset_name, _ = dataset
    with make_loader(name, stack, dataset=dataset_name, via_proxy=True, retry_budget_s=2, **SLOW[name]) as loader:
        items = iter(loader)
        for _ in range(3):
            next(items)
        toxi.set_enabled(PROXY[name], False)
        start = time.monotonic()
        with pytest.raises(WorkbenchError, match="gave up"):
            for _ in items:
                pass
        elapsed = time.monotonic() - start
    assert elapsed < 20, f"{name} took {elapsed:.1f} s to give up"


def crash_at_item(stack, service: str, at: int) -> tuple[Callable[[int], None], list[threading.Thread]]:
    """An `on_item` hook for `consume` that kill -9s `service` when item `at` arrives and brings it back up in a
    thread of its own, and the list that thread lands in (empty while nothing was killed)."""
    process = ManagedProcess(service, stack.state_dir / "run")
    restarted: list[threading.Thread] = []

    def crash() -> None:
        process.kill()
        up(stack, [service])

    def on_item(n: int) -> None:
        if n == at:
            thread = threading.Thread(target=crash)
            thread.start()
            restarted.append(thread)

    return on_item, restarted


def test_minio_crash_mid_epoch_delivers_exactly_once(stack, dataset, toxi):
    dataset_name, expected = dataset
    on_item, restarted = crash_at_item(stack, "minio", 5)
    try:
        with make_loader("s3-objects", stack, dataset=dataset_name, via_proxy=True, concurrency=2) as loader:
            keys = consume(loader, on_item, pause_s=0.05)
        for thread in restarted:
            thread.join(60)
    finally:
        rows = up(stack, ["minio"])
    assert restarted, "MinIO was never killed"
    assert all(r.healthy for r in rows)
    assert keys == expected, f"lost {sum((expected - keys).values())}, duplicated {sum((keys - expected).values())}"


def test_cassandra_crash_mid_epoch_delivers_exactly_once(stack, dataset, toxi):
    """kill -9 of Cassandra mid-epoch: the driver's sessions reconnect after `up`, re-tried reads finish the epoch.

    A restart takes ~15 s here (up to ~60 s on a cold machine): the loader's budget (90 s) outlasts it.
    """
    dataset_name, expected = dataset
    on_item, restarted = crash_at_item(stack, "cassandra", 5)
    start = time.monotonic()
    try:
        with make_loader("cassandra", stack, dataset=dataset_name, via_proxy=True, retries=1000, retry_budget_s=90,
                         **SLOW["cassandra"]) as loader:
            keys = consume(loader, on_item)
        for thread in restarted:
            thread.join(120)
    finally:
        rows = up(stack, ["cassandra"])
    elapsed = time.monotonic() - start
    assert restarted, "Cassandra was never killed"
    assert all(r.healthy for r in rows)
    assert keys == expected, f"lost {sum((expected - keys).values())}, duplicated {sum((keys - expected).values())}"
    assert elapsed < 90, f"the epoch across a Cassandra restart took {elapsed:.0f} s"


def test_ignite_crash_mid_epoch_stops_with_a_clear_error(stack, dataset, toxi):
    """kill -9 of the in-memory Ignite node mid-epoch: the restarted node has no data, so the epoch must
    not finish short or pass as complete: the loader stops with one clear error naming the cache."""
    dataset_name, expected = dataset
    ignite = ManagedProcess("ignite", stack.state_dir / "run")
    killed: list[bool] = []

    def on_item(n: int) -> None:
        if n == 5 and not killed:
            ignite.kill()
            up(stack, ["ignite"])
            killed.append(True)

    keys: Counter = Counter()
    try:
        with pytest.raises(WorkbenchError) as error, make_loader(
                "ignite", stack, dataset=dataset_name, via_proxy=True, retries=1000, retry_budget_s=60,
                **SLOW["ignite"]) as loader:
            for item in loader:
                keys[item.key] += 1
                on_item(sum(keys.values()))
    finally:
        rows = up(stack, ["ignite"])
    assert killed and all(r.healthy for r in rows)
    message = str(error.value)
    assert "\n" not in message and dataset_name.lower() in message.lower(), message
    assert "no longer exists" in message and "re-run the ingest" in message, message
    assert sum(keys.values()) < sum(expected.values()) and max(keys.values()) == 1  # short, never duplicated


@pytest.mark.parametrize("backend,layout", [("s3-shards", {"maxcount": 8}), ("cassandra", {})])
def test_ingest_killed_mid_write_resumes_without_duplicates(stack, backend, layout):
    """kill -9 of a `workbench ingest` process part-way, then the same command again: every sample
    stored exactly once, the content intact, and the second run skips what the first one finished."""
    from workbench.data import parse_source
    from workbench.ingest import verify

    name, spec = f"crash_{uuid.uuid4().hex[:8]}", "synthetic:240"
    options = [arg for key, value in layout.items() for arg in ("-o", f"{key}={value}")]
    command = [sys.executable, "-m", "workbench.cli", "ingest", "--source", spec, "--backend", backend,
               "--dataset", name, *options]
    target = make_backend(backend, stack, name, **layout)
    first = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while _stored(target) < 40:
            assert first.poll() is None, f"ingest ended before the kill: {first.stderr.read().decode()[-300:]}"
            assert time.monotonic() < deadline, "ingest stored fewer than 40 samples in 120 s"
            time.sleep(0.2)
        os.kill(first.pid, signal.SIGKILL)
        first.wait(30)
        partial = _stored(target)
        assert 0 < partial < 240
        second = subprocess.run(command, capture_output=True, text=True, timeout=300)
        assert second.returncode == 0, second.stderr[-500:]
        report = verify(parse_source(spec), target)
        assert report.ok, f"missing {report.missing[:3]}, extra {report.extra[:3]}, mismatched {report.mismatched[:3]}"
        assert report.found == report.expected == 240
        assert f"{partial} already stored" in " ".join(second.stdout.split())
    finally:
        if first.poll() is None:
            first.kill()
        target.drop()


def _stored(target) -> int:
    try:
        return len(target.stored_ids())
    except Exception:  # the layout may not exist yet (the process is still generating images)
        return 0
