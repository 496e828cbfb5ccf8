"""Where and how the workbench's Ignite clients connect (`Endpoint`, picklable) and one client per thread.

Why: loaders open their connections in worker threads and processes; an Endpoint carries the settings there
(secrets out of repr) and `ThreadClients` keeps pyignite's non-thread-safe clients one per thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import TYPE_CHECKING, Any

from workbench.clients.endpoints import ignite_points
from workbench.clients.endpoints import where as where_of
from workbench.clients.ignite.connect import (
    _ignite_handshake_failures,
    check_tls_files,
    connect_failure,
    connect_ignite,
    ignite_tls_options,
    stack_client_certificate,
)
from workbench.clients.ignite.framing import use_framed_protocol
from workbench.config import DEFAULT_CREDENTIALS, Settings
from workbench.errors import WorkbenchError

if TYPE_CHECKING:
    from pyignite import Client


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
