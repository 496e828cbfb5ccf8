"""Cassandra sessions with timeouts, the configured login and, with settings.tls, the stack CA; clear errors."""

from __future__ import annotations

import logging
import re
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from workbench.clients.tls import STACK_CA_HINT, chained, speaks_tls, ssl_reason, verify_reason
from workbench.config import Settings
from workbench.errors import WorkbenchError, first_line

if TYPE_CHECKING:
    from cassandra.cluster import Cluster, Session


# The driver logs a warning for every protocol downgrade and reconnect attempt; errors still surface.
logging.getLogger("cassandra").setLevel(logging.ERROR)

class CassandraLoginRefused(WorkbenchError):
    """Cassandra refused the login itself (user or password): retrying cannot help, the settings must change."""

def cassandra_ssl_context(settings: Settings) -> ssl.SSLContext | None:
    """With settings.tls: trust only the stack's CA and check the server's name against settings.host."""
    if not settings.tls:
        return None
    return ssl.create_default_context(cafile=str(settings.ca_file()))  # CERT_REQUIRED + check_hostname

def cassandra_cluster(settings: Settings, via_proxy: bool = False, login: tuple[str, str] | None = None,
                      **options) -> Cluster:
    """A driver cluster with every timeout bounded; `login` overrides the configured one (stack bootstrap only)."""
    from cassandra.auth import PlainTextAuthProvider
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
    from cassandra.policies import RoundRobinPolicy

    settings.check_credentials()
    if login is None and settings.cassandra_username and settings.cassandra_password:
        login = (settings.cassandra_username, settings.cassandra_password.get_secret_value())
    auth = PlainTextAuthProvider(*login) if login else None
    return Cluster(
        [settings.host], port=settings.port("cassandra", via_proxy), auth_provider=auth,
        ssl_context=cassandra_ssl_context(settings),
        connect_timeout=settings.timeout_s, control_connection_timeout=settings.timeout_s,
        execution_profiles={EXEC_PROFILE_DEFAULT: ExecutionProfile(
            load_balancing_policy=RoundRobinPolicy(), request_timeout=settings.timeout_s)},
        protocol_version=5, **options,
    )

@contextmanager
def cassandra_session(settings: Settings, via_proxy: bool = False, login: tuple[str, str] | None = None,
                      **options) -> Iterator[Session]:
    from cassandra.cluster import NoHostAvailable

    cluster = cassandra_cluster(settings, via_proxy, login, **options)
    try:
        try:
            session = cluster.connect()
        except NoHostAvailable as exc:
            error = cassandra_error(exc, f"{settings.host}:{settings.port('cassandra', via_proxy)}", settings.tls,
                                    settings.timeout_s)
            raise error from error.__cause__
        yield session
    finally:
        cluster.shutdown()

def cassandra_error(exc: BaseException, where: str, tls: bool, timeout_s: float) -> WorkbenchError:
    """One line for a failed connect to `where`: a refused login, a TLS mismatch or an unreachable server.

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
