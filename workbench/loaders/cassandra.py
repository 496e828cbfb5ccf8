"""Cassandra loader: the cassandra-dali-plugin's strategy on the Python driver.

Samples are rows of ``<keyspace>.data_<split>(id uuid PRIMARY KEY, label, data blob)``; the ids come
from the split's metadata table (or `source_uuids`). Each epoch this shard's ids are read with one
prepared single-partition SELECT per sample, `concurrency` requests in flight
(`workbench.concurrency`), and a background thread keeps `prefetch_buffers` whole batches ready,
so the consumer never waits on the network while a batch is complete. Parameter names follow the
plugin (cassandra_ips, cassandra_port, table, id_col/label_col/data_col, source_uuids, prefetch_buffers,
io_threads, username/password, use_ssl and ssl_*, cloud_config). Login and TLS default to the stack's:
settings' login, and with settings.tls, use_ssl with ssl_certificate = the stack's CA (settings.ca_file())
and, when the stack requires client certificates, the stack's own. A secure-connect bundle (cloud_config)
goes to the driver's cloud mode instead of contact points and TLS files (workbench.clients.cloud_bundle).

`raw_ceiling` is the backend's ceiling for the benchmark: the plain driver loop, no loader machinery.
"""

from __future__ import annotations

import contextlib
import itertools
import queue
import re
import ssl
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, InvalidStateError, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import Field, SecretStr, field_validator, model_validator

from workbench.backends import locate
from workbench.clients import cassandra_error
from workbench.clients.cassandra import driver_options, multi_node
from workbench.clients.cloud_bundle import BUNDLE_KEY, CloudBundle, read_bundle
from workbench.clients.endpoints import cassandra_hosts
from workbench.clients.tls import client_context, present_certificate, stack_client_certificate
from workbench.concurrency import HasWindow, fixed_depth, in_flight, make_window, pool_size
from workbench.config import Settings
from workbench.data import SplitFile
from workbench.errors import WorkbenchError, first_line
from workbench.loaders.base import Item, Loader, LoaderConfig
from workbench.loaders.order import effective_shard, epoch_order, take_shard
from workbench.loaders.retry import RetryConfig, RetryPolicy, is_transient, policy_of

if TYPE_CHECKING:
    from cassandra.cluster import Cluster, Session
    from cassandra.query import PreparedStatement

# Native protocol v4, not v5: v5 wraps every message in checksummed segments, which costs the Python
# driver ~25% more CPU per ~110 KB blob (measured here: 0.77 s vs 0.61 s of client CPU per 1000 rows).
PROTOCOL_VERSION = 4
ID_FETCH_SIZE = 5000  # ids are 16 bytes: big pages, few round trips
_NAME = r"[a-z][a-z0-9_]{0,47}"
_TABLE = re.compile(rf"^{_NAME}\.{_NAME}$")
_COLUMN = re.compile(rf"^{_NAME}$")
_CQL_LABEL = {"int": "int", "blob": "blob"}
_END = object()
# What a secure-connect bundle (cloud_config) decides instead.
_REPLACED_BY_BUNDLE = ("cassandra_ips", "cassandra_port", "use_ssl", "ssl_certificate", "ssl_own_certificate",
                       "ssl_own_key", "ssl_own_key_pass")


class CassandraConfig(LoaderConfig, RetryConfig):
    """LoaderConfig plus the plugin's connection and layout parameters (defaults: settings and catalog)."""

    cassandra_ips: list[str] | None = Field(None, min_length=1, description="contact points (default: settings.host)")
    cassandra_port: int | None = Field(None, ge=1, le=65535,
                                       description="native port (default: the stack's, or its proxy's with via_proxy)")
    table: str | None = Field(None, description="data table 'keyspace.table' (default: <keyspace>.data_<split>)")
    id_col: str | None = Field(None, description="uuid primary key column (default: from the catalog)")
    label_col: str | None = Field(None, description="label column (default: from the catalog)")
    data_col: str | None = Field(None, description="blob column (default: from the catalog)")
    source_uuids: list[str] | None = Field(None, min_length=1,
                                           description="ids to read (default: every id of the split's metadata table)")
    username: str | None = Field(None, description="default: settings.cassandra_username")
    password: SecretStr | None = Field(None, description="default: settings.cassandra_password")
    use_ssl: bool | None = Field(None, description="TLS to the native port (default: settings.tls, verifying the "
                                                   "server against settings.ca_file() and its name)")
    ssl_certificate: str | None = Field(None, description="server certificate (PEM) to verify the server with")
    ssl_own_certificate: str | None = Field(None, description="client certificate (PEM)")
    ssl_own_key: str | None = Field(None, description="client private key (PEM)")
    ssl_own_key_pass: SecretStr | None = Field(None, description="password of the client private key")
    io_threads: int = Field(2, ge=1, le=32, description="connections per host (one driver session each)")
    split_file: Path | None = Field(None, description="a split file (`workbench split`): read exactly the ids of "
                                                      "one of its splits, as source_uuids")
    split_index: int | str = Field(0, description="which split of split_file: its name or its position")
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

    @field_validator("table")
    @classmethod
    def _table(cls, value: str | None) -> str | None:
        if value is not None and not _TABLE.match(value):
            raise ValueError(f"table {value!r} must be 'keyspace.table' in lower-case letters, digits and '_'")
        return value

    @field_validator("id_col", "label_col", "data_col")
    @classmethod
    def _column(cls, value: str | None) -> str | None:
        if value is not None and not _COLUMN.match(value):
            raise ValueError(f"column {value!r}: use lower-case letters, digits and '_', starting with a letter")
        return value

    @field_validator("source_uuids")
    @classmethod
    def _uuids(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        canonical = []
        for i, text in enumerate(value):
            try:
                canonical.append(str(uuid.UUID(str(text))))
            except ValueError:
                raise ValueError(f"source_uuids[{i}] = {text!r} is not a UUID") from None
        return canonical

    @model_validator(mode="after")
    def _ids_from_split_file(self) -> CassandraConfig:
        """split_file + split_index become source_uuids (the plugin reads a split file's ids the same way)."""
        if self.split_file is None:
            return self
        if self.source_uuids is not None:
            raise ValueError("give source_uuids or split_file, not both")
        split = SplitFile.load(self.split_file)
        if split.dataset and split.dataset != self.dataset:
            raise ValueError(f"split file {self.split_file} was made for dataset '{split.dataset}', not "
                             f"'{self.dataset}': make one for this dataset (`workbench split`)")
        names = list(split.splits)
        if isinstance(self.split_index, int):
            if not 0 <= self.split_index < len(names):
                raise ValueError(f"split_index {self.split_index} is out of range: {self.split_file} has "
                                 f"{len(names)} splits ({', '.join(names)})")
            name = names[self.split_index]
        elif self.split_index in split.splits:
            name = self.split_index
        else:
            raise ValueError(
                f"split_index '{self.split_index}' is not in {self.split_file} (splits: {', '.join(names)})")
        ids = split.splits[name]
        if not ids:
            raise ValueError(f"split '{name}' of {self.split_file} has no ids")
        self.source_uuids = [str(i) for i in ids]
        return self

    @model_validator(mode="after")
    def _cloud(self) -> CassandraConfig:
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
    def _credentials_and_tls(self) -> CassandraConfig:
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
        cols = [c for c in (self.id_col, self.data_col, self.label_col if self.label_type != "none" else None) if c]
        if len(set(cols)) != len(cols):
            raise ValueError(f"id_col, label_col and data_col must differ, got {', '.join(cols)}")
        return self


# ----------------------------------------------------------------------------------------- layout


@dataclass(frozen=True)
class Layout:
    """Where a split's samples are, resolved once from the config and the catalog."""

    keyspace: str
    table: str  # bare table name
    id_col: str
    label_col: str | None  # None: no label read (label_type none)
    data_col: str
    ids_table: str | None  # 'keyspace.table' to list ids from; None when source_uuids are given
    label_type: str

    @property
    def name(self) -> str:
        return f"{self.keyspace}.{self.table}"

    def quoted(self, table: str | None = None) -> str:
        keyspace, name = (table or self.name).split(".")
        return f'"{keyspace}"."{name}"'

    def select(self) -> str:
        columns = ", ".join(f'"{c}"' for c in [self.data_col, *([self.label_col] if self.label_col else [])])
        return f'SELECT {columns} FROM {self.quoted()} WHERE "{self.id_col}" = ?'


def resolve_layout(settings: Settings, config: CassandraConfig) -> Layout:
    """Table and columns: explicit settings win, the rest comes from the dataset's catalog entry."""
    entry: dict[str, Any] = {}
    needs_catalog = config.table is None or config.id_col is None or config.data_col is None or (
        config.label_type != "none" and config.label_col is None)
    if needs_catalog:
        entry = locate(settings, "cassandra", config.dataset)
    columns = entry.get("columns") or {}
    if config.table is not None:
        table = config.table
    else:
        tables = entry.get("tables") or {}
        if config.split not in tables:
            known = ", ".join(sorted(tables)) or "none"
            raise WorkbenchError(
                f"dataset '{config.dataset}' has no split '{config.split}' in Cassandra (splits: {known}): "
                "ingest it first (`workbench ingest`) or pass table='keyspace.table'"
            )
        table = tables[config.split]
    keyspace, name = table.split(".")
    stored_label_type = entry.get("label_type")
    if config.label_type != "none" and stored_label_type is not None and stored_label_type != config.label_type:
        raise WorkbenchError(
            f"dataset '{config.dataset}' stores label_type {stored_label_type} but the loader asks for "
            f"{config.label_type}: set label_type='{stored_label_type}' (or 'none')"
        )
    label_col = None
    if config.label_type != "none":
        label_col = config.label_col or columns.get("label")
        if label_col is None:
            raise WorkbenchError(f"table {table} has no label column: set label_type='none' (or label_col)")
    ids_table = None
    if config.source_uuids is None:
        metadata = (entry.get("metadata_tables") or {}).get(config.split) if config.table is None else None
        if metadata is None:  # the plugin's convention: ids in metadata_<x> beside data_<x>, else the table itself
            metadata = f"{keyspace}.metadata_{name[5:]}" if name.startswith("data_") else table
        ids_table = metadata
    return Layout(keyspace, name, config.id_col or columns.get("id") or "id", label_col,
                  config.data_col or columns.get("data") or "data", ids_table, config.label_type)


# ------------------------------------------------------------------------------------- connection


def endpoints(settings: Settings, config: CassandraConfig) -> tuple[list[str], int]:
    """The loader's cassandra_ips/cassandra_port (the plugin's parameters), else the configured cluster's."""
    hosts, port = cassandra_hosts(settings, config.via_proxy)
    return list(config.cassandra_ips or hosts), config.cassandra_port or port


def login_of(settings: Settings, config: CassandraConfig) -> tuple[str, str] | None:
    """(username, password): the config's, else the bundle's own (the drivers read it from its config.json),
    else the settings'; None: no login."""
    username, password = config.username, config.password
    if username is None:
        if config.cloud_config is not None and read_bundle(config.cloud_config).has_login:
            return None  # the driver logs in with the bundle's
        username, password = settings.cassandra_username, settings.cassandra_password
    return (username, password.get_secret_value()) if username and password else None


def bundle_of(config: CassandraConfig) -> CloudBundle | None:
    """The checked secure-connect bundle of cloud_config (one line naming the file when it is unusable)."""
    return None if config.cloud_config is None else read_bundle(config.cloud_config)


def where_of(settings: Settings, config: CassandraConfig) -> str:
    """The servers for messages: host:port of each contact point, or the bundle's metadata service."""
    if config.cloud_config is not None:
        return read_bundle(config.cloud_config).describe()
    hosts, port = endpoints(settings, config)
    return ", ".join(f"{h}:{port}" for h in hosts)


def tls_of(settings: Settings, config: CassandraConfig) -> tuple[bool, str | None]:
    """(use_ssl, ssl_certificate) in effect: the config's when it sets use_ssl, else the stack's (settings.tls);
    a bundle (cloud_config): TLS with the bundle's own CA."""
    if config.cloud_config is not None:
        return True, None
    if config.use_ssl is not None:
        return config.use_ssl, config.ssl_certificate
    return (True, str(settings.ca_file())) if settings.tls else (False, None)


def ssl_context(settings: Settings, config: CassandraConfig) -> ssl.SSLContext | None:
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


def own_certificate(settings: Settings, config: CassandraConfig) -> tuple[str, str, str | None] | None:
    """(certificate, key, key password) the loader presents: ssl_own_* when given; with use_ssl left to the
    stack's TLS, the stack's client certificate when the stack requires one; else None."""
    if config.ssl_own_certificate and config.ssl_own_key:
        password = config.ssl_own_key_pass.get_secret_value() if config.ssl_own_key_pass else None
        return config.ssl_own_certificate, config.ssl_own_key, password
    if config.use_ssl is None and config.cloud_config is None and (stack := stack_client_certificate(settings)):
        return str(stack[0]), str(stack[1]), None
    return None


def make_cluster(settings: Settings, config: CassandraConfig, executor_threads: int = 2) -> Cluster:
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


def connect(cluster: Cluster, settings: Settings, config: CassandraConfig) -> Session:
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


def prepare(session: Session, layout: Layout) -> PreparedStatement:
    """The per-sample SELECT; checks the label column's type against label_type."""
    from cassandra import InvalidRequest

    try:
        statement = session.prepare(layout.select())
    except InvalidRequest as exc:
        raise WorkbenchError(
            f"cannot read {layout.name}: {str(exc).splitlines()[0]} (ingested? right table and columns?)"
        ) from exc
    if layout.label_col is not None:
        check_label_type(layout, {m[2]: m[3].typename for m in statement.result_metadata}.get(layout.label_col))
    return statement


def check_label_type(layout: Layout, found: str | None) -> None:
    """The label column's CQL type must be what label_type reads; else one line naming the type to use."""
    if found != _CQL_LABEL[layout.label_type]:
        hint = found if found in _CQL_LABEL.values() else "none"
        raise WorkbenchError(
            f"column {layout.label_col} of {layout.name} has type {found}, not {_CQL_LABEL[layout.label_type]}: "
            f"set label_type='{hint}'"
        )


def list_ids(session: Session, layout: Layout) -> list[str]:
    """Every id of the split, sorted: every rank and worker starts from the same list."""
    from cassandra import InvalidRequest
    from cassandra.query import SimpleStatement

    assert layout.ids_table is not None
    query = SimpleStatement(f'SELECT "{layout.id_col}" FROM {layout.quoted(layout.ids_table)}',
                            fetch_size=ID_FETCH_SIZE)
    try:
        ids = sorted(str(row[0]) for row in session.execute(query))
    except InvalidRequest as exc:
        raise WorkbenchError(f"cannot list the ids of {layout.ids_table}: {str(exc).splitlines()[0]}") from exc
    if not ids:
        raise WorkbenchError(f"{layout.ids_table} holds no ids: nothing to read (ingest the dataset first)")
    return ids


# ----------------------------------------------------------------------------------------- loader


class _Failure:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class FreshConnections:
    """Pickled without its connection state (`connection_state`, made anew by `_reset`): loaders travel to
    DataLoader workers, which connect on their own."""

    connection_state: ClassVar[tuple[str, ...]] = ()

    def _reset(self) -> None:
        raise NotImplementedError

    def _connect_retrying(self) -> Any:
        raise NotImplementedError

    def connect(self) -> None:
        """The session and the prepared statement now (re-tried like reads), not on the first read."""
        self._connect_retrying()

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        for name in ("_lock", *self.connection_state):
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._reset()


class CassandraLoader(FreshConnections, HasWindow, Loader):
    """This shard's rows, `concurrency` asynchronous reads in flight, `prefetch_buffers` batches ahead."""

    name = "cassandra-py"
    chaos_window: ClassVar[dict[str, Any] | None] = {"concurrency": 4, "batch_size": 8, "prefetch_buffers": 1}
    backend = "cassandra"
    Config = CassandraConfig
    config: CassandraConfig

    @classmethod
    def raw_ceiling(cls, settings: Settings, config: LoaderConfig) -> tuple[int, int]:
        return raw_ceiling(settings, config)

    def __init__(self, settings: Settings, config: LoaderConfig, worker_id: int = 0, num_workers: int = 1) -> None:
        if not isinstance(config, CassandraConfig):
            config = CassandraConfig(**config.model_dump())
        bundle_of(config)  # an unusable secure-connect bundle says so before any epoch
        super().__init__(settings, config, worker_id, num_workers)
        self._reset()
        self._window = make_window(self.config.concurrency)  # kept across epochs: a settled "auto" stays

    def _reset(self) -> None:
        """Connection state: nothing until the first epoch (loaders travel to DataLoader workers)."""
        self._connect_lock = threading.Lock()
        self._cluster: Cluster | None = None
        self._sessions: list[tuple[Session, PreparedStatement]] = []
        self._layout: Layout | None = None
        self._ids: dict[tuple[str, str], list[str]] = {}  # (keyspace, split) -> sorted ids, read once
        self._producers: set[tuple[threading.Thread, threading.Event]] = set()
        self._retry_pool: ThreadPoolExecutor | None = None  # blocking re-reads, off the driver's event loop

    connection_state = ("_connect_lock", "_cluster", "_sessions", "_layout", "_ids", "_producers", "_retry_pool")

    # ------------------------------------------------------------------------------- connection

    def _connect(self) -> tuple[Layout, list[tuple[Session, PreparedStatement]]]:
        with self._connect_lock:
            if self._layout is None:
                self._layout = resolve_layout(self.settings, self.config)
            if not self._sessions:
                cluster = make_cluster(self.settings, self.config, executor_threads=self.config.io_threads)
                try:
                    sessions = [connect(cluster, self.settings, self.config)]
                    # Protocol v3+ gives one connection per host and session: more sessions, more connections.
                    sessions += [cluster.connect() for _ in range(self.config.io_threads - 1)]
                    self._sessions = [(s, prepare(s, self._layout)) for s in sessions]
                except BaseException:
                    cluster.shutdown()
                    raise
                self._cluster = cluster
            return self._layout, self._sessions

    def all_ids(self) -> list[str]:
        """source_uuids, or every id of the split (read once per loader)."""
        if self.config.source_uuids is not None:
            return list(self.config.source_uuids)
        layout, _ = self._connect_retrying()
        key = (layout.keyspace, self.config.split)
        if key not in self._ids:
            self._ids[key] = policy_of(self.config).call(lambda: list_ids(self._connect()[1][0][0], layout),
                                                         f"listing the ids of {layout.ids_table}")
        return self._ids[key]

    def _connect_retrying(self) -> tuple[Layout, list[tuple[Session, PreparedStatement]]]:
        return policy_of(self.config).call(self._connect, "connecting to Cassandra")

    def _retrier(self) -> ThreadPoolExecutor:
        with self._connect_lock:
            if self._retry_pool is None:
                self._retry_pool = ThreadPoolExecutor(pool_size(self.config.concurrency),
                                                      thread_name_prefix="cassandra-retry")
            return self._retry_pool

    def shard_ids(self, epoch: int) -> list[str]:
        c = self.config
        order = epoch_order(self.all_ids(), c.seed, epoch, c.shuffle)
        return take_shard(order, *effective_shard(c.shard_id, c.num_shards, self.worker_id, self.num_workers))

    # ------------------------------------------------------------------------------------ reads

    def _submitter(self, layout: Layout, sessions: Sequence[tuple[Session, PreparedStatement]]):
        where = where_of(self.settings, self.config)
        round_robin = itertools.cycle(sessions)
        with_label = layout.label_col is not None
        policy = policy_of(self.config)
        retrier = self._retrier()
        cluster = self._cluster
        again = itertools.cycle(sessions)

        def read_again(key: str) -> list:
            """One blocking re-read of `key`: the sessions survive a lost server, the driver reconnects them."""
            if self._cluster is not cluster:
                raise WorkbenchError(f"the Cassandra loader was closed while re-reading sample {key}")
            session, statement = next(again)
            return list(session.execute(statement, (uuid.UUID(key),)))

        def submit(key: str) -> Future[Item]:
            future: Future[Item] = Future()

            def retry(first: BaseException) -> None:
                try:
                    rows = policy.call(lambda: read_again(key), f"reading sample {key} from {layout.name} at {where}",
                                       first_error=first)
                except BaseException as exc:  # handed to the waiting consumer
                    failed(exc, retried=True)
                else:
                    done(rows)

            def done(rows: list) -> None:
                if future.cancelled():
                    return
                if not rows:
                    outcome: Item | BaseException = WorkbenchError(
                        f"sample {key} not found in table {layout.name} (id_col {layout.id_col})")
                elif rows[0][0] is None:
                    outcome = WorkbenchError(f"sample {key} in table {layout.name} has no {layout.data_col}")
                else:
                    row = rows[0]
                    outcome = Item(key, row[1] if with_label else None, row[0])
                with contextlib.suppress(InvalidStateError):  # cancelled meanwhile: nobody waits for it
                    if isinstance(outcome, BaseException):
                        future.set_exception(outcome)
                    else:
                        future.set_result(outcome)

            def failed(exc: BaseException, retried: bool = False) -> None:
                if future.cancelled():
                    return
                if not retried and is_transient(exc):  # same key again, off the driver's I/O thread
                    try:
                        retrier.submit(retry, exc)
                        return
                    except RuntimeError:  # the loader is closing: report the original failure
                        pass
                if isinstance(exc, WorkbenchError):  # "gave up on ..." from the policy: already clear
                    with contextlib.suppress(InvalidStateError):
                        future.set_exception(exc)
                    return
                error = WorkbenchError(f"reading sample {key} from {layout.name} at {where} failed: "
                                       f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
                error.__cause__ = exc
                with contextlib.suppress(InvalidStateError):
                    future.set_exception(error)

            session, statement = next(round_robin)
            session.execute_async(statement, (uuid.UUID(key),)).add_callbacks(done, failed)
            return future

        return submit

    def iter_epoch(self, epoch: int) -> Iterator[Item]:
        c = self.config
        keys = self.unread(epoch, self.shard_ids(epoch), key=str)  # resuming: the ids not yet delivered
        if not keys:
            return
        layout, sessions = self._connect_retrying()
        submit = self._submitter(layout, sessions)
        batches: queue.Queue = queue.Queue(maxsize=c.prefetch_buffers)
        stop = threading.Event()

        def put(message: Any) -> bool:
            while not stop.is_set():
                try:
                    batches.put(message, timeout=0.1)
                    return True
                except queue.Full:
                    continue
            return False

        def produce() -> None:
            try:
                batch: list[Item] = []
                # The driver times out every request itself (and RetryPolicy bounds the re-tries); a safety net.
                safety_s = 2 * self.settings.timeout_s + c.retry_budget_s + RetryPolicy().max_s
                reads = in_flight(keys, submit, self._window, c.ordered, timeout_s=safety_s)
                with contextlib.closing(reads):
                    for _, item in reads:
                        batch.append(item)
                        if len(batch) == c.batch_size:
                            if not put(batch):
                                return
                            batch = []
                if batch and not put(batch):
                    return
                put(_END)
            except BaseException as exc:
                put(_Failure(exc))

        thread = threading.Thread(target=produce, name=f"cassandra-prefetch-{self.worker_id}", daemon=True)
        producer = (thread, stop)
        self._producers.add(producer)
        thread.start()
        try:
            while True:
                try:
                    message = batches.get(timeout=0.5)
                except queue.Empty:
                    if not thread.is_alive() and batches.empty():
                        raise WorkbenchError("the Cassandra prefetch thread ended without delivering") from None
                    continue
                if message is _END:
                    return
                if isinstance(message, _Failure):
                    raise message.exc
                yield from message
        finally:
            stop.set()
            thread.join(timeout=2 * self.settings.timeout_s + 1)
            self._producers.discard(producer)

    def close(self) -> None:
        for thread, stop in list(self._producers):
            stop.set()
            thread.join(timeout=2 * self.settings.timeout_s + 1)
        self._producers.clear()
        with self._connect_lock:
            cluster, self._cluster, self._sessions = self._cluster, None, []
            retry_pool, self._retry_pool = self._retry_pool, None
        if retry_pool is not None:
            retry_pool.shutdown(wait=False, cancel_futures=True)
        if cluster is not None:
            cluster.shutdown()


# ---------------------------------------------------------------------------------------- ceiling


def raw_ceiling(settings: Settings, config: LoaderConfig | dict) -> tuple[int, int]:
    """Every sample of the split with the plain driver at `concurrency` in flight: (samples, bytes).

    No loader machinery (no futures, threads, batches, shards): a window of `execute_async` calls on
    the same `io_threads` connections as the loader, always waiting on the oldest. It beats
    `cassandra.concurrent.execute_concurrent_with_args` here (~1800 vs ~1700 samples/s with one connection
    on this machine), which issues each next request from the driver's I/O thread.
    """
    if isinstance(config, dict):
        config = CassandraConfig(**config)
    elif not isinstance(config, CassandraConfig):
        config = CassandraConfig(**config.model_dump())
    layout = resolve_layout(settings, config)
    cluster = make_cluster(settings, config, executor_threads=config.io_threads)
    try:
        sessions = [connect(cluster, settings, config)]
        sessions += [cluster.connect() for _ in range(config.io_threads - 1)]
        statements = itertools.cycle([(s, prepare(s, layout)) for s in sessions])
        ids = config.source_uuids if config.source_uuids is not None else list_ids(sessions[0], layout)
        samples = nbytes = 0
        window: deque = deque()
        for i in ids:
            if len(window) >= fixed_depth(config.concurrency):
                for row in window.popleft().result():
                    samples += 1
                    nbytes += len(row[0] or b"")
            session, statement = next(statements)
            window.append(session.execute_async(statement, (uuid.UUID(i),)))
        while window:
            for row in window.popleft().result():
                samples += 1
                nbytes += len(row[0] or b"")
        return samples, nbytes
    finally:
        cluster.shutdown()
