"""Connected clients for every service, each with explicit timeouts so no network call can hang.

`via_proxy=True` connects through toxiproxy, where sweeps add latency, bandwidth limits and faults.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from workbench.config import Settings
from workbench.errors import WorkbenchError

if TYPE_CHECKING:
    from cassandra.cluster import Cluster, Session
    from pyignite import Client as IgniteClient

# The driver logs a warning for every protocol downgrade and reconnect attempt; errors still surface.
logging.getLogger("cassandra").setLevel(logging.ERROR)
# pyignite logs a full traceback for every refused connection while a node starts; we raise our own error.
logging.getLogger("pyignite").setLevel(logging.CRITICAL)


def cassandra_cluster(settings: Settings, via_proxy: bool = False, **options) -> Cluster:
    from cassandra.auth import PlainTextAuthProvider
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
    from cassandra.policies import RoundRobinPolicy

    settings.check_credentials()
    auth = None
    if settings.cassandra_username and settings.cassandra_password:
        auth = PlainTextAuthProvider(settings.cassandra_username, settings.cassandra_password.get_secret_value())
    return Cluster(
        [settings.host], port=settings.port("cassandra", via_proxy), auth_provider=auth,
        connect_timeout=settings.timeout_s, control_connection_timeout=settings.timeout_s,
        execution_profiles={EXEC_PROFILE_DEFAULT: ExecutionProfile(
            load_balancing_policy=RoundRobinPolicy(), request_timeout=settings.timeout_s)},
        protocol_version=5, **options,
    )


@contextmanager
def cassandra_session(settings: Settings, via_proxy: bool = False, **options) -> Iterator[Session]:
    from cassandra.cluster import NoHostAvailable

    cluster = cassandra_cluster(settings, via_proxy, **options)
    try:
        try:
            session = cluster.connect()
        except NoHostAvailable as exc:
            port = settings.port("cassandra", via_proxy)
            raise WorkbenchError(
                f"cannot reach Cassandra at {settings.host}:{port}: {_first_error(exc)}; "
                "is the stack up? (`workbench stack status`)"
            ) from exc
        yield session
    finally:
        cluster.shutdown()


def s3_client(settings: Settings, via_proxy: bool = False, max_pool_connections: int = 64):
    import boto3
    from botocore.config import Config

    settings.check_credentials()
    access, secret = settings.s3_credentials()
    return boto3.client(
        "s3", endpoint_url=settings.s3_endpoint(via_proxy), aws_access_key_id=access,
        aws_secret_access_key=secret, region_name=settings.s3_region,
        config=Config(
            connect_timeout=settings.timeout_s, read_timeout=settings.timeout_s,
            retries={"max_attempts": 3, "mode": "standard"}, max_pool_connections=max_pool_connections,
            s3={"addressing_style": "path"},
        ),
    )


@contextmanager
def ignite_client(settings: Settings, via_proxy: bool = False) -> Iterator[IgniteClient]:
    from pyignite import Client
    from pyignite.exceptions import ReconnectError

    settings.check_credentials()
    kwargs = {}
    if settings.ignite_username and settings.ignite_password:
        kwargs = {"username": settings.ignite_username, "password": settings.ignite_password.get_secret_value()}
    client = Client(timeout=settings.timeout_s, **kwargs)
    port = settings.port("ignite", via_proxy)
    try:
        client.connect(settings.host, port)
    except (ReconnectError, OSError) as exc:
        raise WorkbenchError(
            f"cannot reach Ignite at {settings.host}:{port}: {exc}; is the stack up? (`workbench stack status`)"
        ) from exc
    try:
        yield client
    finally:
        client.close()


def triton_client(settings: Settings, protocol: str = "http", via_proxy: bool = False):
    """A tritonclient for HTTP or gRPC."""
    if protocol == "http":
        import tritonclient.http as module

        port = settings.port("triton_http", via_proxy)
        return module.InferenceServerClient(
            f"{settings.host}:{port}", connection_timeout=settings.timeout_s, network_timeout=settings.timeout_s
        )
    if protocol == "grpc":
        import tritonclient.grpc as module

        return module.InferenceServerClient(f"{settings.host}:{settings.port('triton_grpc', via_proxy)}")
    raise WorkbenchError(f"unknown Triton protocol '{protocol}': use http or grpc")


def _first_error(exc: Exception) -> str:
    errors = getattr(exc, "errors", None) or {}
    return str(next(iter(errors.values()), exc)).splitlines()[0][:200]
