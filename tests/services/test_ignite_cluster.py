"""A two-node Ignite cluster with one backup: joined and active, partition-aware clients through each node's
proxy, a node killed with SIGKILL in the middle of an epoch, and the catalog reconciled with its caches."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections import Counter

import pytest
from ignite_cluster import HOST, cluster_settings, kill, running, start

from workbench.backends.registry import make_backend
from workbench.clients.ignite import ignite_client, server_node_count
from workbench.data import parse_source
from workbench.ingest import ingest
from workbench.loaders import make_loader
from workbench.net.toxiproxy import Toxiproxy
from workbench.reconcile import check

pytestmark = [pytest.mark.services, pytest.mark.cluster, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running(cluster_settings(tmp_path_factory.mktemp("ignite-cluster")), ["toxiproxy", "ignite"]) as settings:
        yield settings


@pytest.fixture(scope="module")
def dataset(cluster):
    """300 small samples in a cache with one backup (the cluster's default): name and the ids ingested."""
    source = parse_source("synthetic:300")
    backend = make_backend("ignite", cluster, "tcluster", batch_size=32, workers=2)
    ingest(source, backend, progress=False, check_images=False, source_spec="synthetic:300")
    return backend, sorted(str(s.id) for s in source)


def test_every_node_joined_one_active_cluster_and_caches_get_the_backups_asked_for(cluster, dataset):
    from pyignite.datatypes import ClusterState

    with ignite_client(cluster) as client:
        assert server_node_count(client) == 2
        assert client.get_cluster().get_state() == ClusterState.ACTIVE
        with client.sql("SELECT BACKUPS FROM SYS.CACHES WHERE CACHE_NAME = ?", query_args=["TCLUSTER"]) as cursor:
            assert list(cursor) == [[1]]
    xml = (cluster.state_dir / "ignite-2" / "ignite.xml").read_text()
    assert f"<value>{HOST}:47500</value><value>127.0.0.22:47500</value>" in xml
    assert '<property name="localAddress" value="127.0.0.22"/>' in xml and "127.0.0.1:" not in xml


def test_the_client_reaches_every_node_each_through_its_own_proxy(cluster, dataset):
    proxies = Toxiproxy(cluster).proxies()
    assert proxies["ignite-2"]["listen"] == "127.0.0.22:20800" and proxies["ignite-2"]["upstream"] == "127.0.0.22:10800"
    with ignite_client(cluster, via_proxy=True) as client:
        assert {(n.host, n.port) for n in client._nodes if n.alive} == {(HOST, 20800), ("127.0.0.22", 20800)}
        assert len({n.uuid for n in client._nodes}) == 2  # two servers, not one answering twice
    toxiproxy = Toxiproxy(cluster)
    toxiproxy.set_enabled("ignite-2", False)  # node 2's path is down: the client reads through node 1's
    try:
        loader = make_loader("ignite", cluster, dataset="tcluster", via_proxy=True, partition_aware=True)
        try:
            assert sorted(item.key for item in loader.iter_epoch(0)) == dataset[1]
        finally:
            loader.close()
    finally:
        toxiproxy.set_enabled("ignite-2", True)


@pytest.mark.parametrize("client", ["aio", "sync"])
def test_a_node_killed_mid_epoch_loses_and_duplicates_no_sample(cluster, dataset, client):
    _, expected = dataset
    loader = make_loader("ignite", cluster, dataset="tcluster", client=client, partition_aware=True, concurrency=2,
                         get_batch=8)
    read: list[str] = []
    try:
        for item in loader.iter_epoch(0):
            read.append(item.key)
            if len(read) == len(expected) // 5:
                kill(cluster, "ignite-2")  # requests to it are in flight: partition-aware reads use both nodes
    finally:
        loader.close()
        start(cluster, ["ignite-2"])  # back for the next test (it joins, the backups rebalance to it)
    assert [key for key, n in Counter(read).items() if n > 1] == []
    assert sorted(read) == expected


def test_reconcile_lists_a_destroyed_cache_with_the_command_that_restores_it(cluster, dataset):
    gone = make_backend("ignite", cluster, "tgone")
    ingest(parse_source("synthetic:20"), gone, progress=False, check_images=False, source_spec="synthetic:20")
    with ignite_client(cluster) as client:
        client.get_cache(gone.cache_name).destroy()
    states = {s.dataset: s for s in check(cluster, ["ignite"])}
    assert states["tcluster"].state == "ok" and states["tcluster"].stored == 300
    stale = states["tgone"]
    assert (stale.state, stale.recorded, stale.stored) == ("stale", 20, 0)
    assert stale.command == ("workbench ingest --source synthetic:20 --backend ignite --dataset tgone -o backups=1")
    env = {**os.environ, "WORKBENCH_HOST": HOST, "WORKBENCH_STATE_DIR": str(cluster.state_dir),
           "WORKBENCH_IGNITE_NODES": "2", "WORKBENCH_IGNITE_BACKUPS": "1", "WORKBENCH_IGNITE_USERNAME": "workbench",
           "WORKBENCH_IGNITE_PASSWORD": cluster.ignite_password.get_secret_value(), "WORKBENCH_TLS": "0",
           "WORKBENCH_IGNITE_ADDRESSES": "[]"}
    done = subprocess.run([sys.executable, "-m", "workbench.cli", *shlex.split(stale.command)[1:]], env=env,
                          cwd=cluster.state_dir, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-500:] + done.stderr[-500:]
    assert [s.state for s in check(cluster, ["ignite"])] == ["ok", "ok"]
