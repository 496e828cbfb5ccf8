"""get_all batches split by the keys' primary nodes on a two-node cluster: every key goes to the node that holds
it (checked against each node's own local scan), and the loader still reads exactly the dataset.

A private cluster on its own loopback addresses (127.0.0.65, .66), state and login, stopped afterwards."""

from __future__ import annotations

import asyncio

import pytest
from ignite_cluster import cluster_settings
from private_stack import running

from workbench.backends.registry import make_backend
from workbench.clients.ignite import ignite_client, settings_endpoint
from workbench.data import parse_source
from workbench.ingest import ingest
from workbench.loaders import make_loader
from workbench.loaders.ignite import key_groups, key_groups_async

pytestmark = [pytest.mark.services, pytest.mark.cluster, pytest.mark.slow]

HOST = "127.0.0.65"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    settings = cluster_settings(tmp_path_factory.mktemp("ignite-routing"), nodes=2, host=HOST, ignite_backups=0)
    with running(settings, ["ignite"]) as ready:
        yield ready


@pytest.fixture(scope="module")
def dataset(cluster):
    source = parse_source("synthetic:160")
    backend = make_backend("ignite", cluster, "trouting", batch_size=32, workers=2, backups=0)
    ingest(source, backend, progress=False, check_images=False, source_spec="synthetic:160")
    return backend.cache_name, {str(s.id): s.data for s in source}


def _primary_keys(cluster, cache: str) -> dict[str, set[str]]:
    """host -> the keys that node holds (no backups: its primaries), from a local scan on that node alone."""
    held = {}
    for node in range(2):
        with ignite_client(cluster, node=node) as client, \
                client.get_cache(cache).scan(page_size=100, local=True) as cursor:
            held[cluster.node_host(node)] = {key for key, _ in cursor}
    return held


def test_each_key_goes_to_the_node_that_holds_it(cluster, dataset):
    cache_name, expected = dataset
    held = _primary_keys(cluster, cache_name)
    assert all(held.values()) and set().union(*held.values()) == set(expected)
    keys = sorted(expected)
    with ignite_client(cluster) as client:
        groups = key_groups(client, client.get_cache(cache_name), keys)
        by_host = {node.host: set(group) for node, group in groups.items()}
    assert by_host == held

    async def aio_groups() -> dict[str, set[str]]:
        client = await settings_endpoint(cluster).connect_aio(partition_aware=True)
        try:
            cache = await client.get_cache(cache_name)
            return {node.host: set(group) for node, group in (await key_groups_async(client, cache, keys)).items()}
        finally:
            await client.close()

    assert asyncio.run(aio_groups()) == held


@pytest.mark.parametrize("options", [{"partition_aware": True}, {"client": "sync"}, {"partition_aware": False}])
def test_the_loader_reads_exactly_the_dataset_routed_or_not(cluster, dataset, options):
    expected = dataset[1]
    with make_loader("ignite", cluster, dataset="trouting", get_batch=16, **options) as loader:
        seen = [(item.key, item.data) for item in loader]
    assert dict(seen) == expected and len(seen) == len(expected)
