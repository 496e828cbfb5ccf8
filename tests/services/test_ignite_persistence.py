"""Ignite native persistence (WORKBENCH_IGNITE_PERSISTENCE=1) on a two-node cluster: caches survive a node's
restart, a crash of every node and `stack down` + `stack up`."""

from __future__ import annotations

import pytest
from ignite_cluster import cluster_settings, kill
from private_stack import running, start

from workbench.backends.registry import make_backend
from workbench.data import SyntheticSource
from workbench.ingest import ingest, verify
from workbench.reconcile import check
from workbench.stack import down

pytestmark = [pytest.mark.services, pytest.mark.cluster, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    settings = cluster_settings(tmp_path_factory.mktemp("ignite-persistent"), ignite_persistence=True)
    with running(settings, ["ignite"]):
        yield settings


@pytest.fixture(scope="module")
def datasets(cluster):
    """One cache with a backup on the other node, one whose only copy of each partition is one node's disk."""
    made = {}
    for name, backups in (("tkept1", 1), ("tkept0", 0)):
        source = SyntheticSource(150, mean_kb=16, seed=backups, name=name)
        backend = make_backend("ignite", cluster, name, batch_size=32, workers=2, backups=backups)
        ingest(source, backend, progress=False, check_images=False)
        made[name] = (source, backend)
    return made


def all_there(cluster, datasets) -> None:
    for source, backend in datasets.values():
        report = verify(source, backend)  # every id, once, with the checksum it was written with
        assert report.ok and report.found == 150, (backend.cache_name, report)
    assert [s.state for s in check(cluster, ["ignite"])] == ["ok", "ok"]


def test_a_restarted_node_rejoins_with_its_data(cluster, datasets):
    kill(cluster, "ignite-2")
    start(cluster, ["ignite-2"])  # from its own disk, then what changed meanwhile (nothing) from the other node
    kill(cluster, "ignite")  # node 2 now holds the only live copy of the backed-up cache
    try:
        source, backend = datasets["tkept1"]
        report = verify(source, backend)
        assert report.ok and report.found == 150, report
    finally:
        start(cluster, ["ignite"])


def test_every_node_crashing_loses_no_cache(cluster, datasets):
    kill(cluster, "ignite-2")
    kill(cluster, "ignite")
    start(cluster, ["ignite"])  # write-ahead log recovery; the baseline's nodes rejoin and it activates again
    all_there(cluster, datasets)


def test_stack_down_and_up_keep_every_cache(cluster, datasets):
    assert sorted(down(cluster, ["ignite"])) == ["ignite", "ignite-2"]
    start(cluster, ["ignite"])
    all_there(cluster, datasets)
