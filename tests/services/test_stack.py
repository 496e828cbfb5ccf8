"""The local stack's real servers answer real requests, and toxiproxy really slows a path down."""

import statistics
import time
import uuid

import numpy as np
import pytest

from workbench.clients import cassandra_session, ignite_client, triton_client
from workbench.net.toxiproxy import Toxiproxy
from workbench.stack import down, status, up
from workbench.storage import s3_client

pytestmark = pytest.mark.services


def test_every_service_healthy_with_version(stack):
    rows = {r.service: r for r in status(stack)}
    assert set(rows) == {"toxiproxy", "minio", "cassandra", "ignite", "triton"}
    for row in rows.values():
        assert row.healthy, row
        assert row.version
    assert rows["cassandra"].version.startswith("5.0.")
    assert rows["triton"].version == "2.51.0"


def test_up_is_idempotent(stack):
    before = {r.service: r.pid for r in status(stack)}
    again = {r.service: (r.pid, r.healthy) for r in up(stack)}
    assert {name: pid for name, (pid, _) in again.items()} == before
    assert all(healthy for _, healthy in again.values())


def test_cassandra_blob_round_trip(stack, unique):
    payload = np.random.default_rng(0).bytes(200_000)
    with cassandra_session(stack) as session:
        session.execute(f"CREATE KEYSPACE {unique} WITH replication = "
                        "{'class': 'SimpleStrategy', 'replication_factor': 1}")
        try:
            session.execute(f"CREATE TABLE {unique}.blobs (id uuid PRIMARY KEY, data blob)")
            key = uuid.uuid4()
            session.execute(f"INSERT INTO {unique}.blobs (id, data) VALUES (%s, %s)", (key, payload))
            assert session.execute(f"SELECT data FROM {unique}.blobs WHERE id = %s", (key,)).one().data == payload
        finally:
            session.execute(f"DROP KEYSPACE {unique}")


def test_minio_object_round_trip(stack, unique):
    s3 = s3_client(stack)
    s3.create_bucket(Bucket=unique)
    try:
        s3.put_object(Bucket=unique, Key="a/b.bin", Body=b"\x00\xffdata")
        assert s3.get_object(Bucket=unique, Key="a/b.bin")["Body"].read() == b"\x00\xffdata"
    finally:
        s3.delete_object(Bucket=unique, Key="a/b.bin")
        s3.delete_bucket(Bucket=unique)


def test_ignite_binary_object_round_trip(stack, unique):
    from pyignite import GenericObjectMeta
    from pyignite.datatypes import ByteArrayObject, IntObject, String

    class Image(metaclass=GenericObjectMeta, type_name=f"Image{unique}",
                schema={"name": String, "label": IntObject, "data": ByteArrayObject}):
        pass

    with ignite_client(stack) as client:
        cache = client.get_or_create_cache(unique)
        try:
            cache.put("k1", Image(name="cat.jpg", label=3, data=bytearray(b"\xff\xd8jpeg")))
            got = cache.get("k1")
            assert (got.name, got.label, bytes(got.data)) == ("cat.jpg", 3, b"\xff\xd8jpeg")
        finally:
            cache.destroy()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_triton_echo_model(stack, protocol):
    module = __import__(f"tritonclient.{protocol}", fromlist=["InferInput"])
    client = triton_client(stack, protocol)
    assert client.is_model_ready("echo")
    blobs = np.array([[b"hello"], [b"\x00\x01binary"]], dtype=np.object_)
    request = module.InferInput("INPUT", blobs.shape, "BYTES")
    request.set_data_from_numpy(blobs)
    result = client.infer("echo", [request])
    assert result.as_numpy("OUTPUT").ravel().tolist() == [b"hello", b"\x00\x01binary"]
    assert result.as_numpy("NBYTES").ravel().tolist() == [5, 8]


def _cql_rtt_ms(settings, via_proxy: bool, n: int = 15) -> float:
    with cassandra_session(settings, via_proxy) as session:
        statement = session.prepare("SELECT release_version FROM system.local")
        session.execute(statement)
        times = []
        for _ in range(n):
            start = time.perf_counter()
            session.execute(statement)
            times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def test_toxiproxy_adds_latency_to_cassandra_path(stack):
    toxiproxy = Toxiproxy(stack)
    toxiproxy.ensure_proxies()
    base = _cql_rtt_ms(stack, via_proxy=True)
    with toxiproxy.network("cassandra", rtt_ms=50):
        slowed = _cql_rtt_ms(stack, via_proxy=True)
    direct = _cql_rtt_ms(stack, via_proxy=False)
    assert 40 <= slowed - base <= 90, (base, slowed)
    assert direct < base + 20  # the direct path is untouched
    assert not toxiproxy.proxies()["cassandra"]["toxics"]  # restored


@pytest.mark.slow
def test_missing_toolchain_fails_one_service_while_others_start(stack, tmp_path, monkeypatch):
    """A second, private mini-stack: MinIO cannot be built without Go, Triton still starts; `down`
    then stops only that Triton, never the main stack's processes."""
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no Go here (/usr/local/go/bin)
    private = stack.model_copy(update={
        "cache_dir": tmp_path / "cache", "state_dir": tmp_path / "state", "s3_port": 29000,
        "s3_console_port": 29001, "triton_http_port": 28000, "triton_grpc_port": 28001,
        "triton_metrics_port": 28002,
    })
    main_pids = {r.service: r.pid for r in status(stack)}
    try:
        rows = {r.service: r for r in up(private, ["minio", "triton"])}
        assert not rows["minio"].healthy
        assert "'go' is not on PATH" in rows["minio"].detail and "\n" not in rows["minio"].detail
        assert rows["triton"].healthy, rows["triton"].detail
    finally:
        assert down(private) == ["triton"]
    assert {r.service: r.pid for r in status(stack)} == main_pids
    assert all(r.healthy for r in status(stack))


def test_check_network_notices_a_reset_behind_our_back(stack):
    from workbench.errors import WorkbenchError

    toxiproxy = Toxiproxy(stack)
    toxiproxy.ensure_proxies()
    try:
        toxiproxy.set_network("s3", rtt_ms=10, bandwidth_kbps=8000)
        toxiproxy.check_network("s3", rtt_ms=10, bandwidth_kbps=8000)
        toxiproxy.set_network("s3")  # what a concurrent test's cleanup would do
        with pytest.raises(WorkbenchError, match="changed during the measurement"):
            toxiproxy.check_network("s3", rtt_ms=10, bandwidth_kbps=8000)
    finally:
        toxiproxy.set_network("s3")
