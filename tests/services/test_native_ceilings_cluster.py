"""The native ceilings against clusters of two nodes: every node on the program's command line, used for real.

A Cassandra ring (replication factor 2), an Ignite cluster (one backup) and a distributed MinIO (2 x 2 drives)
on their own loopback addresses (node k on 127.0.0.(81+k)), ports, JMX ports and state folder, beside the main
stack. Each ceiling reads the whole dataset through the proxies; taking one node's proxy away shows that the
program reached the others (Cassandra: node 0's gone, the ceiling still reads everything through node 2) or that
it spread its requests over every node (S3, Ignite: node 2's gone, the run fails naming the addresses).
"""

from __future__ import annotations

import uuid

import pytest
from private_stack import running

from workbench.backends import make_backend
from workbench.bench.native_ceilings import CeilingConfig, run_native_ceiling
from workbench.config import Settings, generated_credentials
from workbench.data import SyntheticSource
from workbench.errors import WorkbenchError
from workbench.ingest import ingest
from workbench.net.toxiproxy import Toxiproxy

pytestmark = [pytest.mark.services, pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(900)]

HOST = "127.0.0.81"
SERVICES = ["toxiproxy", "minio", "cassandra", "ignite"]
N = 30
BACKENDS = {"cassandra": "cassandra", "s3-objects": "s3", "ignite": "ignite"}  # backend -> its proxy path


@pytest.fixture(scope="module")
def clusters(tmp_path_factory) -> Settings:
    settings = Settings(
        _env_file=None, host=HOST, state_dir=tmp_path_factory.mktemp("ceiling-clusters"), tls=False,
        cassandra_nodes=2, cassandra_replication_factor=2, cassandra_jmx_port=29411, ignite_nodes=2,
        ignite_backups=1, s3_nodes=2, s3_drives_per_node=2, s3_port=29700, s3_console_port=29701,
        **generated_credentials())
    with running(settings, SERVICES):
        yield settings


@pytest.fixture(scope="module")
def datasets(clusters) -> dict[str, str]:
    """N small samples in each backend (one split, 'train'): backend -> dataset name."""
    names = {}
    for backend in BACKENDS:
        names[backend] = f"ceil_{uuid.uuid4().hex[:8]}"
        ingest(SyntheticSource(N, mean_kb=8, seed=7), make_backend(backend, clusters, names[backend]), progress=False)
    return names


def ceiling(settings: Settings, backend: str, dataset: str):
    return run_native_ceiling(settings, backend, CeilingConfig(dataset=dataset, via_proxy=True, concurrency=4),
                              run_timeout_s=300)


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_each_ceiling_reads_the_whole_dataset_through_the_proxies(clusters, datasets, backend):
    run = ceiling(clusters, backend, datasets[backend])
    assert run.samples == N, run


def test_the_cassandra_ceiling_reads_through_node_2_when_node_0_s_proxy_is_gone(clusters, datasets):
    toxiproxy = Toxiproxy(clusters)
    toxiproxy.set_enabled("cassandra", False)
    try:
        assert ceiling(clusters, "cassandra", datasets["cassandra"]).samples == N
    finally:
        toxiproxy.set_enabled("cassandra", True)


@pytest.mark.parametrize("backend", ["s3-objects", "ignite"])
def test_the_ceiling_spreads_over_every_node_so_losing_node_2_s_proxy_fails_it(clusters, datasets, backend):
    toxiproxy = Toxiproxy(clusters)
    node_2 = clusters.proxy_names(BACKENDS[backend])[1]
    toxiproxy.set_enabled(node_2, False)
    try:
        with pytest.raises(WorkbenchError, match=r"ceiling .* failed: .*127\.0\.0\.8"):
            ceiling(clusters, backend, datasets[backend])
    finally:
        toxiproxy.set_enabled(node_2, True)
