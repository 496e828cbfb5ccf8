"""pyignite thin clients with timeouts, the configured login and SSL; one clear line for every refusal."""

from __future__ import annotations

import contextlib
import logging
import re
import ssl
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import TYPE_CHECKING, Any

from workbench.clients.tls import speaks_tls
from workbench.config import DEFAULT_CREDENTIALS, Settings
from workbench.errors import WorkbenchError

if TYPE_CHECKING:
    from pyignite import Client
    from pyignite import Client as IgniteClient

_PARTS = re.compile(r"parts=(\d+)")  # the partition count in SYS.CACHES.AFFINITY


# pyignite logs a full traceback for every refused connection while a node starts; we raise our own error.
logging.getLogger("pyignite").setLevel(logging.CRITICAL)

# pyignite builds its SSLContext from ssl.PROTOCOL_TLSv1_2, which Python 3.10+ deprecates; the context is
# sound (we add the CA and CERT_REQUIRED), so that one warning, from pyignite only, is not shown.
warnings.filterwarnings("ignore", message=r"ssl\.PROTOCOL_TLSv1_2 is deprecated", category=DeprecationWarning,
                        module=r"pyignite\.connection\.ssl")

@contextmanager
def ignite_client(settings: Settings, via_proxy: bool = False) -> Iterator[IgniteClient]:
    """A connected pyignite client with the configured login and, with settings.tls, the server verified by its CA."""
    settings.check_credentials()
    client = connect_ignite(settings.host, settings.port("ignite", via_proxy), ignite_options(settings))
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
        options.update(ignite_tls_options(str(settings.ca_file())))
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

def connect_ignite(host: str, port: int, options: dict[str, object]) -> IgniteClient:
    """A connected pyignite client, or one WorkbenchError line naming host:port, the cause and what to do.

    pyignite reports every failed handshake as "Can not connect."; its connection events keep the real
    cause (refused, TLS mismatch, untrusted certificate, timeout) for the message. Login and TLS failures
    are chained to a permanent error, so retry policies give up at once; "unreachable" stays transient.
    """
    from contextlib import suppress
    from pathlib import Path

    from pyignite import Client
    from pyignite.exceptions import AuthenticationError, ParameterError, ReconnectError

    where = f"{host}:{port}"
    for name in ("ssl_ca_certfile", "ssl_certfile", "ssl_keyfile"):
        path = options.get(name)
        if path and not Path(str(path)).is_file():
            raise WorkbenchError(f"cannot connect to Ignite at {where}: TLS file {path} ({name[4:]}) does not exist")
    failures = _ignite_handshake_failures()
    client = Client(event_listeners=[failures], **options)
    try:
        client.connect(host, port)
    except (ReconnectError, AuthenticationError, ParameterError, OSError, EOFError) as exc:
        with suppress(Exception):  # closing a half-open client must not hide the real error
            client.close()
        failure = f"{type(exc).__name__}({exc})" if isinstance(exc, AuthenticationError) or not failures.errors \
            else failures.errors[-1]
        message, permanent = _ignite_connect_error(where, options, failure)
        raise WorkbenchError(message) from (_IgniteSetupError(failure) if permanent else exc)
    return client

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

def _ignite_connect_error(where: str, options: dict[str, object], failure: str) -> tuple[str, bool]:
    """(one line saying why connecting to Ignite failed and what to do, whether retrying is pointless).

    `failure` is the repr of the handshake's error, e.g. "SSLCertVerificationError(1, '[SSL: ...] ...')".
    A TLS mismatch is reported only when the port itself confirms it (a plain port never completes a TLS
    handshake; a network fault, e.g. a toxiproxy reset, cannot make one complete): anything else stays a
    transient failure that retry policies may retry.
    """
    kind = failure.split("(", 1)[0]
    reason = failure[len(kind) + 1:-1].strip() if failure.endswith(")") else failure
    reason = (re.sub(r"^\d+, ", "", reason).strip("'\"") or kind)[:200]
    tls = bool(options.get("use_ssl"))
    closed = kind in ("OSError", "SocketError", "ConnectionResetError", "EOFError", "BrokenPipeError")
    if kind == "AuthenticationError":
        user = options.get("username")
        if not user:
            return (f"Ignite at {where} requires a login ({reason}): set WORKBENCH_IGNITE_USERNAME and "
                    "WORKBENCH_IGNITE_PASSWORD (`workbench init` generates them)"), True
        return (f"Ignite at {where} refused the login of user '{user}' ({reason}): wrong user name or password; "
                "check WORKBENCH_IGNITE_USERNAME / WORKBENCH_IGNITE_PASSWORD (or the loader's username/password)"), True
    if kind == "SSLCertVerificationError":
        return (f"cannot verify the TLS certificate of Ignite at {where} ({reason}) with CA file "
                f"{options.get('ssl_ca_certfile')}: set WORKBENCH_TLS_CA_FILE to the CA that signed it"), True
    host, port = where.rsplit(":", 1)
    timeout_s = float(str(options.get("handshake_timeout") or 5))
    if tls and kind.startswith("SSL") and not speaks_tls(host, int(port), min(timeout_s, 5.0)):
        return (f"TLS handshake with Ignite at {where} failed ({reason}): the server does not speak TLS on that "
                "port; set WORKBENCH_TLS to match the server (or enable SSL on its client connector)"), True
    if closed and not tls and speaks_tls(host, int(port), min(timeout_s, 5.0)):
        return (f"Ignite at {where} closed the connection during the handshake ({reason}): the port speaks TLS; "
                "set WORKBENCH_TLS=1 (and WORKBENCH_TLS_CA_FILE to its CA)"), True
    if kind == "ConnectionRefusedError":
        return (f"cannot reach Ignite at {where}: connection refused; is the stack up? (`workbench stack status`)",
                False)
    if kind in ("TimeoutError", "timeout"):
        return (f"cannot reach Ignite at {where}: no answer within {options.get('handshake_timeout')} s; "
                "is the stack up? (`workbench stack status`)"), False
    return (f"cannot reach Ignite at {where}: {kind}: {reason}; is the stack up? (`workbench stack status`)",
            False)


# ------------------------------------------------------- endpoints, per-thread clients, caches and partitions


@dataclass(frozen=True)
class Endpoint:
    """Where and how to connect (picklable; each connection is opened by the thread that uses it).

    TLS is on with `tls` (the server verified against `ca_file`) or with a client certificate
    (`certfile`, `keyfile`, `cert_password`: IgniteDataset's parameters). Secrets stay out of repr().
    """

    host: str
    port: int
    timeout_s: float = 10.0
    username: str | None = None
    password: str | None = dataclass_field(default=None, repr=False)
    certfile: str | None = None
    keyfile: str | None = None
    cert_password: str | None = dataclass_field(default=None, repr=False)
    tls: bool = False
    ca_file: str | None = None
    dev_mode: bool = False

    @property
    def where(self) -> str:
        return f"{self.host}:{self.port}"

    def client_kwargs(self) -> dict[str, Any]:
        """pyignite ``Client`` arguments: timeouts always, credentials and SSL when given."""
        kwargs: dict[str, Any] = {"timeout": self.timeout_s, "handshake_timeout": self.timeout_s}
        if self.username:
            kwargs["username"] = self.username
            kwargs["password"] = self.password or ""
        if self.tls or self.certfile or self.keyfile:
            kwargs.update(ignite_tls_options(self.ca_file, self.certfile, self.keyfile, self.cert_password))
        return kwargs

    def connect(self) -> Client:
        """A connected client, or a WorkbenchError naming host:port (bounded by the timeouts)."""
        if not self.dev_mode and (self.username, self.password) == DEFAULT_CREDENTIALS["ignite"]:
            raise WorkbenchError(
                f"Ignite at {self.where}: refusing the well-known default login '{self.username}': use the generated "
                "one (`workbench init`), or set WORKBENCH_DEV_MODE=1 on a private machine"
            )
        return connect_ignite(self.host, self.port, self.client_kwargs())


def settings_endpoint(settings: Settings, via_proxy: bool = False, **overrides: Any) -> Endpoint:
    """The endpoint of the workbench's Ignite (through toxiproxy with `via_proxy`): login and TLS from settings."""
    settings.check_credentials()
    password = settings.ignite_password.get_secret_value() if settings.ignite_password else None
    values: dict[str, Any] = {"host": settings.host, "port": settings.port("ignite", via_proxy),
                              "timeout_s": settings.timeout_s, "username": settings.ignite_username,
                              "password": password, "tls": settings.tls, "dev_mode": settings.dev_mode,
                              "ca_file": ca_file_of(settings)}
    values.update({k: v for k, v in overrides.items() if v is not None})
    return Endpoint(**values)


def ca_file_of(settings: Settings) -> str | None:
    """The CA that verifies the server: the stack's with settings.tls, else WORKBENCH_TLS_CA_FILE if set (used
    when a client certificate turns TLS on; without either, as TF's IgniteDataset, the server is not verified)."""
    if settings.tls:
        return str(settings.ca_file())
    return str(settings.tls_ca_file) if settings.tls_ca_file else None


class ThreadClients:
    """One client per thread (pyignite clients are not thread-safe), all closed together."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.local = threading.local()
        self.lock = threading.Lock()
        self.clients: list[Client] = []

    def get(self) -> Client:
        client = getattr(self.local, "client", None)
        if client is None:
            client = self.endpoint.connect()
            self.local.client = client
            with self.lock:
                self.clients.append(client)
        return client

    def discard(self) -> None:
        """Forget this thread's client after a failure, so the next call reconnects."""
        client = getattr(self.local, "client", None)
        if client is not None:
            self.local.client = None
            with self.lock:
                if client in self.clients:
                    self.clients.remove(client)
            close_quietly(client)

    def close(self) -> None:
        with self.lock:
            clients, self.clients = self.clients, []
        for client in clients:
            close_quietly(client)


def close_quietly(client: Client) -> None:
    with contextlib.suppress(Exception):  # closing a broken connection must not hide the real error
        client.close()


def ignite_errors() -> tuple[type[BaseException], ...]:
    """What pyignite raises for server-side failures, lost connections and protocol trouble."""
    from pyignite.exceptions import CacheError, ParameterError, ParseError, ReconnectError, connection_errors

    return (CacheError, ParameterError, ParseError, ReconnectError, *connection_errors)


def require_cache(client: Client, cache_name: str, where: str, hint: str = "") -> None:
    names = client.get_cache_names()
    if cache_name not in names:
        known = ", ".join(sorted(n for n in names if not n.startswith("ignite-sys")))[:300] or "none"
        raise WorkbenchError(
            f"Ignite cache {cache_name} does not exist at {where} (caches: {known})"
            + (f": {hint}" if hint else "")
        )


def partition_count(client: Client, cache_name: str, fallback: int | None = None) -> int:
    """Partitions of a cache: the affinity mapping (what partition awareness uses), else SYS.CACHES."""
    from pyignite.api.affinity import cache_get_node_partitions
    from pyignite.utils import cache_id

    cid = cache_id(cache_name)
    try:
        result = cache_get_node_partitions(client.random_node, cid)
        if result.status == 0:
            mapping = result.value["partition_mapping"].get(cid) or {}
            if mapping.get("number_of_partitions"):
                return int(mapping["number_of_partitions"])
    except ignite_errors():
        pass
    try:
        with client.sql("SELECT AFFINITY FROM SYS.CACHES WHERE CACHE_NAME = ?", query_args=[cache_name]) as cur:
            rows = list(cur)
        if rows and (m := _PARTS.search(str(rows[0][0]))):
            return int(m.group(1))
    except ignite_errors():
        pass
    if fallback:
        return fallback
    raise WorkbenchError(f"cannot learn the partition count of Ignite cache {cache_name}")


def scan_cursor(client: Client, cache_name: str, page_size: int, partition: int, local: bool):
    return client.get_cache(cache_name).scan(page_size=page_size, partitions=partition, local=local)
