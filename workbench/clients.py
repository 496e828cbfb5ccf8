"""Connected clients for every service, each with explicit timeouts so no network call can hang.

`via_proxy=True` connects through toxiproxy, where sweeps add latency, bandwidth limits and faults.
"""

from __future__ import annotations

import logging
import re
import socket
import ssl
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from workbench.config import Settings
from workbench.errors import WorkbenchError

if TYPE_CHECKING:
    from cassandra.cluster import Cluster, Session
    from pyignite import Client as IgniteClient

# The driver logs a warning for every protocol downgrade and reconnect attempt; errors still surface.
logging.getLogger("cassandra").setLevel(logging.ERROR)
# pyignite logs a full traceback for every refused connection while a node starts; we raise our own error.
logging.getLogger("pyignite").setLevel(logging.CRITICAL)


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
    text = _one_line(cause)
    if isinstance(cause, AuthenticationFailed):
        server_says = re.search(r'message="([^"]+)"', text)
        return _chained(CassandraLoginRefused(
            f"Cassandra at {where} refused the login ({server_says.group(1) if server_says else text}): check "
            "WORKBENCH_CASSANDRA_USERNAME and WORKBENCH_CASSANDRA_PASSWORD (environment or .env)"), cause)
    if "CERTIFICATE_VERIFY_FAILED" in text:  # the driver re-raises SSL errors as OSError(errno, text)
        return _chained(WorkbenchError(
            f"cannot verify the TLS certificate of Cassandra at {where} ({_verify_reason(text)}): set "
            f"WORKBENCH_TLS_CA_FILE to the CA that signed it ({_STACK_CA})"), None)
    if isinstance(cause, ssl.SSLError) or "[SSL:" in text:
        return _chained(WorkbenchError(
            f"TLS handshake with Cassandra at {where} failed ({_ssl_reason(text)}): the server does not speak "
            "TLS there; set WORKBENCH_TLS=0 or enable its client_encryption_options"), None)
    if not tls and not isinstance(cause, ConnectionRefusedError) and endpoint is not None \
            and speaks_tls(*endpoint, min(timeout_s, 3.0)):
        return _chained(WorkbenchError(
            f"Cassandra at {where} accepts TLS connections only ({text}): set WORKBENCH_TLS=1 and "
            f"WORKBENCH_TLS_CA_FILE to its CA ({_STACK_CA})"), None)
    return _chained(WorkbenchError(
        f"cannot reach Cassandra at {where}: {text}; is the stack up? (`workbench stack status`)"), exc)


_STACK_CA = "the local stack's is <state_dir>/tls/ca.crt"


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


def speaks_tls(host: str, port: int, timeout_s: float) -> bool:
    """Whether host:port completes a TLS handshake (certificate not checked): tells a TLS-only server
    that dropped a plain client from a server that is down. Only called on a failed connect."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as raw, context.wrap_socket(raw):
            return True
    except OSError:  # ssl.SSLError included
        return False


def _chained(error: WorkbenchError, cause: BaseException | None) -> WorkbenchError:
    """`error` caused by `cause`; None: a permanent error that retry policies must not see as transient."""
    error.__cause__ = cause
    error.__suppress_context__ = True
    return error


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__


def s3_client(settings: Settings, via_proxy: bool = False, max_pool_connections: int = 64):
    """A boto3 S3 client with timeouts; with settings.tls it verifies MinIO against the stack's CA only."""
    import boto3
    from botocore.config import Config

    settings.check_credentials()
    access, secret = settings.s3_credentials()
    client = boto3.client(
        "s3", endpoint_url=settings.s3_endpoint(via_proxy), aws_access_key_id=access,
        aws_secret_access_key=secret, region_name=settings.s3_region,
        verify=str(settings.ca_file()) if settings.tls else None,
        config=Config(
            connect_timeout=settings.timeout_s, read_timeout=settings.timeout_s,
            retries={"max_attempts": 3, "mode": "standard"}, max_pool_connections=max_pool_connections,
            s3={"addressing_style": "path"},
        ),
    )
    explain_s3_tls_errors(client, settings.timeout_s)
    return client


def explain_s3_tls_errors(client, timeout_s: float) -> None:
    """Make a TLS failure of any call on `client` one clear, permanent WorkbenchError (botocore's event hooks).

    Why hooks: every caller (stores, loaders, checkpoints, the probe) gets the same message without
    wrapping each call; botocore files an SSLError among its transient connection errors otherwise.
    """
    handler = _S3TLSErrors(client.meta.endpoint_url, timeout_s)
    client.meta.events.register("after-call-error.s3", handler)
    client.meta.events.register("after-call.s3", handler.answered)


class _S3TLSErrors:
    """The after-call-error handler: untrusted certificate, https to a plain server, http to a TLS-only one."""

    def __init__(self, endpoint: str, timeout_s: float) -> None:
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self.checked_plain = False  # http endpoints: probe for TLS once, on the first failed call

    def __call__(self, exception: BaseException | None = None, **_) -> None:
        from botocore.exceptions import EndpointConnectionError, SSLError

        url = urlsplit(self.endpoint)
        if isinstance(exception, SSLError):
            text = str(exception)
            if "CERTIFICATE_VERIFY_FAILED" in text:
                raise WorkbenchError(
                    f"cannot verify the TLS certificate of S3 at {self.endpoint} ({_verify_reason(text)}): set "
                    f"WORKBENCH_TLS_CA_FILE to the CA that signed it ({_STACK_CA})") from None
            raise WorkbenchError(
                f"TLS handshake with S3 at {self.endpoint} failed ({_ssl_reason(text)}): the server does not speak "
                "TLS there; set WORKBENCH_TLS=0 or start MinIO with --certs-dir") from None
        if url.scheme == "http" and exception is not None and not self.checked_plain \
                and not isinstance(exception, EndpointConnectionError):  # refused: nobody there to probe
            self.checked_plain = True
            if speaks_tls(url.hostname or "", url.port or 80, min(self.timeout_s, 3.0)):
                raise self.https_only() from None

    def https_only(self) -> WorkbenchError:
        return WorkbenchError(
            f"S3 at {self.endpoint} accepts HTTPS only: set WORKBENCH_TLS=1 and WORKBENCH_TLS_CA_FILE to its CA "
            f"({_STACK_CA})")

    def answered(self, http_response=None, **_) -> None:
        """The after-call handler: Go's TLS servers may answer a plain request with this 400 instead."""
        if http_response is not None and http_response.status_code == 400 and \
                b"HTTP request to an HTTPS server" in (http_response.content or b""):
            raise self.https_only()


def _verify_reason(text: str) -> str:
    reason = text.split("certificate verify failed:", 1)[-1].split("(_ssl")[0].strip(" )")
    return reason or "untrusted certificate"


def _ssl_reason(text: str) -> str:
    found = re.search(r"\[SSL: ([A-Z_]+)\]|(wrong version number|record layer failure|unexpected eof)", text,
                      re.IGNORECASE)
    return (found.group(1) or found.group(2)) if found else text.splitlines()[0][:120]


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


def triton_client(settings: Settings, protocol: str = "http", via_proxy: bool = False, aio: bool = False,
                  timeout_s: float | None = None, connections: int = 100):
    """A tritonclient (asyncio's with `aio`) for HTTP or gRPC; every call it makes has a deadline.

    gRPC uses TLS with settings.tls (the server verified against the stack's CA). Triton's HTTP endpoint
    has no TLS of its own: it stays plain, bound to settings.host (127.0.0.1 by default).
    `connections` bounds the asyncio HTTP client's connection pool.
    """
    timeout = timeout_s or settings.timeout_s
    if protocol == "http":
        url = f"{settings.host}:{settings.port('triton_http', via_proxy)}"
        if aio:
            import tritonclient.http.aio as aio_http

            return aio_http.InferenceServerClient(url, conn_limit=connections, conn_timeout=timeout)
        import tritonclient.http as http

        return http.InferenceServerClient(url, connection_timeout=timeout, network_timeout=timeout)
    if protocol == "grpc":
        if aio:
            import tritonclient.grpc.aio as module
        else:
            import tritonclient.grpc as module
        tls = {"ssl": True, "root_certificates": str(settings.ca_file())} if settings.tls else {}
        return module.InferenceServerClient(f"{settings.host}:{settings.port('triton_grpc', via_proxy)}",
                                            channel_args=_grpc_channel_args(timeout), **tls)
    raise WorkbenchError(f"unknown Triton protocol '{protocol}': use http or grpc")


def _grpc_channel_args(timeout_s: float) -> list[tuple[str, object]]:
    """tritonclient's default channel arguments plus a default deadline for every call (gRPC service config).

    Why: tritonclient's gRPC calls wait forever unless each passes client_timeout; with this a call
    without one (a TLS mismatch, a stuck server) still ends after `timeout_s` with DEADLINE_EXCEEDED.
    """
    import json

    from tritonclient.grpc import MAX_GRPC_MESSAGE_SIZE, KeepAliveOptions

    keepalive = KeepAliveOptions()
    deadline = {"methodConfig": [{"name": [{"service": "inference.GRPCInferenceService"}],
                                  "timeout": f"{timeout_s:.3f}s"}]}
    return [
        ("grpc.max_send_message_length", MAX_GRPC_MESSAGE_SIZE),
        ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE_SIZE),
        ("grpc.keepalive_time_ms", keepalive.keepalive_time_ms),
        ("grpc.keepalive_timeout_ms", keepalive.keepalive_timeout_ms),
        ("grpc.keepalive_permit_without_calls", keepalive.keepalive_permit_without_calls),
        ("grpc.http2.max_pings_without_data", keepalive.http2_max_pings_without_data),
        ("grpc.service_config", json.dumps(deadline)),
    ]
