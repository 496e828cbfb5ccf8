"""Connecting pyignite thin clients: timeouts, the configured login, TLS options, one line for every refusal.

Why one module: every Ignite client of the workbench (sync, asyncio, per-thread, IgniteDataset's) connects
through `connect_ignite`/`connect_failure`, so a refused login or TLS mismatch reads the same everywhere.
"""

from __future__ import annotations

import logging
import ssl
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from workbench.clients.endpoints import ignite_points
from workbench.clients.endpoints import where as where_of
from workbench.clients.ignite.diagnose import _ignite_connect_error
from workbench.clients.tls import CLIENT_CERT_FILE, CLIENT_KEY_FILE
from workbench.config import Settings
from workbench.errors import WorkbenchError

if TYPE_CHECKING:
    from pyignite import Client as IgniteClient

# pyignite logs a full traceback for every refused connection while a node starts; we raise our own error.
logging.getLogger("pyignite").setLevel(logging.CRITICAL)

# pyignite builds its SSLContext from ssl.PROTOCOL_TLSv1_2, which Python 3.10+ deprecates; the context is
# sound (we add the CA and CERT_REQUIRED), so that one warning, from pyignite only, is not shown.
warnings.filterwarnings("ignore", message=r"ssl\.PROTOCOL_TLSv1_2 is deprecated", category=DeprecationWarning,
                        module=r"pyignite\.connection\.ssl")


def ignite_client_auth(settings: Settings) -> bool:
    """Whether the stack's Ignite requires client certificates (settings.ignite_client_auth, with settings.tls)."""
    return settings.tls and settings.ignite_client_auth


def stack_client_certificate(settings: Settings) -> tuple[str, str] | None:
    """(certificate, key) the workbench's own Ignite clients present when the node requires client certificates
    (`workbench.stack.tls.ensure_client_certificates` writes them); None when it does not."""
    if not ignite_client_auth(settings):
        return None
    root = settings.certificates_dir()
    return str(root / CLIENT_CERT_FILE), str(root / CLIENT_KEY_FILE)


@contextmanager
def ignite_client(settings: Settings, via_proxy: bool = False, node: int | None = None) -> Iterator[IgniteClient]:
    """A connected pyignite client with the configured login and, with settings.tls, the server verified by its CA.

    It knows every server node (`ignite_points`): partition-aware (pyignite's default), a key's requests
    go to its primary node and a lost node is left for the others. `node=k` talks to local node k only
    (health probes of one node).
    """
    settings.check_credentials()
    nodes = ignite_points(settings, via_proxy)
    if node is not None:
        nodes = [nodes[node]]
    client = connect_ignite(*nodes[0], ignite_options(settings), others=nodes[1:])
    try:
        yield client
    finally:
        client.close()


def ignite_options(settings: Settings) -> dict[str, object]:
    """pyignite ``Client`` arguments from settings: timeouts always, the login and TLS when configured."""
    options: dict[str, object] = {"timeout": settings.timeout_s, "handshake_timeout": settings.timeout_s}
    if settings.ignite_username and settings.ignite_password:
        options.update(username=settings.ignite_username, password=settings.ignite_password.get_secret_value())
    if settings.tls:
        options.update(ignite_tls_options(str(settings.ca_file()), *(stack_client_certificate(settings) or ())))
    return options


def ignite_tls_options(ca_file: str | None, certfile: str | None = None, keyfile: str | None = None,
                       key_password: str | None = None) -> dict[str, object]:
    """pyignite's SSL arguments: the server verified against `ca_file` (when given), a client certificate if any.

    pyignite wraps its socket without a server name: the certificate chain is verified, the host name is not.
    """
    options: dict[str, object] = {"use_ssl": True}
    if ca_file:
        options.update(ssl_ca_certfile=ca_file, ssl_cert_reqs=ssl.CERT_REQUIRED)
    if certfile:
        options["ssl_certfile"] = certfile
    if keyfile:
        options["ssl_keyfile"] = keyfile
    if key_password:
        options["ssl_keyfile_password"] = key_password
    return options


def connect_ignite(host: str, port: int, options: dict[str, object],
                   others: Sequence[tuple[str, int]] = ()) -> IgniteClient:
    """A connected pyignite client, or one WorkbenchError line naming host:port, the cause and what to do.

    `others`: the cluster's further nodes; the client connects to every one it can reach (partition
    awareness, pyignite's default) and fails only when none answers.
    pyignite reports every failed handshake as "Can not connect."; its connection events keep the real
    cause (refused, TLS mismatch, untrusted certificate, timeout) for the message. Login and TLS failures
    are chained to a permanent error, so retry policies give up at once; "unreachable" stays transient.
    """
    from contextlib import suppress

    from pyignite import Client
    from pyignite.exceptions import AuthenticationError, ParameterError, ReconnectError

    where = where_of([(host, port), *others])
    check_tls_files(where, options)
    failures = _ignite_handshake_failures()
    client = Client(event_listeners=[failures], **options)
    try:
        client.connect([(host, port), *others])
    except (ReconnectError, AuthenticationError, ParameterError, OSError, EOFError) as exc:
        with suppress(Exception):  # closing a half-open client must not hide the real error
            client.close()
        raise connect_failure(where, options, failures, exc)  # noqa: B904 - its __cause__ is set: transient or setup
    return client


def check_tls_files(where: str, options: dict[str, object]) -> None:
    from pathlib import Path

    for name in ("ssl_ca_certfile", "ssl_certfile", "ssl_keyfile"):
        path = options.get(name)
        if path and not Path(str(path)).is_file():
            raise WorkbenchError(f"cannot connect to Ignite at {where}: TLS file {path} ({name[4:]}) does not exist")


def connect_failure(where: str, options: dict[str, object], failures: Any, exc: BaseException) -> WorkbenchError:
    """The one-line error of a failed connect (sync or asyncio client), chained so retry policies judge it."""
    from pyignite.exceptions import AuthenticationError

    failure = f"{type(exc).__name__}({exc})" if isinstance(exc, AuthenticationError) or not failures.errors \
        else failures.errors[-1]
    message, permanent = _ignite_connect_error(where, options, failure)
    error = WorkbenchError(message)
    error.__cause__ = _IgniteSetupError(failure) if permanent else exc
    return error


class _IgniteSetupError(Exception):
    """A connection failure only a settings change fixes (login, TLS): retry policies never retry it."""


def _ignite_handshake_failures():
    """A pyignite connection listener keeping each failed handshake's error (its repr, all pyignite gives)."""
    from pyignite.monitoring import ConnectionEventListener

    class HandshakeFailures(ConnectionEventListener):
        def __init__(self) -> None:
            self.errors: list[str] = []

        def on_handshake_fail(self, event) -> None:
            self.errors.append(event.error_msg)

        def on_authentication_fail(self, event) -> None:
            self.errors.append(f"AuthenticationError({event.error_msg})")

    return HandshakeFailures()
