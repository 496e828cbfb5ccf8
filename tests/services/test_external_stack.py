"""WORKBENCH_STACK=external against the running servers: the endpoint lists name them, while `host` points where
nothing listens (127.0.0.99), so every success below went through the lists; `via_proxy` is ignored with lists.

Covered: `stack status` (every endpoint probed, a dead one named), and each client builder on a real request:
Cassandra ingest (acsylla) and both Cassandra loaders, S3 (obstore ingest and loader, boto3 store), Ignite
(sync and asyncio pyignite), Triton (HTTP and gRPC).
"""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from workbench.backends.registry import make_backend
from workbench.clients import cassandra_session, triton_client
from workbench.config import Settings
from workbench.data import SyntheticSource
from workbench.ingest import ingest
from workbench.loaders import make_loader
from workbench.serving import infer
from workbench.stack import external
from workbench.storage.s3 import BotoS3Store

pytestmark = pytest.mark.services

NOWHERE = "127.0.0.99"  # a loopback address nothing of the stack listens on


def lists_for(stack: Settings, extra: str | None = None) -> dict[str, list[str]]:
    """Endpoint lists naming the stack's servers (their own ports, not toxiproxy's), plus `extra` for each."""
    host = stack.host
    lists = {"cassandra_contact_points": [f"{host}:{stack.cassandra_port}"], "s3_endpoints": [stack.s3_endpoint()],
             "ignite_addresses": [f"{host}:{stack.ignite_port}"],
             "triton_urls": [f"http://{host}:{stack.triton_http_port}", f"grpc://{host}:{stack.triton_grpc_port}"]}
    if extra:
        lists = {name: [*values, f"http://{extra}" if name == "s3_endpoints" else extra]
                 for name, values in lists.items()}
    return lists


@pytest.fixture(scope="module")
def cluster(stack) -> Settings:
    return stack.model_copy(update={"stack": "external", "host": NOWHERE, **lists_for(stack)})


def test_status_probes_every_listed_endpoint(cluster):
    rows = external.status(cluster)
    assert [(r.service, r.healthy) for r in rows] == [
        ("cassandra", True), ("s3", True), ("ignite", True), ("triton", True), ("triton-2", True)], rows
    assert rows[0].version.startswith("Cassandra 5.") and "1 up" in rows[0].detail
    assert external.unreachable(rows) == ""


def test_status_names_a_dead_endpoint_beside_live_ones(stack):
    dead = "127.0.0.1:1"
    settings = stack.model_copy(update={"stack": "external", "timeout_s": 3.0, **lists_for(stack, dead)})
    rows = {r.service: r for r in external.status(settings)}
    for name in ("cassandra-2", "s3-2", "ignite-2", "triton-3"):
        assert not rows[name].healthy and rows[name].address == dead and dead in rows[name].detail
        assert "\n" not in rows[name].detail
    assert all(rows[name].healthy for name in ("cassandra", "s3", "ignite", "triton", "triton-2"))
    assert external.unreachable(list(rows.values())) == (
        f"not answering: cassandra-2 {dead}, s3-2 {dead}, ignite-2 {dead}, triton-3 {dead}")


@pytest.fixture
def dataset():
    name = f"ext_{uuid.uuid4().hex[:8]}"
    return name, SyntheticSource(16, mean_kb=8, seed=5, name=name)


def read_all(settings: Settings, loader: str, name: str, **config) -> set[str]:
    with make_loader(loader, settings, dataset=name, via_proxy=True, **config) as source:
        return {item.key for item in source}


@pytest.mark.parametrize(("backend", "loaders"), [
    ("cassandra", ["cassandra", "cassandra-py"]), ("s3-objects", ["s3-objects"]), ("ignite", ["ignite"])])
def test_ingest_and_loaders_go_to_the_listed_nodes(cluster, dataset, backend, loaders):
    name, source = dataset
    store = make_backend(backend, cluster, name, via_proxy=True)
    try:
        ingest(source, store, progress=False)
        expected = {str(s.id) for s in source}
        for loader in loaders:
            assert read_all(cluster, loader, name) == expected, loader
        if backend == "ignite":
            assert read_all(cluster, "ignite", name, client="aio") == expected
    finally:
        store.drop()


def test_python_driver_and_boto3_use_the_lists(cluster):
    with cassandra_session(cluster, via_proxy=True) as session:
        assert session.execute("SELECT release_version FROM system.local").one()[0].startswith("5.")
    assert BotoS3Store(cluster, cluster.s3_bucket, via_proxy=True).bucket_exists() in (True, False)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_triton_clients_use_the_listed_servers(cluster, protocol):
    client = triton_client(cluster, protocol, via_proxy=True)
    try:
        assert client.is_server_ready()
    finally:
        client.close()
    out = infer(cluster, "echo", {"INPUT": np.array([[b"hi"]], dtype=object)}, protocol=protocol, via_proxy=True)
    assert out["NBYTES"].ravel().tolist() == [2]


@pytest.mark.slow
def test_bootstrap_activates_a_fresh_ignite_and_creates_the_login(tmp_path):
    """A fresh Ignite node with authentication, started as Kubernetes would (no workbench probe ever touched it):
    `external-bootstrap` activates it and creates the configured login; the default login is retired after."""
    from pydantic import SecretStr

    from workbench.clients import ignite_client
    from workbench.errors import WorkbenchError
    from workbench.stack.ignite import DEFAULT_PASSWORD, DEFAULT_USER, Ignite
    from workbench.stack.manager import process_of

    address = "127.0.0.71"  # a loopback address of its own: the main stack's discovery never meets it
    node_settings = Settings(_env_file=None, host=address, state_dir=tmp_path / "state", timeout_s=5.0,
                             ignite_username="workbench", ignite_password=SecretStr(uuid.uuid4().hex))
    node = Ignite(node_settings)
    node.provision()
    launch = node.launch()
    process = process_of(node)
    process.start(launch.command, launch.env, launch.cwd)
    try:
        client = node_settings.model_copy(update={"stack": "external", "host": NOWHERE,
                                                  "ignite_addresses": [f"{address}:{node_settings.ignite_port}"]})
        assert external.bootstrap(client, wait_s=180)[0].startswith("Ignite: cluster active, login 'workbench'")
        with ignite_client(client) as session:
            session.get_cache(Ignite.health_cache).put("k", b"v")
        default = client.model_copy(update={"ignite_username": DEFAULT_USER,
                                            "ignite_password": SecretStr(DEFAULT_PASSWORD), "dev_mode": True})
        with pytest.raises(WorkbenchError, match="refused the login"), ignite_client(default):
            pass
        assert external.bootstrap(client) == ["Ignite: the configured login is in place already"]
    finally:
        assert process.stop()
