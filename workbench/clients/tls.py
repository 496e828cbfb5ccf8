"""What every client shares about TLS: the one place an ssl.SSLContext is built (`client_context`), telling a
TLS-only port from a dead one, and one-line reasons. One builder, so every client's verify mode, host name check
and TLS versions are read in one place (tests/unit/test_one_ssl_place.py keeps it the only one)."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import ssl
import sys
import time
from pathlib import Path

from workbench.config import Settings
from workbench.errors import WorkbenchError

STACK_CA_HINT = "the local stack's is <state_dir>/tls/ca.crt"
# The stack's own client certificate (workbench.stack.tls.ensure_client_certificates writes them in the
# certificates dir): what the workbench's clients present to a Cassandra that requires client certificates.
CLIENT_CERT_FILE = "client.crt"
CLIENT_KEY_FILE = "client.key"
# TLS alerts a server sends to a client whose certificate it wants but did not get, or does not trust.
_NO_CERTIFICATE = re.compile(r"certificate[ _]required", re.IGNORECASE)
# A connection the server dropped during or right after the TLS handshake, or an alert that names no reason.
_CLOSED = re.compile(r"EOF occurred|unexpected eof|closed prematurely|unable to write to socket|reset by peer|"
                     r"was closed|connection closed|alert", re.IGNORECASE)  # alert: Java sends internal_error
_HANDSHAKE_RECORD, _CERTIFICATE_REQUEST, _SERVER_HELLO_DONE = 22, 13, 14
_BAD_CERTIFICATE = re.compile(r"bad[ _]certificate|unknown[ _]ca|certificate[ _]unknown|"
                              r"unsupported[ _]certificate|decrypt[ _]error", re.IGNORECASE)


def client_context(ca_file: str | Path | None = None, *, verify: bool = True, check_hostname: bool = True,
                   certfile: str | Path | None = None, keyfile: str | Path | None = None,
                   key_password: str | None = None,
                   maximum_version: ssl.TLSVersion | None = None) -> ssl.SSLContext:
    """A client's SSLContext (TLS 1.2 or newer, Python's PROTOCOL_TLS_CLIENT defaults), the only builder of one.

    verify: the server's certificate must chain to `ca_file` (only that CA is trusted; without one, the
    system's CAs), and with `check_hostname` its name must match the host connected to; verify=False: any
    certificate, no name check (probes, encrypt-only). certfile/keyfile/key_password: the client certificate
    presented (`present_certificate`). SSLKEYLOGFILE is honoured as ssl.create_default_context does. A file
    that cannot be loaded raises OSError or ssl.SSLError: the caller names the setting it came from.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED and check_hostname until told otherwise
    if not (verify and check_hostname):
        context.check_hostname = False
    if not verify:
        context.verify_mode = ssl.CERT_NONE
    if maximum_version is not None:
        context.maximum_version = maximum_version
    if ca_file:
        context.load_verify_locations(cafile=str(ca_file))
    elif verify:
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    if certfile:
        present_certificate(context, certfile, keyfile, key_password)
    keylog = os.environ.get("SSLKEYLOGFILE")
    if keylog and not sys.flags.ignore_environment:
        context.keylog_filename = keylog
    return context


def present_certificate(context: ssl.SSLContext, certfile: str | Path, keyfile: str | Path | None = None,
                        key_password: str | None = None) -> None:
    """Make `context` present the client certificate `certfile` with its key (`keyfile`, else in certfile)."""
    context.load_cert_chain(str(certfile), str(keyfile) if keyfile else None, password=key_password)


def client_auth_required(settings: Settings) -> bool:
    """Whether the stack's Cassandra requires client certificates (settings.cassandra_client_auth)."""
    return settings.cassandra_client_auth


def stack_client_certificate(settings: Settings) -> tuple[Path, Path] | None:
    """(certificate, key) the workbench's own clients present when the stack requires client certificates."""
    if not (settings.tls and client_auth_required(settings)):
        return None
    root = settings.certificates_dir()
    cert, key = root / CLIENT_CERT_FILE, root / CLIENT_KEY_FILE
    if not cert.is_file() or not key.is_file():
        raise WorkbenchError(
            f"the stack requires client certificates but {cert} or {key} is missing: run `workbench stack up` "
            "(it generates them) or set WORKBENCH_CASSANDRA_CLIENT_AUTH=0")
    return cert, key


LOADER_CERTIFICATE_HINT = "pass ssl_own_certificate and ssl_own_key (and ssl_own_key_pass for an encrypted key)"
STACK_CERTIFICATE_HINT = ("set WORKBENCH_CASSANDRA_CLIENT_AUTH=1: the workbench's clients then present the stack's "
                          "<tls_dir>/client.crt")


def client_certificate_problem(text: str, where: str, presented: str | None, hint: str = LOADER_CERTIFICATE_HINT,
                               endpoint: tuple[str, int] | None = None,
                               timeout_s: float = 3.0) -> WorkbenchError | None:
    """The one line for a server that refused the client's certificate (or wanted one); None otherwise.

    `text`: the driver's error; `presented`: the client certificate given (None: none was); `hint`: how
    to give one (the loaders' parameters, or the stack's setting). A server may close the connection
    without a TLS alert (Cassandra does): then, with `endpoint`, the server is asked whether it wants a
    client certificate (`asks_for_client_certificate`).
    """
    refused = bool(_BAD_CERTIFICATE.search(text) or (presented is None and _NO_CERTIFICATE.search(text)))
    reason = ssl_reason(text)
    if not refused and endpoint is not None and _CLOSED.search(text) \
            and asks_for_client_certificate(*endpoint, timeout_s):
        refused, reason = True, "it closed the connection after asking for a client certificate"
    if not refused:
        return None
    if presented is None:
        return chained(WorkbenchError(f"Cassandra at {where} requires a client certificate ({reason}): {hint}"),
                       None)
    return chained(WorkbenchError(
        f"Cassandra at {where} refused the client certificate {presented} ({reason}): give one signed by a CA "
        "in the server's client_encryption_options.truststore"), None)


def asks_for_client_certificate(host: str, port: int, timeout_s: float) -> bool:
    """Whether host:port asks TLS clients for a certificate: a CertificateRequest among the server's first
    TLS 1.2 handshake messages (TLS 1.2 sends them in clear). Only called on a failed connect."""
    context = client_context(verify=False, maximum_version=ssl.TLSVersion.TLSv1_2)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing)
    with contextlib.suppress(ssl.SSLWantReadError):  # the ClientHello waits in `outgoing`
        tls.do_handshake()
    received = b""
    deadline = time.monotonic() + timeout_s
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as raw:
            raw.sendall(outgoing.read())
            while _SERVER_HELLO_DONE not in handshake_types(received) and time.monotonic() < deadline:
                chunk = raw.recv(65536)
                if not chunk:
                    break
                received += chunk
    except OSError:
        pass
    return _CERTIFICATE_REQUEST in handshake_types(received)


def handshake_types(data: bytes) -> list[int]:
    """The types of the complete handshake messages in a stream of TLS records (plain ones only)."""
    handshake = b""
    while len(data) >= 5 and len(data) >= 5 + (length := int.from_bytes(data[3:5], "big")):
        if data[0] == _HANDSHAKE_RECORD:
            handshake += data[5:5 + length]
        data = data[5 + length:]
    types = []
    while len(handshake) >= 4 and len(handshake) >= 4 + (length := int.from_bytes(handshake[1:4], "big")):
        types.append(handshake[0])
        handshake = handshake[4 + length:]
    return types

def speaks_tls(host: str, port: int, timeout_s: float) -> bool:
    """Whether host:port completes a TLS handshake (certificate not checked): tells a TLS-only server
    that dropped a plain client from a server that is down. Only called on a failed connect."""
    context = client_context(verify=False)
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as raw, context.wrap_socket(raw):
            return True
    except OSError:  # ssl.SSLError included
        return False

def chained(error: WorkbenchError, cause: BaseException | None) -> WorkbenchError:
    """`error` caused by `cause`; None: a permanent error that retry policies must not see as transient."""
    error.__cause__ = cause
    error.__suppress_context__ = True
    return error

def verify_reason(text: str) -> str:
    reason = text.split("certificate verify failed:", 1)[-1].split("(_ssl")[0].strip(" )")
    return reason or "untrusted certificate"

def ssl_reason(text: str) -> str:
    found = re.search(r"\[SSL: ([A-Z0-9_]+)\]|(wrong version number|record layer failure|unexpected eof|"
                      r"(?:tlsv1[0-9]*|sslv3) alert [a-z ]*[a-z])", text, re.IGNORECASE)
    return (found.group(1) or found.group(2)) if found else text.splitlines()[0][:120]
