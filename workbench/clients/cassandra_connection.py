"""How a Cassandra reader connects: the cassandra-dali-plugin's connection parameters, and the driver cluster,
session, login and TLS they make.

Why here: the three Cassandra loaders (the Python driver's, the C++ driver's, the plugin's) and their ceilings
connect the same way; a loader module holds only its read loop. `CassandraConnection` is mixed into their
LoaderConfig (which holds `via_proxy`). Login and TLS default to the stack's: the settings' login, and with
settings.tls, use_ssl with ssl_certificate = the stack's CA (settings.ca_file()) and, when the stack requires
client certificates, the stack's own. A secure-connect bundle (cloud_config) goes to the driver's cloud mode
instead of contact points and TLS files (workbench.clients.cloud_bundle).
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator

from workbench.clients.cassandra import cassandra_error, driver_options, multi_node
from workbench.clients.cloud_bundle import BUNDLE_KEY, CloudBundle, read_bundle
from workbench.clients.endpoints import cassandra_hosts
from workbench.clients.tls import client_context, present_certificate, stack_client_certificate
from workbench.config import Settings
from workbench.errors import WorkbenchError, first_line

if TYPE_CHECKING:
    from cassandra.cluster import Cluster, Session

# Native protocol v4, not v5: v5 wraps every message in checksummed segments, which costs the Python
# driver ~25% more CPU per ~110 KB blob (measured here: 0.77 s vs 0.61 s of client CPU per 1000 rows).
PROTOCOL_VERSION = 4
# What a secure-connect bundle (cloud_config) decides instead.
_REPLACED_BY_BUNDLE = ("cassandra_ips", "cassandra_port", "use_ssl", "ssl_certificate", "ssl_own_certificate",
                       "ssl_own_key", "ssl_own_key_pass")


class CassandraConnection(BaseModel):
    """The plugin's connection parameters (defaults: the settings' cluster, login and TLS)."""

    if TYPE_CHECKING:
        via_proxy: bool  # a LoaderConfig field: this is mixed into one

    cassandra_ips: list[str] | None = Field(None, min_length=1, description="contact points (default: settings.host)")
    cassandra_port: int | None = Field(None, ge=1, le=65535,
                                       description="native port (default: the stack's, or its proxy's with via_proxy)")
    username: str | None = Field(None, description="default: settings.cassandra_username")
    password: SecretStr | None = Field(None, description="default: settings.cassandra_password")
    use_ssl: bool | None = Field(None, description="TLS to the native port (default: settings.tls, verifying the "
                                                   "server against settings.ca_file() and its name)")
    ssl_certificate: str | None = Field(None, description="server certificate (PEM) to verify the server with")
    ssl_own_certificate: str | None = Field(None, description="client certificate (PEM)")
    ssl_own_key: str | None = Field(None, description="client private key (PEM)")
    ssl_own_key_pass: SecretStr | None = Field(None, description="password of the client private key")
    cloud_config: dict[str, str] | str | None = Field(
        None, description="a secure-connect bundle (zip) as the plugin takes it, {'secure_connect_bundle': path}, or "
                          "its path: the drivers' cloud mode (the bundle's metadata service and SNI proxy, its TLS "
                          "files) instead of cassandra_ips, cassandra_port, use_ssl and ssl_*")

    @field_validator("cassandra_ips")
    @classmethod
    def _ips(cls, value: list[str] | None) -> list[str] | None:
        for ip in value or []:
            if not ip or any(c.isspace() for c in ip):
                raise ValueError(f"invalid contact point {ip!r}: give host names or addresses")
            if re.match(r"^[^:]+:\d+$", ip):
                raise ValueError(f"contact point {ip!r} includes a port: give the port as cassandra_port")
        return value

    @model_validator(mode="after")
    def _cloud(self) -> CassandraConnection:
        """A bundle names the cluster and holds the TLS files: the parameters it replaces must stay unset."""
        if self.cloud_config is None:
            return self
        if isinstance(self.cloud_config, dict) and BUNDLE_KEY not in self.cloud_config:
            raise ValueError(f"cloud_config needs '{BUNDLE_KEY}': {{'{BUNDLE_KEY}': '/path/to/bundle.zip'}}")
        given = [n for n in _REPLACED_BY_BUNDLE if getattr(self, n) is not None] + (["via_proxy"] if self.via_proxy
                                                                                    else [])
        if given:
            raise ValueError(f"cloud_config replaces {', '.join(given)}: the bundle names the cluster and holds its "
                             "TLS files (give one or the other)")
        return self

    @model_validator(mode="after")
    def _credentials_and_tls(self) -> CassandraConnection:
        if (self.username is None) != (self.password is None):
            raise ValueError("give username and password together (or neither, to use the settings')")
        tls = {"ssl_certificate": self.ssl_certificate, "ssl_own_certificate": self.ssl_own_certificate,
               "ssl_own_key": self.ssl_own_key, "ssl_own_key_pass": self.ssl_own_key_pass}
        given = [name for name, value in tls.items() if value is not None]
        if given and self.use_ssl is not True:
            raise ValueError(f"{', '.join(given)} need use_ssl=True")
        if (self.ssl_own_certificate is None) != (self.ssl_own_key is None):
            raise ValueError("ssl_own_certificate and ssl_own_key go together (client authentication)")
        if self.ssl_own_key_pass is not None and self.ssl_own_key is None:
            raise ValueError("ssl_own_key_pass without ssl_own_key")
        for name in ("ssl_certificate", "ssl_own_certificate", "ssl_own_key"):
            path = getattr(self, name)
            if path is not None and not Path(path).is_file():
                raise ValueError(f"{name} file {path} does not exist")
        return self


def endpoints(settings: Settings, config: CassandraConnection) -> tuple[list[str], int]:
    """The loader's cassandra_ips/cassandra_port (the plugin's parameters), else the configured cluster's."""
    hosts, port = cassandra_hosts(settings, config.via_proxy)
    return list(config.cassandra_ips or hosts), config.cassandra_port or port


def login_of(settings: Settings, config: CassandraConnection) -> tuple[str, str] | None:
    """(username, password): the config's, else the bundle's own (the drivers read it from its config.json),
    else the settings'; None: no login."""
    username, password = config.username, config.password
    if username is None:
        if config.cloud_config is not None and read_bundle(config.cloud_config).has_login:
            return None  # the driver logs in with the bundle's
        username, password = settings.cassandra_username, settings.cassandra_password
    return (username, password.get_secret_value()) if username and password else None


def bundle_of(config: CassandraConnection) -> CloudBundle | None:
    """The checked secure-connect bundle of cloud_config (one line naming the file when it is unusable)."""
    return None if config.cloud_config is None else read_bundle(config.cloud_config)


def where_of(settings: Settings, config: CassandraConnection) -> str:
    """The servers for messages: host:port of each contact point, or the bundle's metadata service."""
    if config.cloud_config is not None:
        return read_bundle(config.cloud_config).describe()
    hosts, port = endpoints(settings, config)
    return ", ".join(f"{h}:{port}" for h in hosts)


def tls_of(settings: Settings, config: CassandraConnection) -> tuple[bool, str | None]:
    """(use_ssl, ssl_certificate) in effect: the config's when it sets use_ssl, else the stack's (settings.tls);
    a bundle (cloud_config): TLS with the bundle's own CA."""
    if config.cloud_config is not None:
        return True, None
    if config.use_ssl is not None:
        return config.use_ssl, config.ssl_certificate
    return (True, str(settings.ca_file())) if settings.tls else (False, None)


def ssl_context(settings: Settings, config: CassandraConnection) -> ssl.SSLContext | None:
    """TLS as the plugin does it: verify the server against `ssl_certificate` when given, else only encrypt.

    With use_ssl left unset and settings.tls on, the stack's own TLS: its CA, and the server's name
    checked against the contact point (what `workbench.clients` does).
    """
    use_ssl, certificate = tls_of(settings, config)
    if not use_ssl:
        return None
    try:  # no identity check unless the stack's TLS, like the C++ driver's default (peer certificate only)
        context = client_context(certificate, verify=bool(certificate),
                                 check_hostname=bool(certificate) and config.use_ssl is None)
    except (OSError, ssl.SSLError) as exc:
        raise WorkbenchError(f"cannot load ssl_certificate {certificate}: {exc}") from exc
    own = own_certificate(settings, config)
    if own is not None:
        certificate, key, password = own
        try:
            present_certificate(context, certificate, key, password)
        except (OSError, ssl.SSLError) as exc:
            raise WorkbenchError(f"cannot load client certificate {certificate} with key {key}: {exc}"
                                 + (" (wrong ssl_own_key_pass?)" if password else "")) from exc
    return context


def own_certificate(settings: Settings, config: CassandraConnection) -> tuple[str, str, str | None] | None:
    """(certificate, key, key password) the loader presents: ssl_own_* when given; with use_ssl left to the
    stack's TLS, the stack's client certificate when the stack requires one; else None."""
    if config.ssl_own_certificate and config.ssl_own_key:
        password = config.ssl_own_key_pass.get_secret_value() if config.ssl_own_key_pass else None
        return config.ssl_own_certificate, config.ssl_own_key, password
    if config.use_ssl is None and config.cloud_config is None and (stack := stack_client_certificate(settings)):
        return str(stack[0]), str(stack[1]), None
    return None


def make_cluster(settings: Settings, config: CassandraConnection, executor_threads: int = 2) -> Cluster:
    """A driver cluster with every timeout bounded by settings.timeout_s (as `workbench.clients`)."""
    from cassandra.auth import PlainTextAuthProvider
    from cassandra.cluster import Cluster
    from cassandra.policies import ConstantReconnectionPolicy
    from cassandra.query import tuple_factory

    login = login_of(settings, config)
    auth = PlainTextAuthProvider(*login) if login else None
    hosts, port = endpoints(settings, config)
    bundle = bundle_of(config)
    if bundle is None:
        where: dict[str, Any] = {"contact_points": hosts, "port": port, "ssl_context": ssl_context(settings, config)}
    else:  # the driver asks the bundle's metadata service for the SNI proxy and the nodes (the port is the proxy's)
        where, port = {"cloud": {BUNDLE_KEY: str(bundle.path), "connect_timeout": settings.timeout_s}}, \
            settings.cassandra_port
    return cloud_cluster(bundle, lambda: Cluster(
        auth_provider=auth, protocol_version=PROTOCOL_VERSION, **where,
        executor_threads=executor_threads,
        # A restarted server (or a reset connection) is found again within a second, not after the
        # default exponential policy's minutes: reads re-tried meanwhile (RetryPolicy) then succeed.
        reconnection_policy=ConstantReconnectionPolicy(0.5, max_attempts=None),
        # One node: reading rows needs neither the schema of every keyspace nor the token ring (faster
        # connects). A ring routes each read to a replica, which needs both.
        schema_metadata_enabled=multi_node(settings), token_metadata_enabled=multi_node(settings),
        # Timeouts, consistency, token-aware routing in a ring, discovered nodes through their proxies.
        **driver_options(settings, port, row_factory=tuple_factory),
    ))


def cloud_cluster(bundle: CloudBundle | None, make: Callable[[], Cluster]) -> Cluster:
    """make(); in cloud mode the driver reads the bundle's metadata service right there: its failure as one line
    (an unreachable service keeps the driver's error as cause, so retry policies may retry it)."""
    from cassandra import DriverException

    if bundle is None:
        return make()
    try:
        return make()
    except (DriverException, ValueError, OSError, ssl.SSLError) as exc:
        raise WorkbenchError(f"cannot use the metadata service at {bundle.describe()}: {first_line(exc)}") from exc


def connect(cluster: Cluster, settings: Settings, config: CassandraConnection) -> Session:
    """The first session; a refused login, a TLS mismatch or an unreachable node as one clear line."""
    from cassandra import AuthenticationFailed
    from cassandra.cluster import NoHostAvailable

    where = where_of(settings, config)
    try:
        return cluster.connect()
    except (NoHostAvailable, AuthenticationFailed) as exc:
        own = own_certificate(settings, config)
        error = cassandra_error(exc, where, tls_of(settings, config)[0], settings.timeout_s, own[0] if own else None)
        raise error from error.__cause__
