"""cloud_config (a secure-connect bundle) without a server: malformed bundles are one line naming the file and
what is wrong, and the parameters a bundle replaces are refused beside it (reading through a bundle:
tests/services/test_client_certs_and_cloud_config.py)."""

from __future__ import annotations

import json
import zipfile

import pytest
from cryptography.hazmat.primitives import serialization
from pydantic import SecretStr

from workbench.clients.cassandra_connection import login_of, tls_of, where_of
from workbench.clients.cloud_bundle import read_bundle
from workbench.config import Settings
from workbench.errors import WorkbenchError
from workbench.loaders import make_loader
from workbench.loaders.cassandra_config import CassandraConfig
from workbench.stack.tls import ensure_certificates

CONFIG = {"host": "db.example", "port": 29080, "keyspace": "ks", "localDC": "dc1"}


@pytest.fixture(scope="module")
def pem(tmp_path_factory) -> dict[str, bytes]:
    certs = ensure_certificates(Settings(_env_file=None, state_dir=tmp_path_factory.mktemp("bundle-tls")))
    key = serialization.load_pem_private_key(certs.server_key.read_bytes(), None)
    return {"ca.crt": certs.ca_cert.read_bytes(), "cert": certs.server_cert.read_bytes(),
            "key": key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                     serialization.NoEncryption())}


def _bundle(path, pem, config=CONFIG, skip=(), replace=None):
    files = {"config.json": config if isinstance(config, bytes) else json.dumps(config).encode(), **pem,
             **(replace or {})}
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            if name not in skip:
                archive.writestr(name, data)
    return path


def test_a_good_bundle_is_read(tmp_path, pem):
    bundle = read_bundle({"secure_connect_bundle": str(_bundle(tmp_path / "b.zip", pem))})
    assert (bundle.host, bundle.port, bundle.keyspace, bundle.local_dc, bundle.has_login) == (
        "db.example", 29080, "ks", "dc1", False)
    assert bundle.metadata_url() == "https://db.example:29080/metadata"
    assert read_bundle(str(tmp_path / "b.zip")) == bundle  # the bare path too


@pytest.mark.parametrize(("make", "message"), [
    (lambda p, pem: p, r"secure-connect bundle .*missing\.zip does not exist"),
    (lambda p, pem: p.write_bytes(b"PK not really a zip") and p, r"bundle .*b\.zip is not a zip file"),
    (lambda p, pem: _bundle(p, pem, skip=("config.json",)), r"b\.zip lacks config\.json at its top level"),
    (lambda p, pem: _bundle(p, pem, skip=("ca.crt", "key")), r"b\.zip lacks ca\.crt, key at its top level"),
    (lambda p, pem: _bundle(p, pem, replace={"cert": b"not a certificate"}), r"b\.zip: cert is not PEM"),
    (lambda p, pem: _bundle(p, pem, config=b"{not json"), r"b\.zip: config\.json is not JSON"),
    (lambda p, pem: _bundle(p, pem, config=[1, 2]), r"config\.json is not a JSON object"),
    (lambda p, pem: _bundle(p, pem, config={"port": 1}), r"config\.json has no 'host'"),
    (lambda p, pem: _bundle(p, pem, config={"host": "h", "port": "x"}), r"config\.json has no valid 'port'.*'x'"),
])
def test_a_malformed_bundle_is_one_line_naming_the_file(tmp_path, pem, make, message):
    path = tmp_path / ("missing.zip" if "missing" in message else "b.zip")
    path = make(path, pem)
    with pytest.raises(WorkbenchError, match=message) as caught:
        read_bundle({"secure_connect_bundle": str(path)})
    assert "\n" not in str(caught.value)


def test_a_cloud_config_without_the_bundle_key_says_which_key(tmp_path):
    with pytest.raises(WorkbenchError, match="needs 'secure_connect_bundle'"):
        make_loader("cassandra-py", Settings(_env_file=None), dataset="d", cloud_config={"bundle": "x.zip"})


@pytest.mark.parametrize("loader", ["cassandra", "cassandra-py"])
def test_loaders_check_the_bundle_before_any_connection(tmp_path, pem, loader):
    broken = _bundle(tmp_path / "b.zip", pem, skip=("key",))
    with pytest.raises(WorkbenchError, match=r"b\.zip lacks key"):
        make_loader(loader, Settings(_env_file=None), dataset="d", cloud_config=str(broken))


@pytest.mark.parametrize("other", [{"cassandra_ips": ["10.0.0.1"]}, {"cassandra_port": 9042}, {"use_ssl": True},
                                   {"via_proxy": True}])
def test_a_bundle_replaces_contact_points_port_and_tls(tmp_path, pem, other):
    with pytest.raises(WorkbenchError, match="cloud_config replaces"):
        make_loader("cassandra-py", Settings(_env_file=None), dataset="d",
                    cloud_config=str(_bundle(tmp_path / "b.zip", pem)), **other)


def test_the_plugin_loader_refuses_a_bundle_it_cannot_hand_on(tmp_path, pem):
    from workbench.loaders.cassandra_plugin import CassandraPluginConfig

    with pytest.raises(ValueError, match="use loader 'cassandra' or 'cassandra-py'"):
        CassandraPluginConfig(dataset="d", cloud_config=str(_bundle(tmp_path / "b.zip", pem)))


def test_with_a_bundle_tls_login_and_messages_follow_the_bundle(tmp_path, pem):
    settings = Settings(_env_file=None).model_copy(update={"cassandra_username": "local",
                                                           "cassandra_password": SecretStr("local-pw"), "tls": False})
    plain = CassandraConfig(dataset="d", cloud_config=str(_bundle(tmp_path / "b.zip", pem)))
    assert tls_of(settings, plain) == (True, None)
    assert where_of(settings, plain) == f"db.example:29080 (secure-connect bundle {tmp_path / 'b.zip'})"
    assert login_of(settings, plain) == ("local", "local-pw")  # no login in the bundle: the settings'
    with_login = CassandraConfig(dataset="d", cloud_config=str(_bundle(
        tmp_path / "l.zip", pem, config={**CONFIG, "username": "astra", "password": "pw"})))
    assert login_of(settings, with_login) is None  # the drivers log in with the bundle's own
    given = with_login.model_copy(update={"username": "me", "password": SecretStr("my-pw")})
    assert login_of(settings, given) == ("me", "my-pw")
