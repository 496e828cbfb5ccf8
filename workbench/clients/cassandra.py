"""Cassandra sessions with timeouts, the configured login and, with settings.tls, the stack CA; clear errors.

Two drivers: the Python driver (`cassandra_session`: schema, scans, the `cassandra-py` loader) and the
C++ driver acsylla (`open_native_session` on an `EventLoopThread`: the `cassandra` loader and ingest),
whose I/O and framing run outside the GIL.

A ring (settings.cassandra_nodes > 1): clients know every node as a contact point, route each request to
a replica of its partition (token-aware) and read and write at settings.cassandra_consistency. Through
toxiproxy, node k's proxy listens on node k's address at the proxy port, so a node found in the ring is
reached at its address and the port of the contact points, never at the native port it advertises. The
C++ driver does that by itself (it reads system.peers and keeps the contact points' port); the Python
driver reads the port from system.peers_v2 (`native_port`, the server's own), so its peers go through
`contact_port_endpoints`. With node_network=netns the nodes advertise their proxies' host-side addresses
(broadcast_rpc_address): the Python driver maps them back when it goes around the proxies
(`namespace_addresses`); acsylla cannot (no address translator), so without the proxies it uses only the
node it first reached there (measured: 2 connections, both to node 0).
"""

from __future__ import annotations

import ipaddress
import logging
import re
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench.clients.cloud_bundle import CloudBundle
from workbench.clients.endpoints import cassandra_points, where
from workbench.clients.tls import (
    LOADER_CERTIFICATE_HINT,
    STACK_CA_HINT,
    STACK_CERTIFICATE_HINT,
    chained,
    client_certificate_problem,
    client_context,
    present_certificate,
    speaks_tls,
    ssl_reason,
    stack_client_certificate,
    verify_reason,
)
from workbench.config import Settings
from workbench.errors import WorkbenchError, first_line

if TYPE_CHECKING:
    from cassandra.cluster import Cluster, Session


# The driver logs a warning for every protocol downgrade and reconnect attempt; errors still surface.
logging.getLogger("cassandra").setLevel(logging.ERROR)

class CassandraLoginRefused(WorkbenchError):
    """Cassandra refused the login itself (user or password): retrying cannot help, the settings must change."""

def cassandra_ssl_context(settings: Settings) -> ssl.SSLContext | None:
    """With settings.tls: trust only the stack's CA and check the server's name against settings.host; when
    the stack requires client certificates, present the stack's own (stack_client_certificate)."""
    if not settings.tls:
        return None
    context = client_context(settings.ca_file())  # CERT_REQUIRED + check_hostname
    own = stack_client_certificate(settings)
    if own is not None:
        present_certificate(context, *own)
    return context

def settings_login(settings: Settings) -> tuple[str, str] | None:
    """The configured login (user, password), refusing the server's well-known default unless dev_mode."""
    settings.check_credentials()
    if settings.cassandra_username and settings.cassandra_password:
        return settings.cassandra_username, settings.cassandra_password.get_secret_value()
    return None

def multi_node(settings: Settings) -> bool:
    """A ring rather than one node: requests are routed by token (which needs the ring's tokens and keyspaces)."""
    return settings.cassandra_nodes > 1 or len(settings.cassandra_contact_points) > 1


def consistency_level(settings: Settings) -> int:
    """settings.cassandra_consistency as the Python driver's ConsistencyLevel value."""
    from cassandra import ConsistencyLevel

    return ConsistencyLevel.name_to_value[settings.cassandra_consistency]


def contact_port_endpoints(port: int) -> Any:
    """A driver endpoint factory that places every node found in system.peers(_v2) at its address and `port`
    (the contact points' port), as the C++ driver does, instead of the `native_port` the server advertises.

    Why: through toxiproxy each node has its own proxy on its own address at the proxy port, while the
    server advertises its real port: the default factory would reach discovered peers around toxiproxy.
    """
    from cassandra.connection import DefaultEndPoint, EndPointFactory
    from cassandra.metadata import _NodeInfo

    class ContactPortEndPoints(EndPointFactory):
        def create(self, row: dict) -> DefaultEndPoint:
            address = _NodeInfo.get_broadcast_rpc_address(row)
            return DefaultEndPoint(self.cluster.address_translator.translate(address), port)

    return ContactPortEndPoints()


def driver_options(settings: Settings, port: int, node_host: str | None = None, **profile: Any) -> dict[str, Any]:
    """Cluster keyword arguments every Python-driver client shares: timeouts, routing, consistency, peers' port.

    `port`: the contact points' port; when it is not the server's own (a proxy per node), peers are reached
    there too. A ring routes by token (TokenAwarePolicy needs token and schema metadata: callers must not
    turn them off there); `node_host` pins every request, the control connection's included, to that one
    node (health probes). `profile`: more ExecutionProfile settings (e.g. row_factory).
    """
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, ExecutionProfile
    from cassandra.policies import RoundRobinPolicy, TokenAwarePolicy, WhiteListRoundRobinPolicy

    if node_host is not None:
        policy: Any = WhiteListRoundRobinPolicy([node_host])
    elif multi_node(settings):
        policy = TokenAwarePolicy(RoundRobinPolicy())
    else:
        policy = RoundRobinPolicy()
    options: dict[str, Any] = {
        "connect_timeout": settings.timeout_s, "control_connection_timeout": settings.timeout_s,
        "execution_profiles": {EXEC_PROFILE_DEFAULT: ExecutionProfile(
            load_balancing_policy=policy, request_timeout=settings.timeout_s,
            consistency_level=consistency_level(settings), **profile)},
    }
    if port != settings.cassandra_port:
        options["endpoint_factory"] = contact_port_endpoints(port)
    elif addresses := namespace_addresses(settings):
        options["address_translator"] = translated_addresses(addresses)
    return options


def namespace_addresses(settings: Settings) -> dict[str, str]:
    """Nodes in network namespaces (node_network=netns) advertise their host-side address, where their
    proxies listen: a client that goes around the proxies maps those back to the nodes' own addresses."""
    if settings.cassandra_contact_points or settings.node_network != "netns":
        return {}
    return {settings.proxy_host(k): settings.node_host(k) for k in range(settings.cassandra_nodes)
            if settings.proxy_host(k) != settings.node_host(k)}


def translated_addresses(addresses: dict[str, str]) -> Any:
    """The Python driver's AddressTranslator for `addresses` (advertised -> reachable); others unchanged."""
    from cassandra.policies import AddressTranslator

    class Translated(AddressTranslator):
        def translate(self, addr: str) -> str:
            return addresses.get(addr, addr)

    return Translated()


def _points(settings: Settings, via_proxy: bool, node: int | None) -> list[tuple[str, int]]:
    if node is None:
        return cassandra_points(settings, via_proxy)
    return [(settings.node_host(node), settings.port("cassandra", via_proxy))]


def cassandra_cluster(settings: Settings, via_proxy: bool = False, login: tuple[str, str] | None = None,
                      node: int | None = None, **options) -> Cluster:
    """A driver cluster with every timeout bounded; `login` overrides the configured one (stack bootstrap only);
    `node` talks to that node of the local stack alone."""
    from cassandra.auth import PlainTextAuthProvider
    from cassandra.cluster import Cluster

    configured = settings_login(settings)  # checks the configured login even when `login` overrides it
    login = configured if login is None else login
    auth = PlainTextAuthProvider(*login) if login else None
    points = _points(settings, via_proxy, node)
    return Cluster(
        points, port=points[0][1], auth_provider=auth,
        ssl_context=cassandra_ssl_context(settings), protocol_version=5,
        **{**driver_options(settings, points[0][1], None if node is None else points[0][0]), **options},
    )

@contextmanager
def cassandra_session(settings: Settings, via_proxy: bool = False, login: tuple[str, str] | None = None,
                      node: int | None = None, **options) -> Iterator[Session]:
    from cassandra.cluster import NoHostAvailable

    cluster = cassandra_cluster(settings, via_proxy, login, node, **options)
    try:
        try:
            session = cluster.connect()
        except NoHostAvailable as exc:
            own = stack_client_certificate(settings)
            error = cassandra_error(exc, where(_points(settings, via_proxy, node)), settings.tls, settings.timeout_s,
                                    str(own[0]) if own else None, STACK_CERTIFICATE_HINT)
            raise error from error.__cause__
        yield session
    finally:
        cluster.shutdown()

def cassandra_error(exc: BaseException, where: str, tls: bool, timeout_s: float,
                    own_certificate: str | None = None, hint: str = LOADER_CERTIFICATE_HINT) -> WorkbenchError:
    """One line for a failed connect to `where`: a refused login, a missing or refused client certificate,
    a TLS mismatch or an unreachable server. `own_certificate`: the client certificate presented, if any.

    Why the cause matters: a refused login or a TLS mismatch is permanent (no cause a retry policy would
    call transient), while "unreachable" keeps the driver's NoHostAvailable, so loaders retry only that.
    """
    from cassandra import AuthenticationFailed

    endpoint, cause = _first_host_error(exc)
    text = first_line(cause)
    if isinstance(cause, AuthenticationFailed):
        server_says = re.search(r'message="([^"]+)"', text)
        return chained(CassandraLoginRefused(
            f"Cassandra at {where} refused the login ({server_says.group(1) if server_says else text}): check "
            "WORKBENCH_CASSANDRA_USERNAME and WORKBENCH_CASSANDRA_PASSWORD (environment or .env)"), cause)
    if tls and (refused := client_certificate_problem(text, where, own_certificate, hint, endpoint,
                                                      min(timeout_s, 3.0))) is not None:
        return refused
    if "CERTIFICATE_VERIFY_FAILED" in text:  # the driver re-raises SSL errors as OSError(errno, text)
        return chained(WorkbenchError(
            f"cannot verify the TLS certificate of Cassandra at {where} ({verify_reason(text)}): set "
            f"WORKBENCH_TLS_CA_FILE to the CA that signed it ({STACK_CA_HINT})"), None)
    if isinstance(cause, ssl.SSLError) or "[SSL:" in text:
        return chained(WorkbenchError(
            f"TLS handshake with Cassandra at {where} failed ({ssl_reason(text)}): the server does not speak "
            "TLS there; set WORKBENCH_TLS=0 or enable its client_encryption_options"), None)
    if not tls and not isinstance(cause, ConnectionRefusedError) and endpoint is not None \
            and speaks_tls(*endpoint, min(timeout_s, 3.0)):
        return chained(WorkbenchError(
            f"Cassandra at {where} accepts TLS connections only ({text}): set WORKBENCH_TLS=1 and "
            f"WORKBENCH_TLS_CA_FILE to its CA ({STACK_CA_HINT})"), None)
    return chained(WorkbenchError(
        f"cannot reach Cassandra at {where}: {text}; is the stack up? (`workbench stack status`)"), exc)

def _first_host_error(exc: BaseException) -> tuple[tuple[str, int] | None, BaseException]:
    """(host, port) and error of the first host inside a NoHostAvailable (its summary hides the reason)."""
    errors = getattr(exc, "errors", None) or {}
    if not errors:
        return None, exc
    endpoint, error = next(iter(errors.items()))
    address, port = getattr(endpoint, "address", None), getattr(endpoint, "port", None)
    if address is None and isinstance(endpoint, str) and ":" in endpoint:
        address, _, port_text = endpoint.rpartition(":")
        port = int(port_text) if port_text.isdigit() else None
    return ((address, int(port)) if address and port else None), error


# ------------------------------------------------------------------ the C++ driver (acsylla): loader and ingest

NATIVE_PROTOCOL_VERSION = 4  # the C++ driver's v5 support is beta
# acsylla's SSLVerifyFlags lacks the C driver's CASS_SSL_VERIFY_PEER_IDENTITY (IP address in the certificate).
_VERIFY_NONE, _VERIFY_PEER_CERT, _VERIFY_PEER_IDENTITY, _VERIFY_PEER_IDENTITY_DNS = 0, 1, 2, 4
_NATIVE_DEFAULTS: dict[str, Any] = {
    "protocol_version": NATIVE_PROTOCOL_VERSION, "core_connections_per_host": 1, "use_schema": False,
    "token_aware_routing": False, "load_balance_round_robin": True, "log_level": "disabled",
    "application_name": "workbench",
    # The driver's first reconnect waits 2 s by default: longer than a loader's retries last after a dropped
    # connection, which then find "no hosts available". Reconnect within 100 ms, backing off to 5 s.
    "exponential_reconnect_base_delay_ms": 100, "exponential_reconnect_max_delay_ms": 5000,
}


def acsylla_driver(needed_by: str = "the workbench's Cassandra client", instead: str | None = None) -> Any:
    """The acsylla module, or one line naming the package, the install command and what to use instead."""
    try:
        import acsylla
    except ImportError as exc:
        alternative = f" (or {instead})" if instead else ""
        raise WorkbenchError(f"{needed_by} needs the package acsylla (a C++ Cassandra driver): "
                             f"pip install acsylla{alternative}") from exc
    return acsylla


@dataclass(frozen=True)
class NativeTLS:
    """TLS of an acsylla session.

    ca_file None: encrypt only (the plugin's use_ssl without ssl_certificate). check_identity: the
    server's address or name must be in its certificate (the stack's own TLS). own_*: a client certificate.
    """

    ca_file: str | None
    check_identity: bool = False
    own_certificate: str | None = None
    own_key: str | None = None
    own_key_password: str = field(default="", repr=False)


def stack_tls(settings: Settings) -> NativeTLS | None:
    """With settings.tls: trust only the stack's CA and check the server's address or name (as the Python
    driver); the stack's client certificate when it requires one."""
    if not settings.tls:
        return None
    own = stack_client_certificate(settings)
    return NativeTLS(str(settings.ca_file()), check_identity=True, own_certificate=str(own[0]) if own else None,
                     own_key=str(own[1]) if own else None)


def read_pem(name: str, path: str) -> str:
    try:
        return Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise WorkbenchError(f"cannot load {name} {path}: {exc}") from exc


def configure_native_tls(cluster: Any, tls: NativeTLS | None, host: str) -> None:
    """Hand `tls` to an acsylla cluster; `host` (the first contact point) decides address vs name checks."""
    if tls is None:
        return
    flags = _VERIFY_NONE
    trusted = None
    if tls.ca_file:
        trusted = read_pem("CA certificate", tls.ca_file)
        flags = _VERIFY_PEER_CERT
        if tls.check_identity:
            try:
                ipaddress.ip_address(host)
                flags |= _VERIFY_PEER_IDENTITY
            except ValueError:
                flags |= _VERIFY_PEER_IDENTITY_DNS
                cluster.set_hostname_resolution(True)
    own_cert = read_pem("client certificate", tls.own_certificate) if tls.own_certificate else None
    own_key = read_pem("client key", tls.own_key) if tls.own_key else None
    try:
        cluster.set_ssl(True, own_cert, own_key, tls.own_key_password, trusted, flags)
    except acsylla_driver().errors.CassErrorSourceSsl as exc:
        raise WorkbenchError(f"cannot use the TLS files for Cassandra: {first_line(exc)} (CA {tls.ca_file}, "
                             f"client certificate {tls.own_certificate})") from None


def native_connect_error(exc: BaseException, where: str, tls: bool, timeout_s: float,
                         first: tuple[str, int], own_certificate: str | None = None) -> WorkbenchError:
    """The Python driver's one-line messages (cassandra_error) for a failed acsylla connect.

    A refused login or a TLS mismatch is permanent (no transient cause); "unreachable" keeps the driver's
    error as its cause, so retry policies re-try only that.
    """
    errors = acsylla_driver().errors
    text = first_line(exc)
    if isinstance(exc, errors.CassErrorServerBadCredentials):
        server_says = re.search(r"error response '([^']+)'", text)
        return chained(CassandraLoginRefused(
            f"Cassandra at {where} refused the login ({server_says.group(1) if server_says else text}): check "
            "WORKBENCH_CASSANDRA_USERNAME and WORKBENCH_CASSANDRA_PASSWORD (environment or .env)"), exc)
    if tls and (refused := client_certificate_problem(text, where, own_certificate, endpoint=first,
                                                      timeout_s=min(timeout_s, 3.0))) is not None:
        return refused
    if isinstance(exc, errors.CassErrorSslInvalidPeerCert | errors.CassErrorSslIdentityMismatch
                  | errors.CassErrorSslNoPeerCert):
        reason = text.split("Underlying connection error:")[-1].strip()
        return chained(WorkbenchError(
            f"cannot verify the TLS certificate of Cassandra at {where} ({reason}): set "
            f"WORKBENCH_TLS_CA_FILE to the CA that signed it ({STACK_CA_HINT})"), None)
    if isinstance(exc, errors.CassErrorSourceSsl) and not isinstance(exc, errors.CassErrorSslClosed):
        return chained(WorkbenchError(
            f"TLS handshake with Cassandra at {where} failed ({ssl_reason(text)}): the server does not speak "
            "TLS there; set WORKBENCH_TLS=0 or enable its client_encryption_options"), None)
    if not tls and "connection refused" not in text and speaks_tls(*first, min(timeout_s, 3.0)):
        return chained(WorkbenchError(
            f"Cassandra at {where} accepts TLS connections only ({text}): set WORKBENCH_TLS=1 and "
            f"WORKBENCH_TLS_CA_FILE to its CA ({STACK_CA_HINT})"), None)
    return chained(WorkbenchError(
        f"cannot reach Cassandra at {where}: {text}; is the stack up? (`workbench stack status`)"), exc)


async def open_native_session(settings: Settings, hosts: list[str], port: int, login: tuple[str, str] | None,
                              tls: NativeTLS | None, cloud_bundle: CloudBundle | None = None,
                              **options: Any) -> Any:
    """A connected acsylla session, every timeout settings.timeout_s; a failed connect as one line.

    `options` go to acsylla.create_cluster (e.g. num_threads_io). Neither reading rows nor inserting them
    needs the schema of every keyspace or routing by token: connects are faster without. `cloud_bundle`:
    the driver's cloud mode (the bundle's metadata service names the SNI proxy and the nodes, the bundle
    holds the TLS files), instead of `hosts`, `port` and `tls`.
    """
    acsylla = acsylla_driver()
    username, password = login if login else (None, None)
    timeouts = {"connect_timeout": settings.timeout_s, "request_timeout": settings.timeout_s,
                "resolve_timeout": settings.timeout_s}
    merged = {**_NATIVE_DEFAULTS, **native_topology(settings), **timeouts, **options}
    if cloud_bundle is not None:
        cluster = acsylla.create_cluster(None, username=username, password=password,
                                         cloud_secure_connection_bundle=str(cloud_bundle.path), **merged)
        first, at, tls = (cloud_bundle.host, cloud_bundle.port), cloud_bundle.describe(), None
    else:
        cluster = acsylla.create_cluster(hosts, port=port, username=username, password=password, **merged)
        configure_native_tls(cluster, tls, hosts[0])
        first, at = (hosts[0], port), where([(h, port) for h in hosts])
    try:
        return await cluster.create_session()
    except acsylla.errors.CassException as exc:
        raise native_connect_error(exc, at, cloud_bundle is not None or tls is not None, settings.timeout_s, first,
                                   tls.own_certificate if tls else None) from None


def native_topology(settings: Settings) -> dict[str, Any]:
    """acsylla options of the topology: the consistency level, and in a ring token-aware routing (the driver
    then reads the keyspaces' replication, not the rest of the schema)."""
    return {"consistency": settings.cassandra_consistency, "token_aware_routing": multi_node(settings)}
