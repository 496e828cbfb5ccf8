"""Client certificates (issue 16.2) without a server: the stack's material, the node's yaml, who presents
which certificate, and the one-line messages for refused clients (the servers are tested in
tests/services/test_client_certs_and_cloud_config.py)."""

from __future__ import annotations

import ssl
import stat

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import load_pem_private_key, pkcs12
from pydantic import SecretStr

from workbench.clients.cassandra import cassandra_ssl_context, stack_tls
from workbench.clients.cassandra_connection import own_certificate, ssl_context
from workbench.clients.tls import client_certificate_problem, handshake_types, stack_client_certificate
from workbench.config import Settings
from workbench.errors import WorkbenchError
from workbench.loaders.cassandra_config import CassandraConfig
from workbench.stack.cassandra import Cassandra
from workbench.stack.tls import (
    ClientCertificates,
    ensure_certificates,
    ensure_client_certificates,
    sign_client_certificate,
)

WHERE = "127.0.0.62:9362"


def _settings(tmp_path, **update) -> Settings:
    values = {"state_dir": tmp_path / "state", "tls": True, "cassandra_username": "workbench",
              "cassandra_password": SecretStr("pw" * 12), "cassandra_client_auth": True, **update}
    return Settings(_env_file=None).model_copy(update=values)


@pytest.fixture
def secure(tmp_path) -> Settings:
    settings = _settings(tmp_path)
    ensure_certificates(settings)
    ensure_client_certificates(settings)
    return settings


def test_the_client_ca_signs_the_client_certificate_and_the_truststore_holds_only_that_ca(secure):
    client = ClientCertificates(secure.certificates_dir())
    ca = x509.load_pem_x509_certificate(client.ca_cert.read_bytes())
    cert = x509.load_pem_x509_certificate(client.cert.read_bytes())
    cert.verify_directly_issued_by(ca)
    assert stat.S_IMODE(client.key.stat().st_mode) == 0o600 and stat.S_IMODE(client.ca_key.stat().st_mode) == 0o600
    stored = pkcs12.load_pkcs12(client.truststore.read_bytes(), secure.certificates_dir().joinpath(
        "keystore.pass").read_text().strip().encode())
    assert [c.certificate for c in stored.additional_certs] == [ca]


def test_client_certificates_are_made_once_and_the_truststore_follows_the_keystore_password(secure):
    client = ClientCertificates(secure.certificates_dir())
    cert = client.cert.read_bytes()
    (secure.certificates_dir() / "keystore.pass").write_text("another-password\n")
    ensure_client_certificates(secure)
    assert client.cert.read_bytes() == cert
    pkcs12.load_pkcs12(client.truststore.read_bytes(), b"another-password")  # readable with the new one


def test_a_signed_client_key_is_encrypted_with_its_passphrase(secure, tmp_path):
    sign_client_certificate(ClientCertificates(secure.certificates_dir()), "x", tmp_path / "c.crt", tmp_path / "c.key",
                            key_password="secret words")
    with pytest.raises(TypeError):  # encrypted: no key without the passphrase
        load_pem_private_key((tmp_path / "c.key").read_bytes(), None)
    load_pem_private_key((tmp_path / "c.key").read_bytes(), b"secret words")


def test_the_yaml_requires_client_certificates_only_when_asked(secure):
    text = Cassandra(secure).yaml()
    truststore = ClientCertificates(secure.certificates_dir()).truststore
    assert "require_client_auth: true" in text and f"truststore: {truststore}" in text
    assert text.index("require_client_auth") > text.index("client_encryption_options")
    relaxed = Cassandra(secure.model_copy(update={"cassandra_client_auth": False})).yaml()
    assert "require_client_auth: false" in relaxed and "truststore" not in relaxed


def test_the_stacks_own_clients_present_the_stack_certificate_only_with_client_auth(secure):
    client = ClientCertificates(secure.certificates_dir())
    assert stack_client_certificate(secure) == (client.cert, client.key)
    assert stack_tls(secure).own_certificate == str(client.cert)
    assert isinstance(cassandra_ssl_context(secure), ssl.SSLContext)
    unaware = secure.model_copy(update={"cassandra_client_auth": False})
    assert stack_client_certificate(unaware) is None and stack_tls(unaware).own_certificate is None


def test_missing_stack_client_files_say_how_to_make_them(secure):
    ClientCertificates(secure.certificates_dir()).key.unlink()
    with pytest.raises(WorkbenchError, match=r"client\.key is missing: run `workbench stack up`"):
        stack_client_certificate(secure)


def test_loaders_present_their_own_certificate_else_the_stacks_when_tls_is_left_to_the_stack(secure, tmp_path):
    client = ClientCertificates(secure.certificates_dir())
    assert own_certificate(secure, CassandraConfig(dataset="d")) == (str(client.cert), str(client.key), None)
    sign_client_certificate(client, "x", tmp_path / "c.crt", tmp_path / "c.key", key_password="pp")
    given = CassandraConfig(dataset="d", use_ssl=True, ssl_own_certificate=str(tmp_path / "c.crt"),
                            ssl_own_key=str(tmp_path / "c.key"), ssl_own_key_pass="pp")
    assert own_certificate(secure, given) == (str(tmp_path / "c.crt"), str(tmp_path / "c.key"), "pp")
    assert ssl_context(secure, given) is not None
    assert own_certificate(secure, CassandraConfig(dataset="d", use_ssl=True)) is None  # the plugin's way: explicit
    wrong = given.model_copy(update={"ssl_own_key_pass": SecretStr("nope")})
    with pytest.raises(WorkbenchError, match=r"client certificate .*c\.crt with key .*wrong ssl_own_key_pass"):
        ssl_context(secure, wrong)


@pytest.mark.parametrize("text", [
    "[SSL: TLSV13_ALERT_CERTIFICATE_REQUIRED] tlsv13 alert certificate required (_ssl.c:2580)",
    "Underlying connection error: Received error response 'error:0A000412:SSL routines::sslv3 alert bad certificate'",
])
def test_a_server_wanting_a_certificate_is_one_line_naming_the_loader_parameters(text):
    error = client_certificate_problem(text, WHERE, None)
    assert error is not None and error.__cause__ is None  # permanent: never retried
    assert str(error).startswith(f"Cassandra at {WHERE} requires a client certificate (")
    assert "pass ssl_own_certificate and ssl_own_key" in str(error) and "\n" not in str(error)
    assert "ALERT" in str(error) or "alert" in str(error)  # the server's reason, short


def test_a_refused_certificate_names_the_file_and_other_errors_are_left_alone():
    error = client_certificate_problem("[SSL: TLSV1_ALERT_UNKNOWN_CA] tlsv1 alert unknown ca", WHERE, "/c/client.crt")
    assert error is not None and "refused the client certificate /c/client.crt (TLSV1_ALERT_UNKNOWN_CA)" in str(error)
    assert client_certificate_problem("[SSL: WRONG_VERSION_NUMBER] wrong version number", WHERE, None) is None
    assert client_certificate_problem("Connection refused", WHERE, "/c/client.crt") is None


def _record(kind: int, payload: bytes) -> bytes:
    return bytes([kind, 3, 3]) + len(payload).to_bytes(2, "big") + payload


def _message(kind: int, body: bytes = b"x") -> bytes:
    return bytes([kind]) + len(body).to_bytes(3, "big") + body


def test_handshake_types_reads_messages_across_records_and_stops_at_a_partial_one():
    flight = _message(2, b"hello") + _message(11, b"c" * 40) + _message(13) + _message(14, b"")
    stream = _record(22, flight[:20]) + _record(22, flight[20:]) + _record(21, b"\x02\x28")
    assert handshake_types(stream) == [2, 11, 13, 14]
    assert handshake_types(stream[:-3]) == [2, 11, 13, 14]  # a cut alert record is ignored
    assert handshake_types(_record(22, flight[:20])) == [2]  # the certificate is not complete yet
    assert handshake_types(b"HTTP/1.1 400 Bad Request\r\n") == []
