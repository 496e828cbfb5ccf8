"""pyignite thin clients with timeouts, the configured login and SSL; one clear line for every refusal."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import ssl
import struct
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import TYPE_CHECKING, Any

from workbench.clients.endpoints import ignite_points
from workbench.clients.endpoints import where as where_of
from workbench.clients.tls import CLIENT_CERT_FILE, CLIENT_KEY_FILE, speaks_tls
from workbench.config import DEFAULT_CREDENTIALS, Settings
from workbench.errors import WorkbenchError

if TYPE_CHECKING:
    from pyignite import Client
    from pyignite import Client as IgniteClient

log = logging.getLogger(__name__)

_PARTS = re.compile(r"parts=(\d+)")  # the partition count in SYS.CACHES.AFFINITY
# TLS alerts of a node that wants a client certificate and got none, or does not trust the one it got.
_NO_CERTIFICATE = re.compile(r"certificate[ _]required", re.IGNORECASE)
_BAD_CERTIFICATE = re.compile(r"bad[ _]certificate|unknown[ _]ca|certificate[ _]unknown|unsupported[ _]certificate",
                              re.IGNORECASE)
_KEY_FILE_PROBLEM = re.compile(r"PEM lib|bad decrypt|BAD_DECRYPT|KEY_VALUES_MISMATCH|key values mismatch")
CERTIFICATE_HINT = ("pass certfile and keyfile (IgniteDataset's and the ignite loader's parameters; cert_password for "
                    "an encrypted key), or set WORKBENCH_IGNITE_CLIENT_AUTH=1 so the workbench presents the stack's "
                    "<tls_dir>/client.crt")

# Cache templates of the stack's node configuration (`workbench.stack.ignite`): a cache created BY NAME whose
# name starts with `partition_template(n, b)` gets RendezvousAffinityFunction(false, n) and b backups (a thin
# client cannot send an affinity function; the Ignite article's way to choose partitions is a template).
PARTITION_TEMPLATES = tuple(2**k for k in range(16))  # 1 .. 32768 partitions
DEFAULT_PARTITIONS = 1024  # RendezvousAffinityFunction's default: what a cache made without a template gets


def partition_template(partitions: int, backups: int) -> str:
    """The name prefix of the node's cache template with `partitions` partitions and `backups` backups."""
    return f"WB_P{partitions}_B{backups}_"


def template_backups(settings: Settings) -> range:
    """Backups the node's templates are made for: every useful count on this cluster, and the configured one."""
    return range(max(settings.ignite_nodes, settings.ignite_backups + 1))


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
OP_CLUSTER_GROUP_GET_NODE_IDS = 5100  # Ignite's ClientMessageParser; not among pyignite's op codes


# pyignite logs a full traceback for every refused connection while a node starts; we raise our own error.
logging.getLogger("pyignite").setLevel(logging.CRITICAL)

# pyignite builds its SSLContext from ssl.PROTOCOL_TLSv1_2, which Python 3.10+ deprecates; the context is
# sound (we add the CA and CERT_REQUIRED), so that one warning, from pyignite only, is not shown.
warnings.filterwarnings("ignore", message=r"ssl\.PROTOCOL_TLSv1_2 is deprecated", category=DeprecationWarning,
                        module=r"pyignite\.connection\.ssl")

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


def server_node_count(client: IgniteClient) -> int:
    """How many server nodes the cluster of `client` has now: the thin protocol's cluster-group request for
    the server nodes' ids (the Java thin client's ``ClientCluster.forServers().nodes()``; pyignite has none).
    It answers on an inactive cluster too, where SQL (SYS.NODES) does not."""
    from pyignite.datatypes import Bool, Int, Long, Short
    from pyignite.queries import Query, query_perform

    # topology version -1: always answer; one projection item, kind 2 (server or client nodes), true: servers
    fields = [("top_ver", Long), ("items", Int), ("kind", Short), ("servers", Bool)]
    result = query_perform(Query(OP_CLUSTER_GROUP_GET_NODE_IDS, fields), client.random_node,
                           query_params={"top_ver": -1, "items": 1, "kind": 2, "servers": True},
                           response_config=[("changed", Bool), ("top_ver", Long), ("count", Int)])
    if result.status != 0:
        raise WorkbenchError(f"Ignite could not list its server nodes: {str(result.message).splitlines()[0][:200]}")
    return int(result.value["count"])


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
    certfile = options.get("ssl_certfile")
    if certfile is not None and _KEY_FILE_PROBLEM.search(reason):
        return (f"cannot use the client certificate {certfile} / key {options.get('ssl_keyfile') or certfile} "
                f"for Ignite at {where} ({reason}): wrong cert_password for an encrypted key, or a key that "
                "does not match the certificate"), True
    alert = bool(_NO_CERTIFICATE.search(reason) or _BAD_CERTIFICATE.search(reason))  # the server spoke TLS
    if tls and alert:
        return _certificate_refused(where, certfile, reason), True
    if kind == "SSLCertVerificationError":
        return (f"cannot verify the TLS certificate of Ignite at {where} ({reason}) with CA file "
                f"{options.get('ssl_ca_certfile')}: set WORKBENCH_TLS_CA_FILE to the CA that signed it"), True
    host, port = where.split(", ")[0].rsplit(":", 1)  # the first node
    timeout_s = float(str(options.get("handshake_timeout") or 5))
    if tls and kind.startswith("SSL") and not speaks_tls(host, int(port), min(timeout_s, 5.0)):
        return (f"TLS handshake with Ignite at {where} failed ({reason}): the server does not speak TLS on that "
                "port; set WORKBENCH_TLS to match the server (or enable SSL on its client connector)"), True
    if closed and not tls and speaks_tls(host, int(port), min(timeout_s, 5.0)):
        return (f"Ignite at {where} closed the connection during the handshake ({reason}): the port speaks TLS; "
                "set WORKBENCH_TLS=1 (and WORKBENCH_TLS_CA_FILE to its CA)"), True
    # A node with sslClientAuth closes the connection without a TLS alert: only a probe tells why.
    if tls and (kind.startswith("SSL") or closed) and wants_client_certificate(host, int(port), min(timeout_s, 3.0)):
        return _certificate_refused(where, certfile, reason), True
    if kind == "ConnectionRefusedError":
        return (f"cannot reach Ignite at {where}: connection refused; is the stack up? (`workbench stack status`)",
                False)
    if kind in ("TimeoutError", "timeout"):
        return (f"cannot reach Ignite at {where}: no answer within {options.get('handshake_timeout')} s; "
                "is the stack up? (`workbench stack status`)"), False
    return (f"cannot reach Ignite at {where}: {kind}: {reason}; is the stack up? (`workbench stack status`)",
            False)


def _certificate_refused(where: str, certfile: object, reason: str) -> str:
    if certfile is None:
        return f"Ignite at {where} requires a client certificate ({reason}): {CERTIFICATE_HINT}"
    return (f"Ignite at {where} refused the client certificate {certfile} ({reason}): give one signed by a CA in "
            "the node's trust store (sslContextFactory trustStore)")


def wants_client_certificate(host: str, port: int, timeout_s: float) -> bool:
    """Whether the TLS server at host:port refuses a connection that presents no client certificate.

    A server that requires one refuses the handshake (TLS 1.2 asks during it) or, with TLS 1.3, closes the
    connection right after it (Ignite sends no alert: the client sees only an EOF); any other server waits
    for the client to speak. The server's certificate is not checked here: this only explains a failure.
    """
    import socket

    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((host, port), timeout_s) as raw, \
                context.wrap_socket(raw, suppress_ragged_eofs=False) as conn:
            conn.settimeout(timeout_s)
            try:
                return conn.recv(1) == b""
            except TimeoutError:
                return False
            except (ssl.SSLError, ConnectionError):
                return True
    except ssl.SSLError:
        return True
    except OSError:
        return False


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
    others: tuple[tuple[str, int], ...] = ()  # the cluster's further nodes (host, port): see `connect_ignite`

    @property
    def where(self) -> str:
        return where_of([(self.host, self.port), *self.others])

    def client_kwargs(self) -> dict[str, Any]:
        """pyignite ``Client`` arguments: timeouts always, credentials and SSL when given."""
        kwargs: dict[str, Any] = {"timeout": self.timeout_s, "handshake_timeout": self.timeout_s}
        if self.username:
            kwargs["username"] = self.username
            kwargs["password"] = self.password or ""
        if self.tls or self.certfile or self.keyfile:
            kwargs.update(ignite_tls_options(self.ca_file, self.certfile, self.keyfile, self.cert_password))
        return kwargs

    def check_login(self) -> None:
        if not self.dev_mode and (self.username, self.password) == DEFAULT_CREDENTIALS["ignite"]:
            raise WorkbenchError(
                f"Ignite at {self.where}: refusing the well-known default login '{self.username}': use the generated "
                "one (`workbench init`), or set WORKBENCH_DEV_MODE=1 on a private machine"
            )

    def connect(self) -> Client:
        """A connected client, or a WorkbenchError naming host:port (bounded by the timeouts)."""
        self.check_login()
        return connect_ignite(self.host, self.port, self.client_kwargs(), self.others)

    async def connect_aio(self, partition_aware: bool = False) -> Any:
        """A connected pyignite AioClient (on the running loop), or the same WorkbenchError lines as `connect`."""
        from pyignite import AioClient
        from pyignite.exceptions import AuthenticationError, ParameterError, ReconnectError

        self.check_login()
        options = self.client_kwargs()
        check_tls_files(self.where, options)
        failures = _ignite_handshake_failures()
        use_framed_protocol()
        # AioClient has no socket timeout: every request is bounded by asyncio.wait_for instead
        client = AioClient(partition_aware=partition_aware, event_listeners=[failures],
                           **{k: v for k, v in options.items() if k != "timeout"})
        try:
            await asyncio.wait_for(client.connect([(self.host, self.port), *self.others]), self.timeout_s)
        except (TimeoutError, ReconnectError, AuthenticationError, ParameterError, OSError, EOFError) as exc:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client.close(), self.timeout_s)
            raise connect_failure(self.where, options, failures, exc)  # noqa: B904 - its __cause__ is set: transient or setup
        return client


def settings_endpoint(settings: Settings, via_proxy: bool = False, **overrides: Any) -> Endpoint:
    """The endpoint of the workbench's Ignite, every node of it (through each node's toxiproxy path with
    `via_proxy`): login and TLS from settings (and the stack's client certificate when the node requires one,
    unless `certfile`/`keyfile` are given). A `host` or `port` override names one server only."""
    settings.check_credentials()
    password = settings.ignite_password.get_secret_value() if settings.ignite_password else None
    (host, port), *others = ignite_points(settings, via_proxy)
    if overrides.get("host") is not None or overrides.get("port") is not None:
        others = []
    values: dict[str, Any] = {"host": host, "port": port, "others": tuple(others),
                              "timeout_s": settings.timeout_s, "username": settings.ignite_username,
                              "password": password, "tls": settings.tls, "dev_mode": settings.dev_mode,
                              "ca_file": ca_file_of(settings)}
    stack_cert = stack_client_certificate(settings)
    if stack_cert and overrides.get("certfile") is None and overrides.get("keyfile") is None:
        values["certfile"], values["keyfile"] = stack_cert  # the node requires one: the stack's own
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


SCAN_ATTEMPTS = 5  # full scans of a cache before a short one is an error
SCAN_PAUSE_S = 1.0  # between them: partitions moving to a node that (re)joined settle within seconds


def scan_whole(client: Client, cache_name: str, where: str, scan: Callable[[], int],
               attempts: int = SCAN_ATTEMPTS, pause_s: float = SCAN_PAUSE_S,
               sleep: Callable[[float], None] = time.sleep) -> None:
    """Run `scan` (a full scan of the cache, started afresh on each call, returning how many entries it saw)
    until it saw at least the cache's size (primary copies, asked after each scan); a WorkbenchError when it
    stays short.

    Why: a scan query over a cluster can miss partitions that move between nodes after one (re)joined; once,
    under CI's load, a loader listed 151 of 300 ids right after a node restart and silently read half an
    epoch. More entries than the size is fine (written meanwhile). Costs one size request per scan.
    """
    seen = size = 0
    for attempt in range(attempts):
        if attempt:
            sleep(pause_s)
        seen = scan()
        size = client.get_cache(cache_name).get_size()
        if seen >= size:
            return
        log.warning("a scan of Ignite cache %s at %s saw %d of its %d entries: scanning it again", cache_name,
                    where, seen, size)
    raise WorkbenchError(
        f"Ignite cache {cache_name} at {where} holds {size} entries but the last of {attempts} scans of it saw {seen}: "
        "its partitions are still moving between nodes (one joined or left?); try again once the cluster has "
        "rebalanced (`workbench stack status`)")


# ------------------------------------------------- get_all without pyignite's per-object decoding (the hot path)
#
# pyignite builds ctypes types for every binary object it reads (~1 ms of CPU per 110 KB sample, most of a
# core at a few hundred samples/s). `FastGetAll` sends the same OP_CACHE_GET_ALL request pyignite builds,
# and reads the answer with struct and memoryview slices: only the fields a loader needs (id, split, label,
# data) are decoded, the byte arrays copied once. Anything it does not know (an error answer, another key
# or field type, nested objects) makes it return None, and the caller asks pyignite's own get_all instead:
# unusual data and server errors keep pyignite's behaviour and our existing messages.

_WANTED = ("split", "label", "data")
_HAS_SCHEMA, _OFFSET_1, _OFFSET_2, _COMPACT = 0x02, 0x08, 0x10, 0x20
_INTS = {1: "<b", 2: "<h", 3: "<i", 4: "<q"}  # byte, short, int, long objects
_STRING, _BYTES, _NULL, _WRAPPED, _COMPLEX = 9, 12, 101, 27, 103


class Fields:
    """The fields a loader reads from a sample object (what `field()` of the loaders looks up by name)."""

    __slots__ = ("data", "label", "split")

    def __init__(self, split: str | None, label: int | bytes | None, data: bytes | None) -> None:
        self.split, self.label, self.data = split, label, data


class FastGetAll:
    """Requests and answers of OP_CACHE_GET_ALL for one pyignite client (sync or asyncio).

    Field names come from the object's schema; with compact footers (the default) the schema is the
    client's binary type registry, asked once per (type, schema) (`learn`).
    """

    def __init__(self) -> None:
        self.names: dict[tuple[int, int], tuple[str, ...] | None] = {}

    @staticmethod
    def request(client: Any, cache_info: Any, keys: list[str]) -> tuple[int, bytes]:
        """(query id, request bytes) of a get_all, built by pyignite's own query classes."""
        from pyignite.datatypes import AnyDataArray
        from pyignite.queries import Query
        from pyignite.queries.op_codes import OP_CACHE_GET_ALL
        from pyignite.stream import BinaryStream

        query = Query(OP_CACHE_GET_ALL, [("cache_info", type(cache_info)), ("keys", AnyDataArray())])
        with BinaryStream(client) as stream:
            query.from_python(stream, {"cache_info": cache_info, "keys": keys})
            return query.query_id, stream.getvalue()

    def unknown(self, answer: bytes | bytearray) -> set[tuple[int, int]]:
        """(type id, schema id) of the objects in `answer` whose field names are not known yet."""
        found: set[tuple[int, int]] = set()
        with contextlib.suppress(_Unusual, struct.error, IndexError):
            for _, start, _ in self._entries(memoryview(answer)):
                ids = _ids_of(memoryview(answer), start)
                if ids is not None and ids not in self.names:
                    found.add(ids)
        return found

    def learn(self, ids: tuple[int, int], names: tuple[str, ...] | None) -> None:
        self.names[ids] = names

    def parse(self, answer: bytes | bytearray) -> dict[str, Fields] | None:
        """{key: Fields} of a get_all answer, or None when pyignite must decode it (see above)."""
        view = memoryview(answer)
        try:
            return {key: self._fields(view, start) for key, start, _ in self._entries(view)}
        except (_Unusual, struct.error, IndexError, UnicodeDecodeError):
            return None

    @staticmethod
    def _entries(view: memoryview) -> Iterator[tuple[str, int, int]]:
        """(key, start of the value object, its end) of every entry; raises _Unusual on anything unexpected."""
        pos = _payload_start(view)
        (count,) = struct.unpack_from("<i", view, pos)
        pos += 4
        for _ in range(count):
            if view[pos] != _STRING:
                raise _Unusual
            (n,) = struct.unpack_from("<i", view, pos + 1)
            key = str(view[pos + 5:pos + 5 + n], "utf-8")
            pos += 5 + n
            code = view[pos]
            if code == _WRAPPED:  # byte array length, the object(s), offset of the value inside
                (n,) = struct.unpack_from("<i", view, pos + 1)
                (offset,) = struct.unpack_from("<i", view, pos + 5 + n)
                start, pos = pos + 5 + offset, pos + 9 + n
                if view[start] != _COMPLEX:
                    raise _Unusual
                yield key, start, start + struct.unpack_from("<i", view, start + 12)[0]
            elif code == _COMPLEX:
                (n,) = struct.unpack_from("<i", view, pos + 12)
                yield key, pos, pos + n
                pos += n
            else:
                raise _Unusual

    def _fields(self, view: memoryview, start: int) -> Fields:
        (flags,) = struct.unpack_from("<h", view, start + 2)
        length, schema_id, schema_offset = struct.unpack_from("<iii", view, start + 12)
        (type_id,) = struct.unpack_from("<i", view, start + 4)
        if not flags & _HAS_SCHEMA:
            raise _Unusual
        size = 1 if flags & _OFFSET_1 else 2 if flags & _OFFSET_2 else 4
        fmt = {1: "<B", 2: "<H", 4: "<i"}[size]
        offsets: dict[str, int] = {}
        if flags & _COMPACT:
            names = self.names.get((type_id, schema_id))
            if names is None:
                raise _Unusual
            for i, name in enumerate(names):
                if name.lower() in _WANTED:  # SQL columns are upper-case
                    offsets[name.lower()] = struct.unpack_from(fmt, view, start + schema_offset + i * size)[0]
        else:
            ids = {_field_id(n): n for n in _WANTED}
            pos, end = start + schema_offset, start + length
            while pos + 4 + size <= end:
                (fid,) = struct.unpack_from("<i", view, pos)
                if fid in ids:
                    offsets[ids[fid]] = struct.unpack_from(fmt, view, pos + 4)[0]
                pos += 4 + size
        values = {name: _value(view, start + off) for name, off in offsets.items()}
        data = values.get("data")
        if data is not None and not isinstance(data, bytes):
            raise _Unusual
        return Fields(values.get("split"), values.get("label"), data)


class _Unusual(Exception):
    """Something FastGetAll does not decode: pyignite does."""


def _payload_start(view: memoryview) -> int:
    """Where an answer's payload starts: length int32, query id int64, flags int16 (protocol >= 1.4), then after
    an affinity topology change its version (int64 + minor int32); _Unusual for an error answer (pyignite
    raises its own error for it)."""
    (flags,) = struct.unpack_from("<h", view, 12)
    if flags & 1:
        raise _Unusual
    return 14 + (12 if flags & 2 else 0)


def _ids_of(view: memoryview, start: int) -> tuple[int, int] | None:
    (flags,) = struct.unpack_from("<h", view, start + 2)
    if not flags & _COMPACT:
        return None
    return struct.unpack_from("<i", view, start + 4)[0], struct.unpack_from("<i", view, start + 16)[0]


def _value(view: memoryview, pos: int) -> Any:
    return _scalar(view, pos)[0]


def _scalar(view: memoryview, pos: int) -> tuple[Any, int]:
    """(value, position after it) of a byte array, string, null or integer object; _Unusual for others."""
    code = view[pos]
    if code == _BYTES:
        (n,) = struct.unpack_from("<i", view, pos + 1)
        return bytes(view[pos + 5:pos + 5 + n]), pos + 5 + n
    if code == _STRING:
        (n,) = struct.unpack_from("<i", view, pos + 1)
        return str(view[pos + 5:pos + 5 + n], "utf-8"), pos + 5 + n
    if code == _NULL:
        return None, pos + 1
    if code in _INTS:
        return struct.unpack_from(_INTS[code], view, pos + 1)[0], pos + 1 + struct.calcsize(_INTS[code])
    raise _Unusual


# ------------------------------------------------------ scans of small entries without pyignite's ctypes types
#
# pyignite reads a scan page by building one ctypes structure type for the whole page, a field per key and
# value: listing 20,000 sample ids at 5,000 a page peaked at ~50 MB of Python objects, which the process kept
# as RSS (most of the loader's growth from 2,000 to 20,000 samples, issue 13). `scan_scalars` sends pyignite's
# own OP_QUERY_SCAN requests and reads the pages with struct: the ids and splits and nothing else.


class UnusualScan(Exception):
    """An entry `scan_scalars` does not read (not a string, bytes, null or integer), or an error answer: ask
    pyignite's own scan, which decodes anything and raises its own errors."""


def scan_scalars(client: Client, cache_name: str, page_size: int) -> Iterator[tuple[Any, Any]]:
    """(key, value) of every entry of a cache of scalar keys and values, a page at a time on one connection
    (a scan cursor lives on the connection that opened it). UnusualScan can come after some pages: a caller
    that falls back to pyignite's scan starts over."""
    from pyignite.datatypes import Bool, Int, Long, Null
    from pyignite.queries import Query
    from pyignite.queries.op_codes import OP_QUERY_SCAN, OP_QUERY_SCAN_CURSOR_GET_PAGE, OP_RESOURCE_CLOSE
    from pyignite.stream import BinaryStream

    def send(op: int, fields: list, values: dict) -> memoryview:
        query = Query(op, fields)
        with BinaryStream(client) as stream:
            query.from_python(stream, values)
            return memoryview(node.request(stream.getvalue()))

    node = client.random_node
    cache = client.get_cache(cache_name)
    answer = send(OP_QUERY_SCAN, [("cache_info", type(cache.cache_info)), ("filter", Null), ("page_size", Int),
                                  ("partitions", Int), ("local", Bool)],
                  {"cache_info": cache.cache_info, "filter": None, "page_size": page_size, "partitions": -1,
                   "local": 0})
    pos = _answer_start(answer)
    try:
        (cursor,) = struct.unpack_from("<q", answer, pos)
    except struct.error as exc:
        raise UnusualScan from exc
    more = True
    try:
        pairs, more = _scan_page(answer, pos + 8)
        yield from pairs
        while more:
            answer = send(OP_QUERY_SCAN_CURSOR_GET_PAGE, [("cursor", Long)], {"cursor": cursor})
            pairs, more = _scan_page(answer, _answer_start(answer))
            yield from pairs
    finally:
        if more:  # stopped early (an error, or the caller): free the cursor on the server
            with contextlib.suppress(Exception):
                send(OP_RESOURCE_CLOSE, [("resource_id", Long)], {"resource_id": cursor})


def _answer_start(answer: memoryview) -> int:
    """`_payload_start` of a scan answer; UnusualScan for an error answer."""
    try:
        return _payload_start(answer)
    except (_Unusual, struct.error) as exc:
        raise UnusualScan from exc


def _scan_page(answer: memoryview, pos: int) -> tuple[list[tuple[Any, Any]], bool]:
    """(pairs, more) of one scan page: int32 count, key and value objects, bool more."""
    try:
        (count,) = struct.unpack_from("<i", answer, pos)
        pos += 4
        pairs = []
        for _ in range(count):
            key, pos = _scalar(answer, pos)
            value, pos = _scalar(answer, pos)
            pairs.append((key, value))
        return pairs, bool(answer[pos])
    except (_Unusual, struct.error, IndexError, UnicodeDecodeError) as exc:
        raise UnusualScan from exc


def _field_id(name: str) -> int:
    from pyignite.utils import entity_id

    return entity_id(name)


def schema_names(client: Any, type_id: int, schema_id: int) -> tuple[str, ...] | None:
    """Field names of a binary type's schema, in order, from a sync client's registry (None if unknown)."""
    with contextlib.suppress(Exception):
        cls = client.query_binary_type(type_id, schema_id)
        if cls is not None:
            return tuple(cls._schema)
    return None


async def schema_names_async(client: Any, type_id: int, schema_id: int) -> tuple[str, ...] | None:
    """schema_names for an AioClient."""
    with contextlib.suppress(Exception):
        cls = await client.query_binary_type(type_id, schema_id)
        if cls is not None:
            return tuple(cls._schema)
    return None


# ------------------------------------------------------------------- an asyncio client on a thread of its own
#
# pyignite's asyncio protocol appends what the socket delivers to one bytearray, copies each answer out of it
# and then copies the rest down: a 7 MB get_all answer (64 x 110 KB) is grown in 256 KB steps and copied
# twice, ~14 MB of memcpy and a reallocated buffer per batch on the loop thread. `FramedProtocol` receives
# each answer straight into a buffer of its own length (asyncio's BufferedProtocol: the socket writes into
# it); the handshake and the routing of answers to their requests stay pyignite's.


def framed_protocol() -> type:
    """pyignite's asyncio protocol with answers received into buffers of their own size (see above)."""
    from pyignite.connection import aio_connection

    base = aio_connection.BaseProtocol

    class FramedProtocol(base, asyncio.BufferedProtocol):  # type: ignore[misc, valid-type]
        def __init__(self, conn: Any, handshake_fut: asyncio.Future) -> None:
            super().__init__(conn, handshake_fut)
            self._length = bytearray(4)  # the length prefix of the next answer
            self._answer: bytearray | None = None  # the answer being received, length prefix included
            self._filled = 0

        def get_buffer(self, sizehint: int) -> memoryview:
            target = self._length if self._answer is None else self._answer
            return memoryview(target)[self._filled:]

        def buffer_updated(self, nbytes: int) -> None:
            self._filled += nbytes
            if self._answer is None:
                if self._filled < 4:
                    return
                size = int.from_bytes(self._length, "little", signed=True)
                if size < 0:
                    raise ConnectionError(f"Ignite sent an answer of {size} bytes: not the thin protocol")
                self._answer = bytearray(4 + size)
                self._answer[:4] = self._length
            if self._filled == len(self._answer):
                answer, self._answer, self._filled = self._answer, None, 0
                self._deliver(answer)

        def _deliver(self, answer: bytearray) -> None:
            if not self._handshake_fut.done():
                self._handshake_fut.set_result(base._BaseProtocol__parse_handshake(answer, self._conn.client))
            elif not self._handshake_fut.cancelled():
                self._conn.process_message(answer)

    return FramedProtocol


def use_framed_protocol() -> None:
    """Make pyignite's asyncio connections use `FramedProtocol` (its connections look the protocol class up in
    their module when they connect). Once per process; pyignite's own protocol stays if its shape changed."""
    from pyignite.connection import aio_connection

    base = aio_connection.BaseProtocol
    if getattr(base, "framed", False):
        return
    if not hasattr(base, "_BaseProtocol__parse_handshake"):
        log.warning("pyignite's asyncio protocol has changed: answers are received by pyignite's own framing")
        return
    framed = framed_protocol()
    framed.framed = True
    aio_connection.BaseProtocol = framed




class AioClients:
    """One AioClient (one connection, many requests in flight on it) shared by every coroutine of a loop;
    a failed one is dropped and the next request connects again."""

    def __init__(self, endpoint: Endpoint, partition_aware: bool = False) -> None:
        self.endpoint, self.partition_aware = endpoint, partition_aware
        self.client: Any = None
        self._lock: asyncio.Lock | None = None

    async def get(self) -> Any:
        if self.client is None:
            if self._lock is None:
                self._lock = asyncio.Lock()
            async with self._lock:
                if self.client is None:
                    self.client = await self.endpoint.connect_aio(self.partition_aware)
        return self.client

    async def discard(self, client: Any) -> None:
        if client is not None and client is self.client:
            self.client = None
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client.close(), self.endpoint.timeout_s)

    async def close(self) -> None:
        await self.discard(self.client)
