"""Ignite with authentication and TLS, Triton's gRPC over TLS: a private secure stack beside the main one.

The module starts its own toxiproxy, Ignite and Triton (tls=True, a generated Ignite login, distinct
ports, state and certificates under a temporary folder) and stops exactly those afterwards. It never
touches the main stack, so it needs none of it running.
"""

from __future__ import annotations

import asyncio
import secrets
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
from private_stack import running
from pydantic import SecretStr

from workbench.backends.registry import make_backend
from workbench.checkpoints.ignite import IgniteCheckpoint
from workbench.clients import ignite_client, triton_client
from workbench.compat.ignite_dataset import dataset_source
from workbench.config import Settings
from workbench.data import SyntheticSource
from workbench.errors import WorkbenchError
from workbench.ingest import ingest
from workbench.loaders import make_loader
from workbench.serving import InferenceError, infer, pack_uuids
from workbench.stack import status
from workbench.stack.ignite import Ignite, retire_default_login
from workbench.stack.tls import ensure_certificates
from workbench.stack.triton import Triton

pytestmark = [pytest.mark.services,  # pyignite's SSLContext uses a deprecated protocol constant (see clients.py)
              pytest.mark.filterwarnings("ignore:ssl.PROTOCOL_TLSv1_2 is deprecated:DeprecationWarning")]

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ["toxiproxy", "ignite", "triton"]
DEAD_CASSANDRA_PORT = 29999  # nothing listens: cassandra_fetch must fail there, over TLS, with a clear error
# Below Linux's ephemeral range (32768-60999): a listening port in it can be taken by any client's outgoing
# connection (discovery on 47600 once failed to bind in CI: "all ports in range are in use").
PORTS = {
    "ignite_port": 10900, "ignite_discovery_port": 27600, "ignite_communication_port": 27200,
    "triton_http_port": 8100, "triton_grpc_port": 8101, "triton_metrics_port": 8102,
    "toxiproxy_port": 18474, "proxy_cassandra_port": 29142, "proxy_s3_port": 29100, "proxy_ignite_port": 20900,
    "proxy_triton_http_port": 18100, "proxy_triton_grpc_port": 18101, "cassandra_port": DEAD_CASSANDRA_PORT,
}


def _model_repository(root: Path) -> Path:
    """Only the models these tests use (a quick start): echo, and cassandra_fetch to check its TLS settings."""
    repository = root / "models"
    for model in ("echo", "cassandra_fetch"):
        shutil.copytree(ROOT / "triton_models" / model, repository / model,
                        ignore=shutil.ignore_patterns("__pycache__"))
    return repository


@pytest.fixture(scope="module")
def secure(tmp_path_factory) -> Settings:
    """Settings of a healthy private stack with Ignite authentication + TLS and Triton gRPC over TLS."""
    root = tmp_path_factory.mktemp("secure")
    private = Settings().model_copy(update={
        **PORTS, "state_dir": root / "state", "tls": True, "tls_dir": None, "tls_ca_file": None, "dev_mode": False,
        "ignite_username": "workbench", "ignite_password": SecretStr(secrets.token_urlsafe(24)),
        "triton_model_repository": _model_repository(root), "timeout_s": 10.0,
    })
    with running(private, SERVICES):
        yield private


@pytest.fixture(scope="module")
def dataset(secure):
    """60 small synthetic samples ingested over TLS with the generated login."""
    source = SyntheticSource(60, mean_kb=8, seed=3, name=f"tsec{secrets.token_hex(4)}")
    backend = make_backend("ignite", secure, source.name, batch_size=16, workers=2)
    ingest(source, backend, progress=False)
    yield source.name, {str(s.id): s.data for s in source}, backend.cache_name
    backend.drop()


def _fails_fast(settings: Settings, call, match: str) -> str:
    """`call()` raises one clear WorkbenchError line matching `match` well within the timeout."""
    start = time.monotonic()
    with pytest.raises(WorkbenchError, match=match) as info:
        call()
    assert time.monotonic() - start < settings.timeout_s + 5
    message = str(info.value)
    assert "\n" not in message
    return message


def _put_get(settings: Settings) -> None:
    with ignite_client(settings) as client:
        client.get_cache(Ignite.health_cache).put("k", b"v")


# --------------------------------------------------------------------------------------------- the stack


def test_private_secure_stack_runs_on_its_own_ports_bound_to_localhost(secure):
    rows = {r.service: r for r in status(secure, SERVICES)}
    assert all(r.healthy for r in rows.values()), rows
    assert rows["ignite"].address == "127.0.0.1:10900" and rows["triton"].address == "127.0.0.1:8100"
    config = (secure.state_dir / "ignite" / "ignite.xml")
    assert config.stat().st_mode & 0o777 == 0o600
    xml = config.read_text()
    assert '<property name="authenticationEnabled" value="true"/>' in xml
    assert '<property name="sslEnabled" value="true"/>' in xml
    main_node = f"127.0.0.1:{Settings.model_fields['ignite_discovery_port'].default}<"
    assert "<value>127.0.0.1:27600</value>" in xml and main_node not in xml  # never discovers the main node
    assert '<property name="localPort" value="27200"/>' in xml
    command = Triton(secure).launch().command
    assert "--grpc-use-ssl=true" in command and "--http-address=127.0.0.1" in command
    assert f"--grpc-server-key={secure.certificates_dir() / 'server.key'}" in command


def test_ignite_loader_reads_exactly_the_dataset_over_tls_with_login(secure, dataset):
    name, expected, _ = dataset
    for options in ({"mode": "get_all"}, {"mode": "scan"}, {"via_proxy": True, "concurrency": 2}):
        with make_loader("ignite", secure, dataset=name, **options) as loader:
            got = {item.key: item.data for item in loader}
        assert got == expected, options


def test_ignite_dataset_parameters_and_checkpoints_over_tls(secure, dataset):
    _, expected, cache = dataset
    password = secure.ignite_password.get_secret_value()
    source = dataset_source(cache, host="127.0.0.1", port=10900, username="workbench", password=password,
                            settings=secure)
    assert "use_ssl" in source.endpoint.client_kwargs() and password not in repr(source.endpoint)
    assert {key: bytes(value.data) for key, value in source.entries()} == expected
    store = IgniteCheckpoint(secure, cache_name=f"{cache}_CKPT", chunk_bytes=1000)
    try:
        with store.writer("run/epoch1") as f:
            f.write(b"weights" * 500)
        assert store.reader("run/epoch1").read() == b"weights" * 500
    finally:
        store.drop()


# ---------------------------------------------------------------------------------------------- bad input


def test_wrong_ignite_password_is_one_clear_line(secure, dataset):
    wrong = secure.model_copy(update={"ignite_password": SecretStr("not-the-password")})
    _fails_fast(secure, lambda: _put_get(wrong), r"Ignite at 127\.0\.0\.1:10900 refused the login of user 'workbench'")
    name = dataset[0]
    message = _fails_fast(secure, lambda: list(make_loader("ignite", secure, dataset=name, password="nope")),
                          r"refused the login of user 'workbench'.*WORKBENCH_IGNITE_PASSWORD")
    assert "nope" not in message


def test_default_ignite_login_is_retired_and_refused(secure):
    default = secure.model_copy(update={"ignite_username": "ignite", "ignite_password": SecretStr("ignite")})
    _fails_fast(secure, lambda: _put_get(default), "well-known default credentials")
    dev = default.model_copy(update={"dev_mode": True})  # even when asked for, the node no longer accepts it
    _fails_fast(secure, lambda: _put_get(dev), r"refused the login of user 'ignite'")
    _fails_fast(secure, lambda: dataset_source("ANY", username="ignite", password="ignite", settings=secure)
                .partitions(), "well-known default login")
    assert retire_default_login(secure) is False  # idempotent: nothing left to retire, the login still works
    _put_get(secure)


def test_ignite_tls_mismatch_both_ways(secure):
    plain = secure.model_copy(update={"tls": False})
    _fails_fast(secure, lambda: _put_get(plain),
                r"Ignite at 127\.0\.0\.1:10900 .*the port speaks TLS; set WORKBENCH_TLS=1")
    # a TLS client against a port that answers in plain text (Triton's HTTP port stands in for a plain node)
    tls_to_plain = secure.model_copy(update={"ignite_port": secure.triton_http_port})
    _fails_fast(secure, lambda: _put_get(tls_to_plain),
                r"TLS handshake with Ignite at 127\.0\.0\.1:8100 failed.*does not speak TLS")


def test_untrusted_ca_and_missing_ca_are_refused(secure, tmp_path):
    other = ensure_certificates(secure.model_copy(update={"state_dir": tmp_path, "tls_dir": None}))
    untrusted = secure.model_copy(update={"tls_ca_file": other.ca_cert})
    _fails_fast(secure, lambda: _put_get(untrusted),
                r"cannot verify the TLS certificate of Ignite at 127\.0\.0\.1:10900")
    missing = secure.model_copy(update={"tls_ca_file": tmp_path / "nowhere.crt"})
    _fails_fast(secure, lambda: _put_get(missing), "CA file .*nowhere.crt does not exist")
    start = time.monotonic()
    with pytest.raises(InferenceError, match=r"Triton at 127\.0\.0\.1:8101.*certificate"):
        _echo(untrusted)
    assert time.monotonic() - start < secure.timeout_s + 5


def test_unreachable_ignite_fails_fast(secure):
    nobody = secure.model_copy(update={"ignite_port": DEAD_CASSANDRA_PORT})
    _fails_fast(secure, lambda: _put_get(nobody), r"cannot reach Ignite at 127\.0\.0\.1:29999: connection refused")


# ------------------------------------------------------------------------------------------------- Triton


def _echo(settings: Settings, via_proxy: bool = False) -> list[bytes]:
    """The echo model over gRPC, through workbench.serving (its client set-up and error messages)."""
    blobs = np.array([[b"hello"], [b"\x00\x01binary"]], dtype=np.object_)
    return infer(settings, "echo", {"INPUT": blobs}, "grpc", via_proxy=via_proxy)["OUTPUT"].ravel().tolist()


def test_triton_grpc_over_tls(secure):
    assert _echo(secure) == [b"hello", b"\x00\x01binary"]
    assert _echo(secure, via_proxy=True) == [b"hello", b"\x00\x01binary"]

    async def ready() -> bool:
        client = triton_client(secure, "grpc", aio=True)  # what inference sweeps use
        try:
            return await client.is_model_ready("echo")
        finally:
            await client.close()

    assert asyncio.run(ready())


def test_plain_grpc_against_the_tls_port_fails_fast(secure):
    plain = secure.model_copy(update={"tls": False})
    start = time.monotonic()
    with pytest.raises(InferenceError, match=r"Triton at 127\.0\.0\.1:8101 over grpc.*WORKBENCH_TLS") as info:
        _echo(plain)
    assert time.monotonic() - start < secure.timeout_s + 5
    assert "\n" not in str(info.value)


def test_cassandra_fetch_gets_the_tls_settings_and_never_the_keystore_password(secure):
    env = Triton(secure).launch().env
    assert env["WORKBENCH_TLS"] == "true" and env["WORKBENCH_TLS_CA_FILE"] == str(secure.ca_file())
    keystore_password = (secure.certificates_dir() / "keystore.pass").read_text().strip()
    assert keystore_password not in env.values()
    # The model really connects with TLS: to a port where nothing listens it fails with its clear error.
    with pytest.raises(InferenceError, match=rf"cannot reach Cassandra at 127\.0\.0\.1:{DEAD_CASSANDRA_PORT}"):
        infer(secure, "cassandra_fetch", pack_uuids(["00000000-0000-0000-0000-000000000001"]), "grpc")
    log = (secure.state_dir / "run" / "triton.log").read_text()
    assert f"127.0.0.1:{DEAD_CASSANDRA_PORT} table" in log and "tls: yes" in log


# -------------------------------------------------------------------------------------------------- secrets


def test_no_secret_in_the_private_stack_logs_or_files(secure, dataset):
    secret_values = [s for s in secure.secrets() if len(s) >= 8]
    assert secure.ignite_password.get_secret_value() in secret_values and len(secret_values) >= 2  # + keystore
    files = [p for p in (secure.state_dir / "run").glob("*.log")] + [
        secure.state_dir / "ignite" / "ignite.xml", *(secure.state_dir / "catalog").rglob("*")]
    assert any(f.name == "ignite.log" for f in files) and any(f.name == "triton.log" for f in files)
    leaks = [f"{f}" for f in files if f.is_file() for s in secret_values if s in f.read_text(errors="replace")]
    assert not leaks, leaks
    assert all(s not in repr(secure) for s in secret_values)


@pytest.mark.parametrize("via_proxy", [False, True])
def test_the_native_ignite_ceiling_reads_exactly_the_dataset_over_tls_with_login(secure, dataset, via_proxy):
    from workbench.bench.native_ceilings import run_native_ceiling

    name, expected, _ = dataset
    run = run_native_ceiling(secure, "ignite", {"dataset": name, "via_proxy": via_proxy, "concurrency": 3})
    assert run.counts == (len(expected), sum(map(len, expected.values())))
