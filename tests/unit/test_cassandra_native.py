"""The native Cassandra loader's pure parts: a missing driver, which errors are retried, TLS settings to the driver.

Against the servers it runs in tests/services/test_loader_cassandra.py (and the contract and security tests).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from workbench.config import Settings
from workbench.errors import WorkbenchError
from workbench.loaders import make_loader
from workbench.loaders.cassandra_config import CassandraConfig
from workbench.stack.tls import ensure_certificates

acsylla = pytest.importorskip("acsylla")

from workbench.loaders import cassandra_native  # noqa: E402 - after the driver check


def _settings(tmp_path: Path, **update) -> Settings:
    return Settings(_env_file=None, state_dir=tmp_path / "state", tls_dir=tmp_path / "tls", **update)


def test_a_missing_driver_names_the_package_and_the_install_command(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "acsylla", None)  # import acsylla -> ImportError
    with pytest.raises(WorkbenchError) as error:
        make_loader("cassandra", _settings(tmp_path), dataset="d")
    assert "acsylla" in str(error.value) and "pip install acsylla" in str(error.value)
    assert "\n" not in str(error.value)


def test_network_failures_are_transient_and_refusals_are_not():
    errors = acsylla.errors
    assert cassandra_native.transient(errors.CassErrorLibNoHostsAvailable("No hosts available"))
    assert cassandra_native.transient(errors.CassErrorLibRequestTimedOut("Request timed out"))
    assert cassandra_native.transient(errors.CassErrorServerUnavailable("Unavailable"))
    wrapped = WorkbenchError("cannot reach Cassandra at 127.0.0.1:1")
    wrapped.__cause__ = errors.CassErrorLibNoHostsAvailable("connection refused")
    assert cassandra_native.transient(wrapped)
    assert not cassandra_native.transient(errors.CassErrorServerBadCredentials("Bad credentials"))
    assert not cassandra_native.transient(errors.CassErrorServerInvalidQuery("keyspace x does not exist"))
    assert not cassandra_native.transient(WorkbenchError("sample x not found in table ks.data_train"))


def test_connect_errors_read_like_the_python_loaders(tmp_path):
    errors = acsylla.errors
    where, first = "127.0.0.1:9042", ("127.0.0.1", 1)

    def line(exc: BaseException) -> str:
        return str(cassandra_native.connect_error(exc, where, True, 1.0, first))

    login = line(errors.CassErrorServerBadCredentials(
        "Bad credentials: Underlying connection error: Received error response 'Provided username u and/or "
        "password are incorrect' (0x02000100)"))
    assert login == ("Cassandra at 127.0.0.1:9042 refused the login (Provided username u and/or password are "
                     "incorrect): check WORKBENCH_CASSANDRA_USERNAME and WORKBENCH_CASSANDRA_PASSWORD "
                     "(environment or .env)")
    assert line(errors.CassErrorSslInvalidPeerCert("Invalid peer certificate")).startswith(
        "cannot verify the TLS certificate of Cassandra at 127.0.0.1:9042")
    assert "does not speak TLS there" in line(errors.CassErrorSslProtocolError(
        "Protocol error: Underlying connection error: Error during SSL handshake: wrong version number"))
    unreachable = cassandra_native.connect_error(
        errors.CassErrorLibNoHostsAvailable("No hosts available: Connect error 'connection refused'"),
        where, True, 1.0, first)
    assert str(unreachable).startswith("cannot reach Cassandra at 127.0.0.1:9042") and cassandra_native.transient(
        unreachable)


class _Recorder:
    """Stands in for an acsylla cluster where only the TLS call is of interest."""

    def __init__(self) -> None:
        self.ssl: tuple | None = None
        self.hostname_resolution = False

    def set_ssl(self, *args) -> None:
        self.ssl = args

    def set_hostname_resolution(self, enabled: bool) -> None:
        self.hostname_resolution = enabled


def test_tls_settings_reach_the_driver(tmp_path):
    settings = _settings(tmp_path, tls=True)
    certs = ensure_certificates(settings)
    ca, cert, key = str(certs.ca_cert), str(certs.server_cert), str(certs.server_key)

    stack_tls = _Recorder()  # settings.tls: the stack's CA, the server's address checked
    cassandra_native._configure_tls(stack_tls, settings, CassandraConfig(dataset="d"))
    assert stack_tls.ssl == (True, None, None, "", Path(ca).read_text(), 1 | 2)
    by_name = _Recorder()
    cassandra_native._configure_tls(by_name, settings, CassandraConfig(dataset="d", cassandra_ips=["localhost"]))
    assert by_name.ssl[-1] == 1 | 4 and by_name.hostname_resolution

    plugin_style = _Recorder()  # the plugin's parameters: the certificate verified, no identity check; client auth
    config = CassandraConfig(dataset="d", use_ssl=True, ssl_certificate=ca, ssl_own_certificate=cert,
                             ssl_own_key=key)
    cassandra_native._configure_tls(plugin_style, settings, config)
    assert plugin_style.ssl == (True, Path(cert).read_text(), Path(key).read_text(), "", Path(ca).read_text(), 1)
    encrypt_only = _Recorder()
    cassandra_native._configure_tls(encrypt_only, settings, CassandraConfig(dataset="d", use_ssl=True))
    assert encrypt_only.ssl == (True, None, None, "", None, 0)
    off = _Recorder()
    cassandra_native._configure_tls(off, settings, CassandraConfig(dataset="d", use_ssl=False))
    assert off.ssl is None


def test_the_driver_accepts_the_certificates_and_a_mismatched_key_is_one_clear_line(tmp_path):
    settings = _settings(tmp_path, tls=True)
    certs = ensure_certificates(settings)
    other = ensure_certificates(_settings(tmp_path / "other", tls=True))

    async def configure(config: CassandraConfig) -> None:
        cluster = acsylla.create_cluster([settings.host])  # a real driver cluster (it needs a running loop)
        cassandra_native._configure_tls(cluster, settings, config)

    good = CassandraConfig(dataset="d", use_ssl=True, ssl_certificate=str(certs.ca_cert),
                           ssl_own_certificate=str(certs.server_cert), ssl_own_key=str(certs.server_key))
    asyncio.run(configure(good))
    mismatched = good.model_copy(update={"ssl_own_key": str(other.server_key)})
    with pytest.raises(WorkbenchError) as error:
        asyncio.run(configure(mismatched))
    assert str(error.value).startswith(f"cannot load client certificate {certs.server_cert} with key "
                                       f"{other.server_key}") and "\n" not in str(error.value)
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("not a certificate")
    with pytest.raises(WorkbenchError, match=f"cannot load ssl_certificate {not_pem}"):
        asyncio.run(configure(good.model_copy(update={"ssl_certificate": str(not_pem)})))


def test_an_auto_window_has_room_for_a_whole_window_of_completions(tmp_path):
    """Completions of an "auto" window come in bursts of up to its widest depth; room for `prefetch_buffers`
    batches only stalled the readers at every burst, and a stalled window measures nothing. A number keeps
    `prefetch_buffers` (its window measures nothing anyway)."""
    from workbench.concurrency import AUTO_CAP

    auto = make_loader("cassandra", _settings(tmp_path), dataset="d", batch_size=32, prefetch_buffers=2)
    fixed = make_loader("cassandra", _settings(tmp_path), dataset="d", batch_size=32, prefetch_buffers=2,
                        concurrency=64)
    assert auto._slots() * 32 >= AUTO_CAP + 2 * 32 and fixed._slots() == 2
