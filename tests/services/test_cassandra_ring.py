"""A Cassandra ring of 3 nodes, replication factor 3: start-up, token-aware reads through each node's proxy,
a node killed (kill -9) mid-epoch, and the chaos soak's node_kill.

The ring runs beside the main stack, never on it: node k on 127.0.0.(11+k) (WORKBENCH_TEST_CASSANDRA_HOST
moves it), JMX ports no other Cassandra uses (JMX binds 127.0.0.1), a toxiproxy of its own on the ring's
first address and a fresh state folder. Every read goes through the proxies (via_proxy), as benchmarks do.
Both loaders: `cassandra` (C++ driver, acsylla) and `cassandra-py` (Python driver). Last, a chaos soak with a
node_kill fault on the ring.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections import Counter

import pytest
from private_stack import running

from workbench.backends import make_backend
from workbench.bench.clients import run_clients
from workbench.chaos import format_report, run_chaos
from workbench.clients.cassandra import cassandra_session
from workbench.config import Settings, generated_credentials
from workbench.data import SyntheticSource
from workbench.ingest import ingest
from workbench.loaders import make_loader
from workbench.stack import status, up
from workbench.stack.cassandra import Cassandra, ring_tokens
from workbench.stack.manager import process_of

pytestmark = [pytest.mark.services, pytest.mark.cluster, pytest.mark.slow,
              pytest.mark.timeout(900)]  # three JVMs start together on two shared cores: minutes, not seconds

HOST = os.environ.get("WORKBENCH_TEST_CASSANDRA_HOST", "127.0.0.11")
NODES = 3
VICTIM = 1  # cassandra-2: any node may die, the seed included; this one is not the first contact point
SERVICES = ["toxiproxy", "cassandra"]
LOADERS = ["cassandra", "cassandra-py"]
SLOW = {"concurrency": 2, "batch_size": 4, "prefetch_buffers": 1}  # requests still in flight when the node dies
N = 120


@pytest.fixture(scope="module")
def ring(tmp_path_factory) -> Settings:
    login = generated_credentials()
    settings = Settings(
        _env_file=None, host=HOST, state_dir=tmp_path_factory.mktemp("cassandra-ring"), cassandra_nodes=NODES,
        cassandra_replication_factor=3, cassandra_consistency="QUORUM", cassandra_jmx_port=29311,
        cassandra_username=login["cassandra_username"], cassandra_password=login["cassandra_password"])
    began = time.monotonic()
    with running(settings, SERVICES):
        print(f"ring of {NODES} up in {time.monotonic() - began:.0f} s")
        yield settings


@pytest.fixture(scope="module")
def dataset(ring):
    """120 small JPEGs ingested at QUORUM into a keyspace with the ring's replication factor (3)."""
    name = f"ring_{uuid.uuid4().hex[:8]}"
    source = SyntheticSource(N, mean_kb=8, seed=41)
    backend = make_backend("cassandra", ring, name)
    ingest(source, backend, progress=False)
    return name, Counter(str(s.id) for s in source), backend.keyspace


def ring_hosts(settings: Settings) -> list[str]:
    return [settings.node_host(k) for k in range(NODES)]


def connections_of_this_process() -> Counter:
    """Established TCP connections of this process, by remote `address:port`."""
    out = subprocess.run(["ss", "-Htnp", "state", "established"], capture_output=True, text=True, timeout=30).stdout
    return Counter(line.split()[3] for line in out.splitlines() if f"pid={os.getpid()}," in line)


def coordinator_reads(settings: Settings, keyspace: str, table: str) -> dict[str, int]:
    """Per node: single-partition reads it coordinated on `table` (its own system_views, asked directly)."""
    counts = {}
    for k in range(NODES):
        with cassandra_session(settings, node=k, schema_metadata_enabled=False, token_metadata_enabled=False) as s:
            row = s.execute("SELECT count FROM system_views.coordinator_read_latency "
                            "WHERE keyspace_name = %s AND table_name = %s", (keyspace, table)).one()
        counts[settings.node_host(k)] = row.count if row else 0
    return counts


# ---------------------------------------------------------------------------------------------- the ring


def test_every_node_sees_a_balanced_ring_and_logins_have_three_replicas(ring):
    rows = status(ring, ["cassandra"])
    assert [(r.service, r.address) for r in rows] == [
        (name, f"{host}:{ring.cassandra_port}")
        for name, host in zip(["cassandra", "cassandra-2", "cassandra-3"], ring_hosts(ring), strict=True)]
    assert all(r.healthy and r.detail == "ring of 3: all NORMAL" for r in rows), rows
    for k in range(NODES):
        with cassandra_session(ring, node=k) as session:
            assert session.execute("SELECT tokens FROM system.local").one().tokens == {str(ring_tokens(NODES)[k])}
    with cassandra_session(ring) as session:
        replication = session.execute(
            "SELECT replication FROM system_schema.keyspaces WHERE keyspace_name = 'system_auth'").one().replication
    assert replication["replication_factor"] == "3"


@pytest.mark.parametrize("loader", LOADERS)
def test_rf3_ingest_is_read_exactly_once_with_every_connection_through_a_proxy(ring, dataset, loader):
    name, expected, keyspace = dataset
    with cassandra_session(ring) as session:
        replication = session.execute(
            "SELECT replication FROM system_schema.keyspaces WHERE keyspace_name = %s", (keyspace,)).one().replication
    assert replication["replication_factor"] == "3"
    with make_loader(loader, ring, dataset=name, via_proxy=True) as source:
        keys = Counter(item.key for item in source)
        connections = connections_of_this_process()
    assert keys == expected, f"lost {sum((expected - keys).values())}, duplicated {sum((keys - expected).values())}"
    to_ring = {address for address in connections if address.rsplit(":", 1)[0] in ring_hosts(ring)}
    assert to_ring == {f"{host}:{ring.proxy_cassandra_port}" for host in ring_hosts(ring)}, connections


def test_two_ranks_read_the_rf3_ring_exactly_once(ring, dataset):
    """Two torchrun ranks (gloo on the CPU), each through the normal loader and every node's proxy, read the
    ring's dataset at QUORUM: together every sample once, each rank a share."""
    name, expected, _ = dataset
    row = run_clients(ring, "cassandra", {"dataset": name, "batch_size": 8, "concurrency": 4, "via_proxy": True},
                      2, expected=set(expected), progress=False)
    assert row["status"] == "ok", row["error"]
    assert (row["samples"], row["missing"], row["duplicated"], row["unexpected"]) == (len(expected), 0, 0, 0)
    assert all(n > 0 for n in row["rank_samples"])
    assert row["topology"]["cassandra_nodes"] == NODES and row["topology"]["cassandra_replication_factor"] == 3


@pytest.mark.parametrize("loader", LOADERS)
def test_each_read_goes_to_the_replica_that_holds_it(ring, loader):
    """Replication factor 1 makes the replica of each key unique: token-aware reads of the keys node 2 holds
    are all coordinated by node 2 (round robin would spread them over the three nodes)."""
    name = f"ring_rf1_{uuid.uuid4().hex[:8]}"
    source = SyntheticSource(60, mean_kb=4, seed=43)
    backend = make_backend("cassandra", ring, name, replication_factor=1)
    ingest(source, backend, progress=False)
    try:
        with cassandra_session(ring) as session:
            replicas = session.cluster.metadata.get_replicas
            held = [str(s.id) for s in source
                    if [h.address for h in replicas(backend.keyspace, s.id.bytes)] == [ring_hosts(ring)[1]]]
        assert len(held) > 5
        with make_loader(loader, ring, dataset=name, via_proxy=True, source_uuids=held, shuffle=False) as reader:
            # The first epoch connects and learns the ring: a driver may send its first reads before it knows
            # a keyspace made a moment ago. Counted: the second epoch's reads.
            assert sorted(item.key for item in reader) == sorted(held)
            before = coordinator_reads(ring, backend.keyspace, "data_train")
            reader.set_epoch(1)
            assert sorted(item.key for item in reader) == sorted(held)
            after = coordinator_reads(ring, backend.keyspace, "data_train")
        assert {h: after[h] - before[h] for h in after} == {h: len(held) if k == 1 else 0
                                                            for k, h in enumerate(ring_hosts(ring))}
    finally:
        backend.drop()


# ------------------------------------------------------------------------------------------------ faults


# Both loaders and both consistency levels, each once: the two drivers' retry paths do not depend on the level
# (the four combinations took 105 s of CI's 60 minutes).
@pytest.mark.parametrize(("loader", "consistency"), [("cassandra", "QUORUM"), ("cassandra-py", "ONE")])
def test_a_node_killed_mid_epoch_loses_and_duplicates_nothing(ring, dataset, loader, consistency):
    name, expected, _ = dataset
    settings = ring.model_copy(update={"cassandra_consistency": consistency})
    victim = process_of(Cassandra(ring, VICTIM))
    keys: Counter = Counter()
    try:
        with make_loader(loader, settings, dataset=name, via_proxy=True, retries=1000, retry_budget_s=90,
                         **SLOW) as source:
            for n, item in enumerate(source, start=1):
                keys[item.key] += 1
                if n == 10:
                    victim.kill()
                time.sleep(0.02)  # a slow consumer: most of the epoch runs without the node
        assert victim.pid() is None, "the node was restarted during the epoch"
        rows = {r.service: r for r in status(ring, ["cassandra"])}
        down_node = rows.pop("cassandra-2")
        assert not down_node.healthy and f"{ring_hosts(ring)[VICTIM]}:{ring.cassandra_port}" in down_node.detail
        assert all(r.healthy for r in rows.values()), rows
    finally:
        restarted = up(ring, ["cassandra"])
    assert all(r.healthy for r in restarted), [f"{r.service}: {r.detail}" for r in restarted if not r.healthy]
    assert keys == expected, f"lost {sum((expected - keys).values())}, duplicated {sum((keys - expected).values())}"


def test_a_chaos_soak_with_a_node_kill_reads_every_epoch_exactly_once(ring, dataset):
    """`workbench chaos` with node_kill on the ring: one node (not node 0) killed mid-epoch, restarted after the
    node window; the epoch reads every sample once and the record names the node, its window and recovery."""
    name, expected, _ = dataset
    candidates = {node.node_name: process_of(node).pid() for node in (Cassandra(ring, k) for k in range(1, NODES))}
    lines: list[str] = []
    report = run_chaos(ring, ["cassandra"], name, duration_s=1.0, seed=3, faults=["node_kill"], pace_s=0.05,
                       node_window_s=5.0, log=lines.append)
    print("\n" + "\n".join(lines + format_report(report)))
    [fault] = report.faults
    assert fault.kind == "node_kill" and fault.target in candidates, fault
    assert fault.how.startswith(f"kill -9 of pid {candidates[fault.target]},"), fault.how
    assert fault.after_samples < sum(expected.values()), "the epoch ended before the kill"
    assert fault.error == "" and (fault.lost, fault.duplicated) == (0, 0) and fault.survived, fault
    assert fault.window_s >= 5.0 and fault.recovery_s > 0
    assert report.services_healthy and report.restarted == [fault.target]
    restarted = process_of(Cassandra(ring, int(fault.target.rsplit("-", 1)[1]) - 1)).pid()
    assert restarted is not None and restarted != candidates[fault.target]
    # every node answers its own probe again: within a minute (seen in CI: a probe of the restarted ring, on 2 busy
    # cores, failed once right after the soak had seen every node healthy)
    deadline = time.monotonic() + 60
    rows = status(ring, ["cassandra"])
    while not all(r.healthy for r in rows) and time.monotonic() < deadline:
        time.sleep(2)
        rows = status(ring, ["cassandra"])
    assert all(r.healthy for r in rows), [(r.service, r.address, r.detail) for r in rows if not r.healthy]
