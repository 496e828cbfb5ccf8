"""Caches whose partition count is chosen at ingest (the Ignite article's partition study): the node's cache
templates give a cache N partitions, the loaders and IgniteDataset read exactly the dataset from them.

A private one-node Ignite on its own loopback address (127.0.0.63), state and login: the node's XML carries the
templates from its first start, whatever the shared stack's node was started with. Stopped afterwards."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from ignite_cluster import cluster_settings
from private_stack import running

from workbench import catalog
from workbench.backends.registry import make_backend
from workbench.clients.ignite import ignite_client, partition_count
from workbench.compat.ignite_dataset import dataset_source
from workbench.data import parse_source
from workbench.errors import WorkbenchError
from workbench.ingest import ingest
from workbench.loaders import make_loader

pytestmark = [pytest.mark.services, pytest.mark.slow]

HOST = "127.0.0.63"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    settings = cluster_settings(tmp_path_factory.mktemp("ignite-partitions"), nodes=1, host=HOST, ignite_backups=0)
    with running(settings, ["ignite"]) as ready:
        yield ready


def _cli_env(settings) -> dict[str, str]:
    return {**os.environ, "WORKBENCH_HOST": settings.host, "WORKBENCH_STATE_DIR": str(settings.state_dir),
            "WORKBENCH_IGNITE_USERNAME": settings.ignite_username,
            "WORKBENCH_IGNITE_PASSWORD": settings.ignite_password.get_secret_value(), "WORKBENCH_TLS": "0",
            "WORKBENCH_IGNITE_NODES": "1", "WORKBENCH_IGNITE_BACKUPS": "0", "WORKBENCH_IGNITE_ADDRESSES": "[]"}


@pytest.fixture(scope="module")
def ingested(node):
    """120 samples ingested by the CLI into a cache of 16 partitions (`--option partitions=16`)."""
    run = subprocess.run(
        [sys.executable, "-m", "workbench.cli", "ingest", "--source", "synthetic:120", "--backend", "ignite",
         "--dataset", "parts16", "-o", "partitions=16", "-o", "workers=2"],
        cwd=ROOT, env=_cli_env(node), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    expected = {str(s.id): s.data for s in parse_source("synthetic:120")}
    return "parts16", expected


def test_the_cache_has_the_partitions_asked_for_at_ingest(node, ingested):
    name, expected = ingested
    layout = catalog.entry(node, "ignite", name)
    cache = "WB_P16_B0_PARTS16"
    assert (layout["cache"], layout["partitions"]) == (cache, 16)
    with ignite_client(node) as client:
        assert partition_count(client, cache) == 16  # the affinity mapping partition awareness uses
        with client.sql("SELECT AFFINITY, BACKUPS FROM SYS.CACHES WHERE CACHE_NAME = ?", query_args=[cache]) as cur:
            affinity, backups = next(iter(cur))
        assert "parts=16" in str(affinity) and backups == 0
        assert client.get_cache(cache).get_size() == len(expected)
    source = dataset_source(cache, settings=node)
    assert source.partitions() == 16
    per_partition = {p: {k: bytes(v.data) for k, v in source.entries([p])} for p in range(16)}
    assert sum(1 for p in per_partition.values() if p) > 1  # the samples are spread over the partitions
    merged = {k: v for p in per_partition.values() for k, v in p.items()}
    assert merged == expected and sum(map(len, per_partition.values())) == len(expected)


@pytest.mark.parametrize("options", [{"mode": "get_all"}, {"mode": "scan"}, {"mode": "get_all", "client": "sync"}])
def test_the_loaders_read_exactly_the_dataset_from_16_partitions(node, ingested, options):
    name, expected = ingested
    with make_loader("ignite", node, dataset=name, **options) as loader:
        keys = Counter()
        got = {}
        for item in loader:
            keys[item.key] += 1
            got[item.key] = item.data
        if options["mode"] == "scan":
            assert loader.partitions() == 16
    assert got == expected and set(keys.values()) == {1}


def test_sql_tables_take_the_template_too_and_other_counts_are_refused(node):
    source = parse_source("synthetic:40")
    backend = make_backend("ignite", node, "parts8sql", mode="sql", partitions=8, batch_size=16)
    try:
        ingest(source, backend, progress=False, check_images=False, source_spec="synthetic:40")
        assert backend.partitions_found == 8 and backend.cache_name == "SQL_PUBLIC_PARTS8SQL"
        with make_loader("ignite", node, dataset="parts8sql", mode="scan") as loader:
            assert loader.partitions() == 8
            assert {i.key: i.data for i in loader} == {str(s.id): s.data for s in source}
    finally:
        backend.drop()
    with pytest.raises(WorkbenchError, match=r"not 100: pick one of those"):
        make_backend("ignite", node, "parts100", partitions=100)


def test_a_node_without_the_templates_is_a_clear_error(node):
    """A cache named like a template on a node that lacks it gets 1024 partitions: refused, and removed again."""
    backend = make_backend("ignite", node, "notemplate", partitions=32, backups=3)  # no template has 3 backups
    with pytest.raises(WorkbenchError, match=r"would have 1024 partitions, not 32.*no cache template WB_P32_B3_\*"):
        backend.prepare(["train"])
    with ignite_client(node) as client:
        assert backend.cache_name not in client.get_cache_names()
