"""Authentication and TLS against real servers: a private Cassandra + MinIO (+ toxiproxy) stack with tls=True.

The module starts its own stack on distinct ports, state and certificates under a temporary folder,
with freshly generated logins, and stops exactly those processes at the end. Its Cassandra is first
started without authentication or TLS (a data dir "made earlier"), then restarted secure, so the
bootstrap of the configured login on an existing data dir is exercised too. The main stack is not used.
"""

from __future__ import annotations

import os
import stat
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from private_stack import start
from pydantic import SecretStr

from workbench.backends.registry import make_backend
from workbench.clients import CassandraLoginRefused, cassandra_session
from workbench.config import Settings, generated_credentials
from workbench.data import SyntheticSource
from workbench.errors import WorkbenchError
from workbench.ingest import ingest
from workbench.loaders import make_loader
from workbench.loaders.retry import is_transient
from workbench.stack import down, status
from workbench.stack.tls import ensure_certificates
from workbench.storage import S3Store, s3_client

pytestmark = pytest.mark.services

SERVICES = ["toxiproxy", "minio", "cassandra"]
PORTS = {
    "cassandra_port": 9242, "cassandra_storage_port": 7100, "cassandra_jmx_port": 7299,
    "s3_port": 9200, "s3_console_port": 9201, "toxiproxy_port": 9274,
    "proxy_cassandra_port": 19242, "proxy_s3_port": 19200, "proxy_ignite_port": 19280,
    "proxy_triton_http_port": 19281, "proxy_triton_grpc_port": 19282,
}
MARKER_KEYSPACE = "made_before_auth"
CASSANDRA_LOADERS = ["cassandra", "cassandra-py"]  # C++ driver (acsylla) and Python driver
QUICK_S = 5.0  # a bad input must fail well within this (timeouts are 3 s here)
PEER_CA_VARIABLES = ("CURL_CA_BUNDLE", "AWS_CA_BUNDLE", "SSL_CERT_FILE")


def _private(root: Path, **update) -> Settings:
    fresh = generated_credentials()
    base = {
        **PORTS, "state_dir": root / "state", "tls_dir": root / "tls", "timeout_s": 3.0, "stack": "local",
        "cassandra_username": fresh["cassandra_username"],
        "cassandra_password": SecretStr(fresh["cassandra_password"]),
        "s3_access_key": SecretStr(fresh["s3_access_key"]),
        "s3_secret_key": SecretStr(fresh["s3_secret_key"]),
        "ignite_username": None, "ignite_password": None, "tls": True, "dev_mode": False,
    }
    return Settings(_env_file=None).model_copy(update={**base, **update})


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    """Settings of the private secure stack; its Cassandra data dir was first made without auth and TLS."""
    saved = {name: os.environ.get(name) for name in PEER_CA_VARIABLES}
    settings = _private(tmp_path_factory.mktemp("secure"))
    plain = settings.model_copy(update={"tls": False, "cassandra_username": None, "cassandra_password": None})
    try:
        start(plain, ["cassandra"])
        with cassandra_session(plain) as session:
            session.execute(f"CREATE KEYSPACE {MARKER_KEYSPACE} WITH replication = "
                            "{'class': 'SimpleStrategy', 'replication_factor': 1}")
        assert down(plain, ["cassandra"]) == ["cassandra"]
        start(settings, SERVICES)
        yield settings
    finally:
        down(settings, SERVICES)
        for name, value in saved.items():  # the peers point these at the private CA bundle
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(scope="module")
def untrusted(secure, tmp_path_factory) -> Settings:
    """The secure stack's settings, trusting another (valid, unrelated) CA."""
    other = secure.model_copy(update={"tls_dir": tmp_path_factory.mktemp("other-ca")})
    ensure_certificates(other)
    return secure.model_copy(update={"tls_ca_file": other.certificates_dir() / "ca.crt"})


@pytest.fixture(scope="module")
def source() -> SyntheticSource:
    return SyntheticSource(40, mean_kb=8, seed=5, name=f"sec-{uuid.uuid4().hex[:6]}")


@pytest.fixture(scope="module")
def expected(source) -> dict:
    return {str(s.id): (s.data, s.label) for s in source}


@pytest.fixture(scope="module")
def ingested(secure, source) -> str:
    """The source in Cassandra, s3-shards (8 shards), s3-objects and an MDS copy, written over TLS + auth."""
    from workbench.loaders.peers.mosaic import write_mds

    for name, options in (("cassandra", {}), ("s3-shards", {"maxcount": 5}), ("s3-objects", {})):
        summary = ingest(source, make_backend(name, secure, source.name, **options), progress=False)
        assert summary.samples == len(source)
    write_mds(secure, source.name, source, size_limit=64 * 1024)
    return source.name


def _epoch(settings: Settings, loader: str, dataset: str, **config) -> list:
    with make_loader(loader, settings, dataset=dataset, **config) as source:
        return list(source)


def _exactly(items: list, expected: dict) -> None:
    assert Counter(i.key for i in items) == Counter(set(expected))
    for item in items:
        assert (item.data, item.label) == expected[item.key]


def _fails_quickly(fn, match: str) -> WorkbenchError:
    start = time.monotonic()
    with pytest.raises(WorkbenchError, match=match) as caught:
        fn()
    assert time.monotonic() - start < QUICK_S, f"took {time.monotonic() - start:.1f} s"
    assert "\n" not in str(caught.value)
    return caught.value


def _cql_version(settings: Settings, via_proxy: bool = False, login: tuple[str, str] | None = None) -> str:
    with cassandra_session(settings, via_proxy, login=login) as session:
        return session.execute("SELECT release_version FROM system.local").one()[0]


def _buckets(settings: Settings, via_proxy: bool = False) -> list:
    return s3_client(settings, via_proxy).list_buckets()["Buckets"]


# ------------------------------------------------------------------------------------ the stack


def test_the_secure_stack_is_healthy_and_keeps_data_made_before_auth(secure):
    rows = {r.service: r for r in status(secure, SERVICES)}
    assert all(r.healthy for r in rows.values()), rows
    assert rows["minio"].address == "127.0.0.1:9200" and secure.s3_endpoint().startswith("https://")
    with cassandra_session(secure) as session:
        keyspaces = {r.keyspace_name for r in session.execute("SELECT keyspace_name FROM system_schema.keyspaces")}
    assert MARKER_KEYSPACE in keyspaces


@pytest.mark.parametrize("via_proxy", [False, True])
def test_clients_connect_with_tls_and_the_configured_login(secure, via_proxy):
    assert _cql_version(secure, via_proxy).startswith("5.0.")
    assert isinstance(_buckets(secure, via_proxy), list)


def test_the_default_cassandra_login_no_longer_works(secure):
    error = _fails_quickly(lambda: _cql_version(secure, login=("cassandra", "cassandra")), "refused the login")
    assert isinstance(error, CassandraLoginRefused) and "127.0.0.1:9242" in str(error)


def test_cassandra_speaks_tls_only_and_its_yaml_is_private(secure):
    yaml = secure.state_dir / "cassandra" / "conf" / "cassandra.yaml"
    assert stat.S_IMODE(yaml.stat().st_mode) == 0o600
    text = yaml.read_text()
    assert "PasswordAuthenticator" in text and "optional: false" in text and "store_type: PKCS12" in text
    assert f"storage_port: {PORTS['cassandra_storage_port']}" in text
    for secret in (secure.cassandra_password, secure.s3_access_key, secure.s3_secret_key):
        assert secret.get_secret_value() not in text


def test_no_secret_in_any_file_of_the_private_stack_but_the_private_yaml(secure, ingested):
    """Logs, configuration, catalog, data and commit logs: no login, key or keystore password in clear."""
    secrets = [s.encode() for s in secure.secrets()]
    assert len(secrets) == 4  # cassandra password, S3 access and secret key, keystore password
    yaml = secure.state_dir / "cassandra" / "conf" / "cassandra.yaml"
    files = [p for p in secure.state_dir.rglob("*") if p.is_file() and p != yaml]
    assert {"cassandra.log", "minio.log"} <= {p.name for p in files}
    for path in files:
        data = path.read_bytes()
        leaked = [i for i, s in enumerate(secrets) if s in data]
        assert not leaked, f"secret #{leaked} in {path}"


# ------------------------------------------------------------------------------------- loaders


@pytest.mark.parametrize("loader", CASSANDRA_LOADERS)
@pytest.mark.parametrize("via_proxy", [False, True])
def test_cassandra_loader_reads_the_split_over_tls_and_auth(secure, ingested, expected, via_proxy, loader):
    _exactly(_epoch(secure, loader, ingested, via_proxy=via_proxy, concurrency=8, batch_size=7), expected)


@pytest.mark.parametrize("loader", CASSANDRA_LOADERS)
def test_cassandra_loader_takes_the_plugins_auth_and_tls_parameters(secure, ingested, expected, loader):
    ca = str(secure.ca_file())
    items = _epoch(secure, loader, ingested, username=secure.cassandra_username,
                   password=secure.cassandra_password.get_secret_value(), use_ssl=True, ssl_certificate=ca)
    _exactly(items, expected)


@pytest.mark.parametrize("loader", ["s3-shards", "s3-objects", "s3-naive"])
@pytest.mark.parametrize("via_proxy", [False, True])
def test_s3_loaders_read_the_split_over_tls(secure, ingested, expected, loader, via_proxy):
    _exactly(_epoch(secure, loader, ingested, via_proxy=via_proxy), expected)


@pytest.mark.parametrize("peer", ["webdataset", "s3torchconnector", "mosaic-streaming"])
def test_peers_read_the_split_over_tls_with_the_stack_ca(secure, ingested, expected, peer):
    _exactly(_epoch(secure, peer, ingested, shuffle=False), expected)


def test_object_datasets_and_checkpoints_work_over_tls(secure, ingested):
    import io

    import torch

    from workbench.checkpoints.s3 import S3Checkpoint
    from workbench.compat.oss_connector import ObjectMapDataset

    bucket = make_backend("s3-objects", secure, ingested).store.bucket
    dataset = ObjectMapDataset.from_prefix(f"s3://{bucket}/", secure, key_filter=lambda k: k.endswith(".jpg"))
    assert len(dataset) == 40 and dataset[0].read()[:2] == b"\xff\xd8"
    checkpoint = S3Checkpoint(secure)
    with checkpoint.writer(f"s3://{bucket}/ckpt/model.pt") as f:
        torch.save({"w": torch.arange(5)}, f)
    with checkpoint.reader(f"s3://{bucket}/ckpt/model.pt") as f:
        assert torch.load(io.BytesIO(f.read()))["w"].tolist() == [0, 1, 2, 3, 4]


# ----------------------------------------------------------------------------------- bad input


def test_a_wrong_cassandra_password_is_one_clear_permanent_error(secure, ingested):
    wrong = secure.model_copy(update={"cassandra_password": SecretStr("not-the-password")})
    error = _fails_quickly(lambda: _cql_version(wrong), r"127\.0\.0\.1:9242 refused the login.*PASSWORD")
    assert not is_transient(error)
    for loader in CASSANDRA_LOADERS:
        _fails_quickly(lambda loader=loader: _epoch(wrong, loader, ingested),
                       r"127\.0\.0\.1:9242 refused the login.*PASSWORD")


@pytest.mark.parametrize("via_proxy", [False, True])
def test_a_plain_client_against_tls_only_cassandra_says_to_turn_tls_on(secure, via_proxy):
    plain = secure.model_copy(update={"tls": False})
    port = PORTS["proxy_cassandra_port" if via_proxy else "cassandra_port"]
    error = _fails_quickly(lambda: _cql_version(plain, via_proxy),
                           rf"127\.0\.0\.1:{port} accepts TLS .*WORKBENCH_TLS=1")
    assert not is_transient(error)


@pytest.mark.parametrize("loader", CASSANDRA_LOADERS)
def test_a_plain_loader_against_tls_only_cassandra_says_to_turn_tls_on(secure, ingested, loader):
    _fails_quickly(lambda: _epoch(secure, loader, ingested, use_ssl=False),
                   r"127\.0\.0\.1:9242 accepts TLS connections only")


def test_a_tls_client_against_a_plain_server_says_it_does_not_speak_tls(secure, ingested):
    plain_port = PORTS["toxiproxy_port"]  # a real plain-TCP server (HTTP) on this stack
    not_tls = {"cassandra_port": plain_port, "s3_port": plain_port}
    _fails_quickly(lambda: _cql_version(secure.model_copy(update=not_tls)),
                   rf"TLS handshake with Cassandra at 127\.0\.0\.1:{plain_port} failed .*does not speak TLS")
    _fails_quickly(lambda: _buckets(secure.model_copy(update=not_tls)),
                   rf"TLS handshake with S3 at https://127\.0\.0\.1:{plain_port} failed .*does not speak TLS")
    for loader in CASSANDRA_LOADERS:
        _fails_quickly(lambda loader=loader: _epoch(secure, loader, ingested, cassandra_port=plain_port),
                       rf"127\.0\.0\.1:{plain_port} failed .*does not speak TLS")


@pytest.mark.parametrize("via_proxy", [False, True])
def test_an_http_client_against_https_minio_says_to_turn_tls_on(secure, ingested, via_proxy):
    plain = secure.model_copy(update={"tls": False})
    port = PORTS["proxy_s3_port" if via_proxy else "s3_port"]
    error = _fails_quickly(lambda: _buckets(plain, via_proxy), rf"http://127\.0\.0\.1:{port} accepts HTTPS only")
    assert not is_transient(error)
    _fails_quickly(lambda: _epoch(plain, "s3-shards", ingested, via_proxy=via_proxy), "accepts HTTPS only")


def test_an_untrusted_ca_is_named_for_cassandra_s3_and_the_loaders(untrusted, ingested):
    _fails_quickly(lambda: _cql_version(untrusted),
                   r"cannot verify the TLS certificate of Cassandra at 127\.0\.0\.1:9242")
    _fails_quickly(lambda: _buckets(untrusted), r"cannot verify the TLS certificate of S3 at https://127\.0\.0\.1:9200")
    for loader in CASSANDRA_LOADERS:
        _fails_quickly(lambda loader=loader: _epoch(untrusted, loader, ingested), "cannot verify the TLS certificate")
    _fails_quickly(lambda: _epoch(untrusted, "s3-objects", ingested), "cannot verify the TLS certificate")


def test_an_unreachable_port_names_host_and_port(secure, ingested):
    closed = secure.model_copy(update={"cassandra_port": 1, "s3_port": 1})
    _fails_quickly(lambda: _cql_version(closed), r"cannot reach Cassandra at 127\.0\.0\.1:1\b")
    _fails_quickly(lambda: _epoch(closed, "s3-objects", ingested, retries=0), r"127\.0\.0\.1:1\b")
    for loader in CASSANDRA_LOADERS:
        _fails_quickly(lambda loader=loader: _epoch(closed, loader, ingested, retries=0),
                       r"cannot reach Cassandra at 127\.0\.0\.1:1\b")


@pytest.mark.parametrize("via_proxy", [False, True])
@pytest.mark.parametrize("backend", ["cassandra", "s3-objects", "s3-shards"])
def test_native_ceilings_read_the_split_over_tls_and_auth(secure, ingested, expected, backend, via_proxy):
    from workbench.bench.native_ceilings import run_native_ceiling

    run = run_native_ceiling(secure, backend, {"dataset": ingested, "via_proxy": via_proxy, "concurrency": 4})
    assert run.counts == (len(expected), sum(len(data) for data, _ in expected.values()))


def test_a_native_ceiling_refuses_an_untrusted_ca(untrusted, ingested):
    from workbench.bench.native_ceilings import run_native_ceiling

    for backend in ("cassandra", "s3-objects"):
        start = time.monotonic()
        with pytest.raises(WorkbenchError, match=r"certificate|x509|tls|TLS"):
            run_native_ceiling(untrusted, backend, {"dataset": ingested}, run_timeout_s=30)
        assert time.monotonic() - start < 15


def test_the_batch_fetcher_trusts_the_configured_ca_alone(secure, untrusted, ingested, monkeypatch):
    """The s3-objects loader's fetcher (workbench_native) reads over TLS with the stack's CA and refuses a server
    that another CA's settings do not vouch for, as the obstore store does (its failure, not a fallback), even
    while SSL_CERT_FILE names the stack's CA (the peers point it at system + stack CA for the whole process)."""
    pytest.importorskip("workbench_native", reason="the extension is built by `make venv` (needs cargo)")
    monkeypatch.setenv("SSL_CERT_FILE", str(secure.ca_file()))
    from workbench.concurrency import in_flight_collected
    from workbench.storage.s3_batch import GetFailed, s3_batch

    store = make_backend("s3-objects", secure, ingested).store
    rel, size = next((k, n) for k, n in store.list() if not k.endswith(".txt"))
    for settings, trusted in ((secure, True), (untrusted, False)):
        (_, got), = in_flight_collected([store.full(rel)], s3_batch(settings, store.bucket, False, 2), 1)
        if trusted:
            assert len(got[0]) == size
        else:
            assert isinstance(got, GetFailed) and "InvalidCertificate" in got.text


def test_the_shard_range_reader_trusts_the_configured_ca_alone(secure, untrusted, ingested, monkeypatch):
    """The s3-shards path's range reader (workbench_native) reads a shard's pieces over TLS with the stack's CA and
    refuses a server another CA's settings do not vouch for with the store's one-line error, even while
    SSL_CERT_FILE names the stack's CA."""
    pytest.importorskip("workbench_native", reason="the extension is built by `make venv` (needs cargo)")
    monkeypatch.setenv("SSL_CERT_FILE", str(secure.ca_file()))
    from workbench.layouts.shards import fetch_items, read_split_index

    store = make_backend("s3-shards", secure, ingested).store
    info = read_split_index(store, "train", ingested)[0]
    assert store._range_reader() is not None
    assert [item.data for item in fetch_items(store, "train", info, "int")] == \
        [expected.data for expected in fetch_items(S3Store.from_client(store.client, store.bucket, store.prefix),
                                                   "train", info, "int")]  # boto3's bytes
    other = S3Store(untrusted, store.bucket, store.prefix)
    start = time.monotonic()
    with pytest.raises(WorkbenchError, match=r"cannot verify the TLS certificate of S3 at https://127\.0\.0\.1:9200"):
        other.get_ranges(f"train/{info.name}", info.bytes, [(0, 512)])
    assert time.monotonic() - start < 15
