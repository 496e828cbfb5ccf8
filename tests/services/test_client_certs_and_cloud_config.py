"""Client certificates and secure-connect bundles (cloud_config) against a real Cassandra (issue 16.2).

The module starts its own Cassandra on its own loopback address (127.0.0.62), ports, JMX port, state dir
and certificates, with TLS, a login and client_encryption_options.require_client_auth (settings.
cassandra_client_auth): the stack's own clients (health probe, ingest) present the stack's client
certificate, the loaders the plugin's ssl_own_certificate / ssl_own_key / ssl_own_key_pass. It stops that
node at the end; the main stack is not used.

cloud_config: a real bundle (zip of config.json, ca.crt, cert, key) and, in front of the node, what a
bundle points at in DataStax Astra: a metadata service (HTTPS, client certificate required) that names an
SNI proxy and the node's host id, and the SNI proxy (TLS with the bundle's CA, client certificate
required, the node's host id in SNI), which forwards to the node over its own TLS with the stack's client
certificate. Both drivers then run in their real cloud mode.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import ssl
import threading
import uuid
import zipfile
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID
from loader_checks import epoch
from private_stack import start
from pydantic import SecretStr

from workbench.backends.registry import make_backend
from workbench.clients import cassandra_session
from workbench.config import Settings, generated_credentials
from workbench.data import SyntheticSource
from workbench.errors import WorkbenchError
from workbench.ingest import ingest
from workbench.loaders import make_loader
from workbench.loaders.retry import is_transient
from workbench.stack import down
from workbench.stack.tls import (
    ClientCertificates,
    ensure_certificates,
    ensure_client_certificates,
    sign_client_certificate,
)

pytestmark = pytest.mark.services

HOST = "127.0.0.62"
PORTS = {
    "cassandra_port": 9362, "cassandra_storage_port": 7362, "cassandra_jmx_port": 7462,
    "s3_port": 9360, "s3_console_port": 9361, "toxiproxy_port": 9374, "proxy_cassandra_port": 19362,
    "proxy_s3_port": 19360, "proxy_ignite_port": 19380, "proxy_triton_http_port": 19381,
    "proxy_triton_grpc_port": 19382,
}
# The bundle's metadata service and SNI proxy (ephemeral ports): a DNS name, as in Astra, because the C++ driver
# checks a cloud server's certificate against the name it was given as a DNS name (an address never matches).
FRONT_HOST, FRONT_ADDRESS = "localhost", "127.0.0.1"
LOADERS = ["cassandra", "cassandra-py"]
STARTS = 3  # waits of the stack's start-up timeout for the node  # C++ driver (acsylla) and Python driver
KEY_PASS = "correct horse battery"


def _settings(root: Path) -> Settings:
    fresh = generated_credentials()
    return Settings(_env_file=None).model_copy(update={
        **PORTS, "host": HOST, "state_dir": root / "state", "tls_dir": root / "tls", "timeout_s": 10.0,
        "stack": "local", "tls": True, "dev_mode": False, "cassandra_client_auth": True,
        "cassandra_username": fresh["cassandra_username"],
        "cassandra_password": SecretStr(fresh["cassandra_password"]),
        "ignite_username": None, "ignite_password": None,
    })


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    settings = _settings(tmp_path_factory.mktemp("client-auth"))
    try:
        start(settings, ["cassandra"], attempts=STARTS)
        yield settings
    finally:
        down(settings, ["cassandra"])


@pytest.fixture(scope="module")
def source() -> SyntheticSource:
    return SyntheticSource(30, mean_kb=6, seed=7, name=f"cert-{uuid.uuid4().hex[:6]}")


@pytest.fixture(scope="module")
def expected(source) -> dict:
    return {str(s.id): (s.data, s.label) for s in source}


@pytest.fixture(scope="module")
def ingested(secure, source) -> str:
    """Written by the workbench's own clients, which present the stack's client certificate."""
    assert ingest(source, make_backend("cassandra", secure, source.name), progress=False).samples == len(source)
    return source.name


@pytest.fixture(scope="module")
def client_files(secure, tmp_path_factory) -> dict[str, str]:
    """A loader's own client certificate (signed by the stack's client CA), its key encrypted with KEY_PASS."""
    root = tmp_path_factory.mktemp("loader-cert")
    sign_client_certificate(ClientCertificates(secure.certificates_dir()), "a loader", root / "client.crt",
                            root / "client.key", key_password=KEY_PASS)
    return {"ssl_own_certificate": str(root / "client.crt"), "ssl_own_key": str(root / "client.key")}


def _exactly(items: list, expected: dict) -> None:
    assert Counter(i.key for i in items) == Counter(set(expected))
    for item in items:
        assert (item.data, item.label) == expected[item.key]


def _fails_in_one_line(fn, match: str) -> WorkbenchError:
    with pytest.raises(WorkbenchError, match=match) as caught:
        fn()
    assert "\n" not in str(caught.value)
    return caught.value


def _plugin_tls(settings: Settings) -> dict:
    """The plugin's TLS parameters without a client certificate (the stack's CA)."""
    return {"use_ssl": True, "ssl_certificate": str(settings.ca_file())}


# ---------------------------------------------------------------------------------- client certificates


def test_the_node_requires_client_certificates_signed_by_the_client_ca(secure):
    text = (secure.state_dir / "cassandra" / "conf" / "cassandra.yaml").read_text()
    assert "require_client_auth: true" in text
    assert f"truststore: {ClientCertificates(secure.certificates_dir()).truststore}" in text


@pytest.mark.parametrize("loader", LOADERS)
def test_loaders_read_with_the_plugins_client_certificate_and_encrypted_key(secure, ingested, expected,
                                                                            client_files, loader):
    items = epoch(secure, loader, ingested, **_plugin_tls(secure), **client_files, ssl_own_key_pass=KEY_PASS,
                   username=secure.cassandra_username, password=secure.cassandra_password.get_secret_value(),
                   concurrency=4, batch_size=7)
    _exactly(items, expected)


@pytest.mark.parametrize("loader", LOADERS)
def test_loaders_present_the_stacks_client_certificate_by_default(secure, ingested, expected, loader):
    _exactly(epoch(secure, loader, ingested), expected)


@pytest.mark.parametrize("loader", LOADERS)
def test_a_loader_without_a_client_certificate_is_refused_in_one_line(secure, ingested, loader):
    error = _fails_in_one_line(lambda: epoch(secure, loader, ingested, retries=0, **_plugin_tls(secure)),
                           rf"Cassandra at {HOST}:9362 requires a client certificate .*pass ssl_own_certificate "
                           "and ssl_own_key")
    assert not is_transient(error)


def test_a_stack_client_without_the_setting_is_told_to_turn_it_on(secure):
    unaware = secure.model_copy(update={"cassandra_client_auth": False})

    def query() -> None:
        with cassandra_session(unaware) as session:
            session.execute("SELECT release_version FROM system.local")

    _fails_in_one_line(query, rf"{HOST}:9362 requires a client certificate .*WORKBENCH_CASSANDRA_CLIENT_AUTH=1")


@pytest.mark.parametrize("loader", LOADERS)
def test_a_client_certificate_from_another_ca_is_refused_in_one_line(secure, ingested, tmp_path, loader):
    other = secure.model_copy(update={"tls_dir": tmp_path / "other"})
    ensure_certificates(other)
    foreign = ensure_client_certificates(other)
    _fails_in_one_line(lambda: epoch(secure, loader, ingested, retries=0, **_plugin_tls(secure),
                                  ssl_own_certificate=str(foreign.cert), ssl_own_key=str(foreign.key)),
                   rf"Cassandra at {HOST}:9362 refused the client certificate {foreign.cert}")


@pytest.mark.parametrize("loader", LOADERS)
def test_a_wrong_key_passphrase_names_the_files(secure, ingested, client_files, loader):
    _fails_in_one_line(lambda: epoch(secure, loader, ingested, **_plugin_tls(secure), **client_files,
                                  ssl_own_key_pass="not it"),
                   rf"cannot load client certificate {client_files['ssl_own_certificate']} with key .*"
                   r"wrong ssl_own_key_pass")


# --------------------------------------------------------------- cloud_config: a bundle and what it names


class _Metadata(BaseHTTPRequestHandler):
    body = b"{}"

    def do_GET(self) -> None:
        if not self.path.startswith("/metadata"):
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args) -> None:
        pass


class CloudFront:
    """The metadata service and the SNI proxy of a bundle, in front of the private node (see the module doc)."""

    def __init__(self, node: Settings, certs_dir: Path, host_id: str) -> None:
        self.node, self.host_id = node, host_id
        self.server_names: list[str | None] = []
        front = node.model_copy(update={"tls_dir": certs_dir})
        ensure_certificates(front)  # the keystore password the client truststore is written with
        self.clients = ensure_client_certificates(front)  # the bundle's client certificate and its CA
        self.ca_cert, self.server_cert, self.server_key = _front_certificate(certs_dir, host_id)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="sni-proxy", daemon=True)
        self.thread.start()
        serving = asyncio.start_server(self._forward, FRONT_ADDRESS, 0, ssl=self._server_context(record=True))
        self.proxy = asyncio.run_coroutine_threadsafe(serving, self.loop).result(10)
        self.proxy_port = self.proxy.sockets[0].getsockname()[1]
        handler = type("Metadata", (_Metadata,), {"body": json.dumps({
            "version": 1, "region": "local", "contact_info": {
                "type": "sni_proxy", "local_dc": "datacenter1", "contact_points": [host_id],
                "sni_proxy_address": f"{FRONT_HOST}:{self.proxy_port}"}}).encode()})
        self.metadata = ThreadingHTTPServer((FRONT_ADDRESS, 0), handler)
        self.metadata.socket = self._server_context().wrap_socket(self.metadata.socket, server_side=True)
        self.metadata_port = self.metadata.server_address[1]
        threading.Thread(target=self.metadata.serve_forever, name="metadata", daemon=True).start()

    def _server_context(self, record: bool = False) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.server_cert, self.server_key)
        context.load_verify_locations(self.clients.ca_cert)
        context.verify_mode = ssl.CERT_REQUIRED  # as Astra: the bundle's client certificate or nothing
        if record:
            context.sni_callback = lambda _sock, name, _ctx: self.server_names.append(name)
        return context

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One client connection to the node: only for the node's host id (SNI), over the node's own TLS."""
        if self.server_names[-1:] != [self.host_id]:
            writer.close()
            return
        upstream = ssl.create_default_context(cafile=str(self.node.ca_file()))
        upstream.load_cert_chain(*_stack_client(self.node))
        node_reader, node_writer = await asyncio.open_connection(HOST, self.node.cassandra_port, ssl=upstream)

        async def pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            with contextlib.suppress(Exception):
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            with contextlib.suppress(Exception):
                sink.close()

        await asyncio.gather(pump(reader, node_writer), pump(node_reader, writer))

    def bundle(self, path: Path, config: dict | None = None, skip: tuple[str, ...] = ()) -> Path:
        """A secure-connect bundle for this front (config.json overridable, files left out by name)."""
        config = config if config is not None else {
            "host": FRONT_HOST, "port": self.metadata_port, "keyspace": "ignored", "localDC": "datacenter1"}
        files = {"config.json": json.dumps(config).encode(), "ca.crt": self.ca_cert.read_bytes(),
                 "cert": self.clients.cert.read_bytes(), "key": self.clients.key.read_bytes()}
        with zipfile.ZipFile(path, "w") as archive:
            for name, data in files.items():
                if name not in skip:
                    archive.writestr(name, data)
        return path

    def close(self) -> None:
        self.metadata.shutdown()
        self.metadata.server_close()
        self.proxy.close()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def _front_certificate(root: Path, host_id: str) -> tuple[Path, Path, Path]:
    """The bundle's CA and the front's server certificate it signs (CA, certificate, key), for FRONT_HOST and
    the node's host id (the name in SNI)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_own = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    now = dt.datetime.now(dt.UTC)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "cloud front CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_own.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
          .not_valid_after(now + dt.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_own, hashes.SHA256()))
    names = [x509.DNSName(FRONT_HOST), x509.DNSName(host_id)]
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, FRONT_HOST)]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .sign(ca_own, hashes.SHA256()))
    ca_file, cert_file, key_file = root / "front-ca.crt", root / "front.crt", root / "front.key"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return ca_file, cert_file, key_file


def _stack_client(settings: Settings) -> tuple[str, str]:
    client = ClientCertificates(settings.certificates_dir())
    return str(client.cert), str(client.key)


@pytest.fixture(scope="module")
def cloud(secure, tmp_path_factory):
    with cassandra_session(secure) as session:
        host_id = str(session.execute("SELECT host_id FROM system.local").one()[0])
    front = CloudFront(secure, tmp_path_factory.mktemp("cloud-front"), host_id)
    try:
        yield front
    finally:
        front.close()


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize("form", ["plugin", "path"])
def test_loaders_read_through_a_secure_connect_bundle(secure, ingested, expected, cloud, tmp_path, loader, form):
    bundle = cloud.bundle(tmp_path / "secure-connect-local.zip")
    cloud_config = {"secure_connect_bundle": str(bundle)} if form == "plugin" else str(bundle)
    before = len(cloud.server_names)
    _exactly(epoch(secure, loader, ingested, cloud_config=cloud_config, concurrency=4), expected)
    assert cloud.server_names[before:] and set(cloud.server_names[before:]) == {cloud.host_id}  # SNI: the node


@pytest.mark.parametrize("loader", LOADERS)
def test_a_bundle_whose_metadata_service_is_down_fails_in_one_line(secure, ingested, cloud, tmp_path, loader):
    bundle = cloud.bundle(tmp_path / "b.zip", {"host": FRONT_HOST, "port": 1})
    _fails_in_one_line(lambda: epoch(secure, loader, ingested, cloud_config=str(bundle), retries=0),
                       rf"{FRONT_HOST}:1 \(secure-connect bundle {bundle}\)")


def test_a_bundle_missing_its_certificates_is_named_before_any_connection(secure, cloud, tmp_path):
    bundle = cloud.bundle(tmp_path / "b.zip", skip=("cert", "key"))
    for loader in LOADERS:
        _fails_in_one_line(lambda loader=loader: make_loader(loader, secure, dataset="x", cloud_config=str(bundle)),
                       rf"secure-connect bundle {bundle} lacks cert, key")
