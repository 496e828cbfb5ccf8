"""An Ignite node that requires client certificates (sslClientAuth), read with IgniteDataset's ``certfile``,
``keyfile`` and ``cert_password`` through the compat API, the ``ignite`` loader, checkpoints and ``ignite://``.

A private node on its own loopback address (127.0.0.62), state, certificates and login (tls=True,
ignite_client_auth=True): the stack's own clients present its client certificate; a client without one,
with an untrusted one or with the wrong key password gets one line. Stopped afterwards.
"""

from __future__ import annotations

import secrets
import time

import pytest
from ignite_cluster import cluster_settings
from private_stack import running
from pydantic import SecretStr

from workbench.backends.registry import make_backend
from workbench.checkpoints.ignite import IgniteCheckpoint
from workbench.clients.ignite import ignite_client, settings_endpoint
from workbench.compat.ignite_dataset import IgniteDataset, dataset_source
from workbench.config import Settings
from workbench.data import SyntheticSource
from workbench.errors import WorkbenchError
from workbench.ingest import ingest
from workbench.loaders import make_loader
from workbench.stack.tls import Certificates, ClientCertificates, sign_client_certificate
from workbench.storage.ignite_fs import IgniteFileSystem

pytestmark = [pytest.mark.services, pytest.mark.slow,
              pytest.mark.filterwarnings("ignore:ssl.PROTOCOL_TLSv1_2 is deprecated:DeprecationWarning")]

HOST = "127.0.0.62"


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    root = tmp_path_factory.mktemp("ignite-client-cert")
    settings = cluster_settings(root, nodes=1, host=HOST, ignite_backups=0, tls=True, tls_dir=None, tls_ca_file=None,
                                ignite_client_auth=True, ignite_password=SecretStr(secrets.token_urlsafe(24)))
    with running(settings, ["ignite"]) as ready:
        yield ready


@pytest.fixture(scope="module")
def dataset(node):
    """40 samples ingested by the stack's own clients (they present <tls_dir>/client.crt)."""
    source = SyntheticSource(40, mean_kb=6, seed=5, name=f"tcert{secrets.token_hex(3)}")
    backend = make_backend("ignite", node, source.name, batch_size=16, workers=2)
    ingest(source, backend, progress=False)
    yield source.name, backend.cache_name, {str(s.id): s.data for s in source}
    backend.drop()


@pytest.fixture(scope="module")
def own_cert(node, tmp_path_factory):
    """A user's client certificate signed by the node's client CA, its key encrypted: (certfile, keyfile, password)."""
    folder = tmp_path_factory.mktemp("mine")
    password = secrets.token_urlsafe(12)
    sign_client_certificate(ClientCertificates(node.certificates_dir()), "a user", folder / "client.pem",
                            folder / "client.key", key_password=password)
    return str(folder / "client.pem"), str(folder / "client.key"), password


@pytest.fixture(scope="module")
def without(node) -> Settings:
    """The same TLS settings, but the workbench presents no certificate of its own."""
    return node.model_copy(update={"ignite_client_auth": False})


def _one_line(call, match: str, timeout_s: float = 15.0) -> str:
    start = time.monotonic()
    with pytest.raises(WorkbenchError, match=match) as info:
        call()
    assert time.monotonic() - start < timeout_s + 5
    assert "\n" not in str(info.value)
    return str(info.value)


def test_the_node_requires_client_certificates_and_the_stack_presents_its_own(node, dataset):
    xml = (node.state_dir / "ignite" / "ignite.xml").read_text()
    assert '<property name="sslClientAuth" value="true"/>' in xml
    assert str(ClientCertificates(node.certificates_dir()).truststore) in xml
    with ignite_client(node) as client:
        assert dataset[1] in client.get_cache_names()


def test_ignite_dataset_reads_with_certfile_keyfile_and_cert_password(without, dataset, own_cert):
    _, cache, expected = dataset
    certfile, keyfile, password = own_cert
    source = dataset_source(cache, certfile=certfile, keyfile=keyfile, cert_password=password, settings=without)
    assert password not in repr(source.endpoint)
    assert {key: bytes(value.data) for key, value in source.entries()} == expected
    elements = IgniteDataset(cache, certfile=certfile, keyfile=keyfile, cert_password=password, page_size=7,
                             settings=without)
    assert {e["key"].numpy().decode(): e["val"]["data"].numpy() for e in elements} == expected


@pytest.mark.parametrize("options", [{"mode": "get_all"}, {"mode": "scan"}, {"client": "sync"}])
def test_the_ignite_loader_reads_with_a_client_certificate(without, dataset, own_cert, options):
    name, _, expected = dataset
    certfile, keyfile, password = own_cert
    with make_loader("ignite", without, dataset=name, certfile=certfile, keyfile=keyfile, cert_password=password,
                     **options) as loader:
        assert {item.key: item.data for item in loader} == expected


def test_checkpoints_and_ignite_files_with_a_client_certificate(without, own_cert):
    certfile, keyfile, password = own_cert
    endpoint = settings_endpoint(without, certfile=certfile, keyfile=keyfile, cert_password=password)
    store = IgniteCheckpoint(endpoint=endpoint, cache_name="CERT_CKPT", chunk_bytes=1000)
    try:
        with store.writer("run/epoch1") as f:
            f.write(b"weights" * 700)
        assert store.reader("run/epoch1").read() == b"weights" * 700
        fs = IgniteFileSystem(without, certfile=certfile, keyfile=keyfile, cert_password=password, chunk_bytes=1000)
        assert fs.cat_file("ignite://CERT_CKPT/run/epoch1") == b"weights" * 700  # the same file, two APIs
        assert fs.ls("CERT_CKPT/run", detail=False) == ["CERT_CKPT/run/epoch1"]
    finally:
        store.drop()


def test_a_client_without_a_certificate_is_refused_in_one_line(without, dataset):
    name, cache, _ = dataset
    where = rf"Ignite at {HOST}:10800 requires a client certificate .*: pass certfile and keyfile"
    _one_line(lambda: dataset_source(cache, settings=without).partitions(), where)
    _one_line(lambda: list(make_loader("ignite", without, dataset=name)), where)
    with pytest.raises(WorkbenchError, match=where), ignite_client(without):
        pass


def test_an_untrusted_certificate_and_a_wrong_key_password_are_one_line(node, without, dataset, own_cert):
    _, cache, _ = dataset
    stack = Certificates(node.certificates_dir())  # the server's own certificate: signed by another CA
    _one_line(lambda: dataset_source(cache, certfile=str(stack.server_cert), keyfile=str(stack.server_key),
                                     settings=without).partitions(),
              rf"Ignite at {HOST}:10800 refused the client certificate .*server.crt")
    certfile, keyfile, _ = own_cert
    message = _one_line(lambda: dataset_source(cache, certfile=certfile, keyfile=keyfile, cert_password="wrong",
                                               settings=without).partitions(), "wrong cert_password")
    assert "wrong" not in message.replace("wrong cert_password", "")
