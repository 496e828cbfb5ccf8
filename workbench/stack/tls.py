"""TLS material for the local stack: one private CA and one server certificate for the stack's host.

Why generated here: the servers run as local processes (or in compose) and need a certificate that
clients can verify, without a public CA and without committing keys. Everything lands in
`Settings.certificates_dir()` (private keys and the keystore password mode 600), in the formats each
server reads: PEM for MinIO and Triton, PKCS#12 keystore and truststore for Cassandra and Ignite.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from workbench.clients.tls import CLIENT_CERT_FILE, CLIENT_KEY_FILE
from workbench.config import Settings

VALID_DAYS = 365


class InFolder:
    """A file of a certificates folder, by name: ``Certificates(root).ca_cert`` is ``root / "ca.crt"``."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, folder: Folder, owner: type | None = None) -> Path:
        return folder.root / self.name


@dataclass(frozen=True)
class Folder:
    """A folder of TLS material: `root`, and the files its subclasses name with `InFolder`."""

    root: Path


class Certificates(Folder):
    """Paths of the stack's TLS material (see `ensure_certificates`)."""

    ca_cert = InFolder("ca.crt")
    server_cert = InFolder("server.crt")
    server_key = InFolder("server.key")
    keystore = InFolder("server.p12")  # PKCS#12: server key and chain (Cassandra, Ignite)
    truststore = InFolder("truststore.p12")  # PKCS#12: the CA only (Java peers verify with it)
    keystore_password_file = InFolder("keystore.pass")

    def keystore_password(self) -> str:
        return self.keystore_password_file.read_text().strip()

    def complete(self) -> bool:
        files = (self.ca_cert, self.server_cert, self.server_key, self.keystore, self.truststore,
                 self.keystore_password_file)
        return all(f.is_file() for f in files)


def ensure_certificates(settings: Settings, extra_hosts: tuple[str, ...] = ()) -> Certificates:
    """The stack's certificates, generated once (a CA, then a server certificate it signs).

    The server certificate names localhost, 127.0.0.1, settings.host and `extra_hosts` (compose's
    service names, which the containers use to reach each other); it is made anew when one is missing.
    """
    certs = Certificates(settings.certificates_dir())
    hosts = (settings.host, *extra_hosts)
    if certs.complete() and all(_covers(certs.server_cert, host) for host in hosts):
        return certs
    certs.root.mkdir(parents=True, exist_ok=True)
    certs.root.chmod(0o700)
    ca_key = _new_key()
    ca = _certificate(_name("workbench local CA"), ca_key, _name("workbench local CA"), ca_key, is_ca=True)
    server_key = _new_key()
    server = _certificate(_name(settings.host), server_key, ca.subject, ca_key, is_ca=False, hosts=hosts)
    password = secrets.token_urlsafe(18)

    _write(certs.ca_cert, ca.public_bytes(serialization.Encoding.PEM))
    _write(certs.server_cert, server.public_bytes(serialization.Encoding.PEM)
           + ca.public_bytes(serialization.Encoding.PEM))
    _write(certs.server_key, server_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()), private=True)
    encryption = serialization.BestAvailableEncryption(password.encode())
    _write(certs.keystore, pkcs12.serialize_key_and_certificates(
        b"workbench", server_key, server, [ca], encryption), private=True)
    _write(certs.truststore, pkcs12.serialize_java_truststore([pkcs12.PKCS12Certificate(ca, b"workbench-ca")],
                                                              encryption))
    _write(certs.keystore_password_file, password.encode() + b"\n", private=True)
    return certs


def _covers(cert_file: Path, host: str) -> bool:
    """True when the certificate names `host` and stays valid for another day."""
    cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
    if cert.not_valid_after_utc < dt.datetime.now(dt.UTC) + dt.timedelta(days=1):
        return False
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return host in [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] + names.get_values_for_type(
        x509.DNSName)


def _new_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "workbench"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _certificate(subject: x509.Name, key: rsa.RSAPrivateKey, issuer: x509.Name, issuer_key: rsa.RSAPrivateKey,
                 is_ca: bool, hosts: tuple[str, ...] = ()) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(key.public_key())
               .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
               .not_valid_after(now + dt.timedelta(days=VALID_DAYS))
               .add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True))
    if is_ca:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
            key_encipherment=False, data_encipherment=False, key_agreement=False, encipher_only=False,
            decipher_only=False), critical=True)
    else:
        names: list[x509.GeneralName] = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        for host in hosts:
            try:
                name: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host))
            except ValueError:
                name = x509.DNSName(host)
            if name not in names:
                names.append(name)
        builder = (builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                         ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
    return builder.sign(issuer_key, hashes.SHA256())


def _write(path: Path, data: bytes, private: bool = False) -> None:
    path.touch(mode=0o600 if private else 0o644, exist_ok=True)
    path.chmod(0o600 if private else 0o644)
    path.write_bytes(data)


# ------------------------------------------------- client certificates (issue 16.2; kept apart from the above)


class ClientCertificates(Folder):
    """Paths of the client-certificate material (see `ensure_client_certificates`)."""

    ca_cert = InFolder("client-ca.crt")  # signs client certificates; servers that require them trust it
    ca_key = InFolder("client-ca.key")
    cert = InFolder(CLIENT_CERT_FILE)
    key = InFolder(CLIENT_KEY_FILE)
    # PKCS#12 holding only the client CA, under the stack's keystore password (Cassandra's truststore)
    truststore = InFolder("client-truststore.p12")


def ensure_client_certificates(settings: Settings) -> ClientCertificates:
    """A client CA, a client certificate it signs (the workbench's own clients present it) and a truststore
    with that CA for servers that require client certificates (Cassandra's require_client_auth).

    Why a CA of its own: the stack CA's key is not kept once it signed the server certificate. The CA and
    the certificate are made once; the truststore is rewritten every time, under the current keystore
    password (`ensure_certificates` makes a new one when it renews the server certificate). Needs
    `ensure_certificates` first.
    """
    certs = Certificates(settings.certificates_dir())
    client = ClientCertificates(certs.root)
    if not all(p.is_file() for p in (client.ca_cert, client.ca_key, client.cert, client.key)) or _expiring(client.cert):
        ca_key = _new_key()
        ca = _certificate(_name("workbench client CA"), ca_key, _name("workbench client CA"), ca_key, is_ca=True)
        key = _new_key()
        cert = _certificate(_name("workbench client"), key, ca.subject, ca_key, is_ca=False)
        _write(client.ca_key, _pem_key(ca_key), private=True)
        _write(client.ca_cert, ca.public_bytes(serialization.Encoding.PEM))
        _write(client.key, _pem_key(key), private=True)
        _write(client.cert, cert.public_bytes(serialization.Encoding.PEM))
    ca = x509.load_pem_x509_certificate(client.ca_cert.read_bytes())
    encryption = serialization.BestAvailableEncryption(certs.keystore_password().encode())
    _write(client.truststore, pkcs12.serialize_java_truststore(
        [pkcs12.PKCS12Certificate(ca, b"workbench-client-ca")], encryption))
    return client


def sign_client_certificate(client: ClientCertificates, common_name: str, cert_path: Path, key_path: Path,
                            key_password: str | None = None) -> None:
    """Another client certificate signed by the client CA (PEM files; the key encrypted with `key_password`)."""
    ca_key = serialization.load_pem_private_key(client.ca_key.read_bytes(), None)
    assert isinstance(ca_key, rsa.RSAPrivateKey)
    ca = x509.load_pem_x509_certificate(client.ca_cert.read_bytes())
    key = _new_key()
    cert = _certificate(_name(common_name), key, ca.subject, ca_key, is_ca=False)
    _write(cert_path, cert.public_bytes(serialization.Encoding.PEM))
    _write(key_path, _pem_key(key, key_password), private=True)


def _pem_key(key: rsa.RSAPrivateKey, password: str | None = None) -> bytes:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode()) if password else serialization.NoEncryption())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)


def _expiring(cert_file: Path) -> bool:
    cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
    return cert.not_valid_after_utc < dt.datetime.now(dt.UTC) + dt.timedelta(days=1)
