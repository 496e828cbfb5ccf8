"""Apache Ignite as a training data source: a workbench loader, a tf.data ``IgniteDataset`` and a torch dataset.

Three ways to read the layouts of `workbench.backends.ignite` (binary objects in a PARTITIONED cache keyed
by sample id, or an SQL table whose cache is ``SQL_PUBLIC_<TABLE>``):

* ``IgniteLoader`` (registry name ``ignite``), the benchmark loader, in two modes:

  - ``get_all`` (default): the split's keys are read once per loader (from the small ``<CACHE>_IDS``
    companion cache in binary mode, ``SELECT id ... WHERE split = ?`` in sql mode: a few MB of ids, never
    the images), put in this epoch's order (`epoch_order`), cut to this rank's and DataLoader worker's
    share (`take_shard`), then fetched with ``get_all`` in batches of ``get_batch`` keys with
    ``concurrency`` batches in flight on a thread pool. A pyignite ``Client`` is not thread-safe, so each
    pool thread has its own connection. Exact per-sample shuffling, exactly once across ranks x workers.
  - ``scan``: no key list at all. The cache's partitions are shuffled per epoch (same permutation on every
    rank) and split across ranks x workers; each partition is read by its own scan query with a large
    ``page_size`` (``concurrency`` partitions in flight). Shuffling is therefore only at *partition
    granularity* plus a bounded ``shuffle_buffer`` (seeded) over the resulting stream, like tar shards:
    samples of one partition stay near each other. A scan cannot filter on the server (thin clients have
    no server-side filter without deploying Java code), so it moves every split's objects and drops the
    other splits here. Each empty partition still costs one round trip (1024 partitions by default), and
    up to ``concurrency`` whole partitions are held in memory.

  The key of every `Item` is the sample id string, the label follows ``label_type`` and the data is the
  object's ``data`` (``DATA`` in sql mode) byte array; any other value raises a WorkbenchError naming the
  key and the cache. Nothing connects before the first epoch (loaders travel into DataLoader workers).

* ``IgniteDataset(cache_name, ...)``: the TensorFlow IgniteDataset of the article (``tf.data`` elements
  ``{'key': ..., 'val': {field: tensor, ...}}``, nested dicts for nested binary objects), for any cache:
  workbench binary objects, SQL tables (``SQL_PUBLIC_<TABLE>``: upper-case column names), plain values.
  As in the original, the schema is taken from the first object (homogeneous caches; an empty cache is an
  error) and ``IGNITE_DATASET_HOST`` / ``IGNITE_DATASET_PORT`` / ``IGNITE_DATASET_PART`` in the
  environment override host, port and part (so each node of a cluster can be told its partition).
* ``IgniteTorchDataset``: the same elements as a torch ``IterableDataset``; DataLoader workers (and ranks)
  split the partitions between them.

``raw_ceiling(settings, config)`` is the no-framework reference: a plain threaded ``get_all`` loop.

Login and TLS (all three): ``username``/``password`` default to the settings' Ignite login; with
``WORKBENCH_TLS=1`` every connection uses TLS, the server verified against the stack's CA; IgniteDataset's
``certfile``/``keyfile``/``cert_password`` add a client certificate. Failed logins, TLS mismatches and
untrusted certificates end in one WorkbenchError line naming host:port (see `workbench.clients.connect_ignite`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import re
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, SecretStr

from workbench.clients import connect_ignite, ignite_tls_options
from workbench.concurrency import in_flight
from workbench.config import DEFAULT_CREDENTIALS, Settings
from workbench.errors import WorkbenchError
from workbench.loaders.base import Item, Loader, LoaderConfig
from workbench.loaders.order import effective_shard, epoch_order, shuffle_buffer, take_shard
from workbench.loaders.retry import RETRIES, is_transient, policy_of

if TYPE_CHECKING:
    from pyignite import Client

log = logging.getLogger(__name__)
logging.getLogger("pyignite").setLevel(logging.CRITICAL)  # tracebacks per refused connection; we raise our own

ID_PAGE_SIZE = 5000  # ids are ~40 bytes: one round trip per 5000 keys
DEFAULT_PARTITIONS = 1024
ENV_HOST, ENV_PORT, ENV_PART = "IGNITE_DATASET_HOST", "IGNITE_DATASET_PORT", "IGNITE_DATASET_PART"
_PARTS = re.compile(r"parts=(\d+)")


# ------------------------------------------------------------------------------------------ connections


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
                              "ca_file": _ca_file(settings)}
    values.update({k: v for k, v in overrides.items() if v is not None})
    return Endpoint(**values)


def _ca_file(settings: Settings) -> str | None:
    """The CA that verifies the server: the stack's with settings.tls, else WORKBENCH_TLS_CA_FILE if set (used
    when a client certificate turns TLS on; without either, as TF's IgniteDataset, the server is not verified)."""
    if settings.tls:
        return str(settings.ca_file())
    return str(settings.tls_ca_file) if settings.tls_ca_file else None


class _ThreadClients:
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
            _close_quietly(client)

    def close(self) -> None:
        with self.lock:
            clients, self.clients = self.clients, []
        for client in clients:
            _close_quietly(client)


def _close_quietly(client: Client) -> None:
    with contextlib.suppress(Exception):  # closing a broken connection must not hide the real error
        client.close()


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    return text.splitlines()[0][:300] if text else type(exc).__name__


def _ignite_errors() -> tuple[type[BaseException], ...]:
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
    except _ignite_errors():
        pass
    try:
        with client.sql("SELECT AFFINITY FROM SYS.CACHES WHERE CACHE_NAME = ?", query_args=[cache_name]) as cur:
            rows = list(cur)
        if rows and (m := _PARTS.search(str(rows[0][0]))):
            return int(m.group(1))
    except _ignite_errors():
        pass
    if fallback:
        return fallback
    raise WorkbenchError(f"cannot learn the partition count of Ignite cache {cache_name}")


def _scan_cursor(client: Client, cache_name: str, page_size: int, partition: int, local: bool):
    return client.get_cache(cache_name).scan(page_size=page_size, partitions=partition, local=local)


# --------------------------------------------------------------------------------------- sample objects


def field(value: Any, name: str) -> Any:
    """A field of a binary object by its name as written (binary mode) or upper-cased (SQL columns)."""
    found = getattr(value, name, None)
    if found is None and not isinstance(value, str | bytes | bytearray | int | float):
        found = getattr(value, name.upper(), None)
    return found


def _describe(value: Any) -> str:
    schema = getattr(type(value), "_schema", None)
    if schema:
        return f"a {type(value).__name__} object with fields {', '.join(schema)}"
    return f"a {type(value).__name__} ({repr(value)[:60]})"


def sample_item(key: Any, value: Any, cache_name: str, label_type: str) -> Item:
    """An Item from one cache entry of the workbench layout, or a WorkbenchError naming key and cache."""
    data = field(value, "data")
    if not isinstance(data, bytes | bytearray):
        raise WorkbenchError(
            f"Ignite cache {cache_name}: key {key!r} holds {_describe(value)}, not an object with a byte[] "
            "'data' field (id, split, label, data, ...): not a workbench sample; re-ingest or choose another cache"
        )
    label: int | bytes | None = None
    if label_type != "none":
        raw = field(value, "label")
        if raw is not None:
            if label_type == "int":
                if isinstance(raw, bytes | bytearray | bool) or not isinstance(raw, int):
                    raise WorkbenchError(
                        f"Ignite cache {cache_name}: key {key!r} has a {type(raw).__name__} label but label_type "
                        "is int: use label_type blob (or none)"
                    )
                label = int(raw)
            else:
                if not isinstance(raw, bytes | bytearray):
                    raise WorkbenchError(
                        f"Ignite cache {cache_name}: key {key!r} has a {type(raw).__name__} label but label_type "
                        "is blob: use label_type int (or none)"
                    )
                label = bytes(raw)
    return Item(str(key), label, bytes(data))


def _split_of(value: Any) -> str:
    return field(value, "split") or "train"


# ------------------------------------------------------------------------------------------------ loader


class IgniteLoaderConfig(LoaderConfig):
    cache_name: str | None = Field(None, description="cache to read (default: the catalog's, as ingested)")
    mode: Literal["get_all", "scan"] = Field("get_all", description="key batches, or partition scans")
    get_batch: int = Field(64, ge=1, le=100_000, description="get_all: keys per request")
    page_size: int = Field(100, ge=1, le=1_000_000, description="scan: entries per page (never pyignite's 1)")
    shuffle_buffer: int = Field(1000, ge=0, le=1_000_000, description="scan: samples in the shuffle buffer")
    local: bool = Field(False, description="scan: only the entries of the node the client is connected to")
    username: str | None = Field(None, description="default: settings.ignite_username")
    password: SecretStr | None = Field(None, description="default: settings.ignite_password")
    certfile: str | None = Field(None, description="client certificate (PEM, may hold the key too): connect with "
                                                   "SSL (with WORKBENCH_TLS=1 SSL is on anyway, server verified)")
    keyfile: str | None = Field(None, description="client private key (PEM), when not in certfile")
    cert_password: SecretStr | None = Field(None, description="password of the private key")
    retries: int = Field(RETRIES, ge=0, le=1000, description="re-tries of a get_all batch after a transient failure")
    retry_budget_s: float = Field(30.0, ge=0, description="time limit of one get_all batch and its re-tries")


class IgniteLoader(Loader):
    name = "ignite"
    backend = "ignite"
    Config = IgniteLoaderConfig
    config: IgniteLoaderConfig

    def __init__(self, settings: Settings, config: LoaderConfig, worker_id: int = 0, num_workers: int = 1) -> None:
        super().__init__(settings, config, worker_id, num_workers)
        c = self.config
        self.endpoint = settings_endpoint(
            settings, c.via_proxy, username=c.username,
            password=c.password.get_secret_value() if c.password else None, certfile=c.certfile,
            keyfile=c.keyfile, cert_password=c.cert_password.get_secret_value() if c.cert_password else None,
        )
        self._layout: dict | None = None
        self._keys: list[str] | None = None
        self._partitions: int | None = None
        self._clients: _ThreadClients | None = None
        self._pool: ThreadPoolExecutor | None = None

    # pickling (DataLoader workers, spawn): settings and config travel, connections and threads never do
    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        for name in ("_lock", "_clients", "_pool"):
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._clients = None
        self._pool = None

    # ------------------------------------------------------------------------------- layout

    @property
    def layout(self) -> dict:
        """The catalog entry of the dataset (or the backend's default layout), read once."""
        if self._layout is None:
            from workbench import catalog

            self._layout = catalog.locate(self.settings, "ignite", self.config.dataset)
        return self._layout

    @property
    def cache_name(self) -> str:
        return self.config.cache_name or self.layout.get("cache") or self.config.dataset.upper()

    def _ensure_pool(self) -> tuple[_ThreadClients, ThreadPoolExecutor]:
        if self._clients is None:
            self._clients = _ThreadClients(self.endpoint)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.config.concurrency, thread_name_prefix="ignite-read")
        return self._clients, self._pool

    def split_keys(self) -> list[str]:
        """Ids of this split, sorted (every rank must start from the same list); read once per loader."""
        if self._keys is None:
            clients, _ = self._ensure_pool()
            self._keys = policy_of(self.config).call(
                lambda: list_split_keys(clients.get(), self.endpoint.where, self.layout, self.cache_name,
                                        self.config.split),
                f"listing the ids of Ignite cache {self.cache_name}", on_retry=lambda _: clients.discard())
        return self._keys

    def partitions(self) -> int:
        if self._partitions is None:
            clients, _ = self._ensure_pool()
            client = clients.get()
            require_cache(client, self.cache_name, self.endpoint.where, "ingest the dataset first")
            self._partitions = partition_count(client, self.cache_name, self.layout.get("partitions"))
        return self._partitions

    # ------------------------------------------------------------------------------- reading

    def iter_epoch(self, epoch: int) -> Iterator[Item]:
        if self.config.mode == "scan":
            return self._scan_epoch(epoch)
        return self._get_all_epoch(epoch)

    def _shard(self) -> tuple[int, int]:
        c = self.config
        return effective_shard(c.shard_id, c.num_shards, self.worker_id, self.num_workers)

    def _get_all_epoch(self, epoch: int) -> Iterator[Item]:
        c = self.config
        keys = take_shard(epoch_order(self.split_keys(), c.seed, epoch, c.shuffle), *self._shard())
        batches = [keys[i:i + c.get_batch] for i in range(0, len(keys), c.get_batch)]
        _, pool = self._ensure_pool()
        for _, items in in_flight(range(len(batches)), lambda i: pool.submit(self._get_batch, batches[i]),
                                  c.concurrency, c.ordered):
            yield from items

    def _get_all(self, keys: list[str]) -> dict:
        """One get_all on this thread's client; a broken connection is dropped, so a retry reconnects."""
        assert self._clients is not None
        try:
            return self._clients.get().get_cache(self.cache_name).get_all(keys)
        except _ignite_errors() as exc:
            self._clients.discard()
            if is_transient(exc) or isinstance(exc, OSError | EOFError):  # pyignite: OSError("Connection broken.")
                # RetryPolicy re-submits the same keys on a new connection
                raise ConnectionError(f"Ignite connection lost: {type(exc).__name__}: {_first_line(exc)}") from exc
            if "Cache does not exist" in str(exc):
                raise WorkbenchError(
                    f"Ignite cache {self.cache_name} at {self.endpoint.where} no longer exists (the node restarted? "
                    f"its caches live in memory): re-run the ingest of '{self.config.dataset}' into ignite"
                ) from exc
            raise WorkbenchError(
                f"get_all of {len(keys)} keys from Ignite cache {self.cache_name} at {self.endpoint.where} failed: "
                f"{type(exc).__name__}: {_first_line(exc)}"
            ) from exc

    def _get_batch(self, keys: list[str]) -> list[Item]:
        values = policy_of(self.config).call(
            lambda: self._get_all(keys),
            f"get_all of {len(keys)} keys from Ignite cache {self.cache_name} at {self.endpoint.where}")
        items = []
        for key in keys:
            if key not in values:
                raise WorkbenchError(
                    f"Ignite cache {self.cache_name}: sample {key} of split '{self.config.split}' is listed but "
                    "has no object (deleted since the ingest?): re-run the ingest"
                )
            items.append(sample_item(key, values[key], self.cache_name, self.config.label_type))
        return items

    def _scan_epoch(self, epoch: int) -> Iterator[Item]:
        c = self.config
        index, count = self._shard()
        parts = take_shard(epoch_order(range(self.partitions()), c.seed, epoch, c.shuffle), index, count)
        _, pool = self._ensure_pool()
        stream = (item for _, items in in_flight(parts, lambda p: pool.submit(self._scan_partition, p),
                                                 c.concurrency, c.ordered) for item in items)
        if c.shuffle and c.shuffle_buffer > 1:
            stream = shuffle_buffer(stream, c.shuffle_buffer, random.Random(f"{c.seed}:{epoch}:{index}"))
        yield from stream

    def _scan_partition(self, partition: int) -> list[Item]:
        assert self._clients is not None
        c = self.config
        items = []
        try:
            with _scan_cursor(self._clients.get(), self.cache_name, c.page_size, partition, c.local) as cursor:
                for key, value in cursor:
                    if field(value, "data") is not None and _split_of(value) != c.split:
                        continue
                    items.append(sample_item(key, value, self.cache_name, c.label_type))
        except _ignite_errors() as exc:
            self._clients.discard()
            raise WorkbenchError(
                f"scan of partition {partition} of Ignite cache {self.cache_name} at {self.endpoint.where} failed: "
                f"{type(exc).__name__}: {_first_line(exc)}"
            ) from exc
        return items

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        if self._clients is not None:
            self._clients.close()
            self._clients = None

    @classmethod
    def raw_ceiling(cls, settings: Settings, config: LoaderConfig | dict) -> tuple[int, int]:
        return raw_ceiling(settings, config)


def list_split_keys(client: Client, where: str, layout: dict, cache_name: str, split: str) -> list[str]:
    """Sorted ids of one split: from the ids cache (binary), ``SELECT id`` (sql) or, failing both, a key scan."""
    require_cache(client, cache_name, where, "ingest the dataset first (or pass the right cache_name)")
    names = set(client.get_cache_names())
    same_cache = layout.get("cache") in (None, cache_name)
    ids_cache = layout.get("ids_cache") if same_cache and layout.get("ids_cache") else f"{cache_name}_IDS"
    splits: set[str] = set()
    keys: list[str] = []
    try:
        if layout.get("mode") == "sql" and same_cache and layout.get("table"):
            with client.sql(f"SELECT id, split FROM {layout['table']}", page_size=ID_PAGE_SIZE) as cursor:
                for key, s in cursor:
                    splits.add(s or "train")
                    if (s or "train") == split:
                        keys.append(str(key))
        elif ids_cache in names:
            with client.get_cache(ids_cache).scan(page_size=ID_PAGE_SIZE) as cursor:
                for key, s in cursor:
                    splits.add(s or "train")
                    if (s or "train") == split:
                        keys.append(str(key))
        else:  # a cache written by something else: learn the keys by scanning it (moves every object once)
            log.warning("Ignite cache %s has no ids cache: listing its keys with a full scan", cache_name)
            with client.get_cache(cache_name).scan(page_size=100) as cursor:
                for key, value in cursor:
                    s = _split_of(value)
                    splits.add(s)
                    if s == split:
                        keys.append(str(key))
    except _ignite_errors() as exc:
        raise WorkbenchError(
            f"listing the ids of Ignite cache {cache_name} at {where} failed: {type(exc).__name__}: {_first_line(exc)}"
        ) from exc
    if not keys:
        raise WorkbenchError(
            f"Ignite cache {cache_name} holds no sample of split '{split}' "
            f"(splits found: {', '.join(sorted(splits)) or 'none'})"
        )
    return sorted(keys)


def raw_ceiling(settings: Settings, config: LoaderConfig | dict) -> tuple[int, int]:
    """(samples, bytes) of a plain get_all loop over every key of the split at ``concurrency`` threads.

    No ordering, no sharding, no Items: what this client library and server deliver at best.
    """
    c = config if isinstance(config, IgniteLoaderConfig) else IgniteLoaderConfig(
        **(config.model_dump() if isinstance(config, LoaderConfig) else config))
    loader = IgniteLoader(settings, c)
    try:
        keys = loader.split_keys()
        clients, pool = loader._ensure_pool()
        cache_name = loader.cache_name

        def fetch(batch: list[str]) -> tuple[int, int]:
            values = clients.get().get_cache(cache_name).get_all(batch)
            return len(values), sum(len(field(v, "data") or b"") for v in values.values())

        batches = [keys[i:i + c.get_batch] for i in range(0, len(keys), c.get_batch)]
        samples = nbytes = 0
        for n, b in pool.map(fetch, batches):
            samples += n
            nbytes += b
        return samples, nbytes
    finally:
        loader.close()


# ------------------------------------------------------------------------------- IgniteDataset (tf.data)


_LEAVES: dict[str, tuple[str, bool]] = {  # pyignite type name -> (dtype name, is a 1-D array)
    "String": ("string", False), "CharObject": ("string", False), "Char": ("string", False),
    "ByteArrayObject": ("string", False), "ByteArray": ("string", False),
    "ByteObject": ("int32", False), "Byte": ("int32", False), "ShortObject": ("int32", False),
    "Short": ("int32", False), "IntObject": ("int32", False), "Int": ("int32", False),
    "LongObject": ("int64", False), "Long": ("int64", False),
    "FloatObject": ("float32", False), "Float": ("float32", False),
    "DoubleObject": ("float64", False), "Double": ("float64", False),
    "BoolObject": ("bool", False), "Bool": ("bool", False),
    "UUIDObject": ("string", False),
    "ShortArrayObject": ("int32", True), "ShortArray": ("int32", True),
    "IntArrayObject": ("int32", True), "IntArray": ("int32", True),
    "LongArrayObject": ("int64", True), "LongArray": ("int64", True),
    "FloatArrayObject": ("float32", True), "FloatArray": ("float32", True),
    "DoubleArrayObject": ("float64", True), "DoubleArray": ("float64", True),
    "BoolArrayObject": ("bool", True), "BoolArray": ("bool", True),
    "StringArrayObject": ("string", True),
}
_DEFAULTS: dict[str, Any] = {"string": b"", "int32": 0, "int64": 0, "float32": 0.0, "float64": 0.0, "bool": False}


@dataclass
class Node:
    """The schema of one value: a leaf (dtype, array or not) or an object (fields -> nodes)."""

    dtype: str | None = None
    array: bool = False
    fields: dict[str, Node] | None = None

    def spec(self):
        from workbench.tf_import import tensorflow
        tf = tensorflow()

        if self.fields is not None:
            return {name: child.spec() for name, child in self.fields.items()}
        return tf.TensorSpec((None,) if self.array else (), getattr(tf, self.dtype or "string"))

    def convert(self, value: Any, where: str) -> Any:
        """The value as nested python dicts/lists of what tf converts to this node's spec."""
        if self.fields is not None:
            schema = getattr(type(value), "_schema", None)
            if not schema:
                raise WorkbenchError(f"{where} holds {_describe(value)}, not an object like the first one "
                                     "(IgniteDataset needs homogeneous caches)")
            return {name: child.convert(getattr(value, name, None), f"{where}.{name}")
                    for name, child in self.fields.items()}
        if value is None:
            return [] if self.array else _DEFAULTS[self.dtype or "string"]
        try:
            if self.array:
                return [_leaf(v, self.dtype) for v in value]
            return _leaf(value, self.dtype)
        except (TypeError, ValueError, OverflowError) as exc:  # Overflow: float(10**400), int(Decimal('inf'))
            raise WorkbenchError(f"{where} holds {_describe(value)}, not a {self.dtype}"
                                 f"{' array' if self.array else ''} like the first object ({exc})") from None


def _leaf(value: Any, dtype: str | None) -> Any:
    if dtype == "string":
        if isinstance(value, bytes | bytearray | memoryview):
            return bytes(value)
        if isinstance(value, str):
            return value.encode()
        if type(value).__name__ == "UUID":
            return str(value).encode()
        raise TypeError(f"{type(value).__name__} is not bytes or str")
    if dtype == "bool":
        return bool(value)
    if dtype in ("int32", "int64"):
        if isinstance(value, float | str | bytes):
            raise TypeError(f"{type(value).__name__} is not an integer")
        number, bits = int(value), 31 if dtype == "int32" else 63
        if not -(1 << bits) <= number < 1 << bits:  # tf.data would fail later, far from the entry
            raise ValueError(f"{number} is out of the {dtype} range")
        return number
    return float(value)


def infer_schema(value: Any, where: str) -> Node:
    """The schema of a value: a binary object's declared field types, else the python type of the value."""
    schema = getattr(type(value), "_schema", None)
    if schema:
        fields = {}
        for name, ignite_type in schema.items():
            type_name = getattr(ignite_type, "__name__", str(ignite_type))
            if type_name in _LEAVES:
                dtype, array = _LEAVES[type_name]
                fields[name] = Node(dtype, array)
            else:
                fields[name] = infer_schema(getattr(value, name, None), f"{where}.{name}")
        return Node(fields=fields)
    if isinstance(value, bytes | bytearray | memoryview | str) or type(value).__name__ == "UUID":
        return Node("string")
    if isinstance(value, bool):
        return Node("bool")
    if isinstance(value, int):
        return Node("int64")
    if isinstance(value, float):
        return Node("float64")
    if isinstance(value, list | tuple) and value and not isinstance(value[0], list | tuple | dict):
        return Node(infer_schema(value[0], where).dtype, array=True)
    if value is None:
        raise WorkbenchError(f"{where} is null in the first object: its type cannot be inferred")
    raise WorkbenchError(f"{where} is a {type(value).__name__}: IgniteDataset supports neither maps, object "
                         "arrays nor collections (see the article's limitations)")


def to_python(value: Any) -> Any:
    """Binary objects as nested dicts (for torch), byte arrays as bytes; other values unchanged."""
    schema = getattr(type(value), "_schema", None)
    if schema:
        return {name: to_python(getattr(value, name, None)) for name in schema}
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    return value


@dataclass
class DatasetSource:
    """What IgniteDataset and IgniteTorchDataset read: one cache, where, which partition, which pages."""

    cache_name: str
    endpoint: Endpoint
    part: int = -1
    local: bool = False
    page_size: int = 100

    def first(self) -> tuple[Any, Any]:
        """The first entry of the cache (whole cache, not only `part`): it defines the schema."""
        client = self.endpoint.connect()
        try:
            require_cache(client, self.cache_name, self.endpoint.where)
            try:
                with _scan_cursor(client, self.cache_name, 1, -1, self.local) as cursor:
                    for key, value in cursor:
                        return key, value
            except _ignite_errors() as exc:
                raise WorkbenchError(f"reading Ignite cache {self.cache_name} at {self.endpoint.where} failed: "
                                     f"{type(exc).__name__}: {_first_line(exc)}") from exc
        finally:
            _close_quietly(client)
        raise WorkbenchError(f"Ignite cache {self.cache_name} at {self.endpoint.where} is empty: IgniteDataset takes "
                             "its schema from the first object, so the cache needs at least one")

    def entries(self, partitions: list[int] | None = None) -> Iterator[tuple[Any, Any]]:
        """(key, value) of `partitions` (default: `part`, -1 = the whole cache in one scan)."""
        client = self.endpoint.connect()
        try:
            for partition in partitions if partitions is not None else [self.part]:
                try:
                    with _scan_cursor(client, self.cache_name, self.page_size, partition, self.local) as cursor:
                        yield from cursor
                except _ignite_errors() as exc:
                    raise WorkbenchError(
                        f"scan of Ignite cache {self.cache_name} (partition {partition}) at {self.endpoint.where} "
                        f"failed: {type(exc).__name__}: {_first_line(exc)}") from exc
        finally:
            _close_quietly(client)

    def partitions(self) -> int:
        client = self.endpoint.connect()
        try:
            require_cache(client, self.cache_name, self.endpoint.where)
            return partition_count(client, self.cache_name)
        finally:
            _close_quietly(client)


def dataset_source(cache_name: str, host: str | None = None, port: int | None = None, local: bool = False,
                   part: int = -1, page_size: int = 100, username: str | None = None, password: str | None = None,
                   certfile: str | None = None, keyfile: str | None = None, cert_password: str | None = None,
                   settings: Settings | None = None, via_proxy: bool = False) -> DatasetSource:
    """Arguments of the original IgniteDataset, with its environment overrides, resolved to a source."""
    if not cache_name:
        raise WorkbenchError("IgniteDataset needs a cache name")
    if page_size < 1:
        raise WorkbenchError(f"page_size must be >= 1, got {page_size}")
    settings = settings or Settings()
    host = os.environ.get(ENV_HOST) or host
    port = _env_int(ENV_PORT, port)
    part = _env_int(ENV_PART, part)
    endpoint = settings_endpoint(settings, via_proxy, host=host, port=port, username=username, password=password,
                                 certfile=certfile, keyfile=keyfile, cert_password=cert_password)
    return DatasetSource(cache_name, endpoint, -1 if part is None else int(part), local, page_size)


def _env_int(name: str, value: int | None) -> int | None:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return value
    try:
        return int(raw)
    except ValueError:
        raise WorkbenchError(f"environment variable {name}={raw!r} is not an integer") from None


def IgniteDataset(cache_name: str, host: str | None = None, port: int | None = None, local: bool = False,
                  part: int = -1, page_size: int = 100, username: str | None = None, password: str | None = None,
                  certfile: str | None = None, keyfile: str | None = None, cert_password: str | None = None,
                  settings: Settings | None = None):
    """A tf.data.Dataset of the cache's entries as ``{'key': key, 'val': {field: tensor, ...}}``.

    The TensorFlow IgniteDataset of the article: one scan of the cache (or of partition `part` alone) in
    pages of `page_size` entries; `local` reads only the entries held by the node connected to. The
    schema (tensor types, nesting) comes from the first object: bytes and strings -> tf.string, Ignite
    int/short/byte -> tf.int32, long -> tf.int64, float/double, bool, primitive arrays -> 1-D tensors,
    nested binary objects -> nested dicts; null fields become 0 / b"" / []. Host and port default to the
    workbench settings; ``IGNITE_DATASET_HOST``, ``IGNITE_DATASET_PORT`` and ``IGNITE_DATASET_PART`` in the
    environment override host, port and part (the article's per-node override). Every iteration is a
    new scan; unreachable servers and empty caches fail here with a WorkbenchError.
    """
    from workbench.tf_import import tensorflow
    tf = tensorflow()

    source = dataset_source(cache_name, host, port, local, part, page_size, username, password, certfile,
                            keyfile, cert_password, settings)
    first_key, first_value = source.first()
    key_node = infer_schema(first_key, f"Ignite cache {cache_name}: key")
    val_node = infer_schema(first_value, f"Ignite cache {cache_name}: key {first_key!r}")
    signature = {"key": key_node.spec(), "val": val_node.spec()}

    def generate() -> Iterator[dict]:
        for key, value in source.entries():
            where = f"Ignite cache {cache_name}: key {key!r}"
            yield {"key": key_node.convert(key, where), "val": val_node.convert(value, where)}

    return tf.data.Dataset.from_generator(generate, output_signature=signature)


def __getattr__(name: str) -> Any:
    """`IgniteTorchDataset` is built on first use, so importing this module (the loader) never imports torch."""
    if name == "IgniteTorchDataset":
        cls = _torch_dataset_class()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _torch_dataset_class() -> type:
    from torch.utils.data import IterableDataset

    return type("IgniteTorchDataset", (_IgniteTorchDataset, IterableDataset), {"__module__": __name__})


class _IgniteTorchDataset:
    """The IgniteDataset elements ``{'key': key, 'val': {field: value}}`` as a torch IterableDataset.

    Values stay python values (bytes, ints, nested dicts: decode in a transform/collate). Ranks
    (`shard_id` of `num_shards`) and DataLoader workers split the cache's partitions between them, so
    together they read every entry exactly once; with `part` >= 0 only that partition is read (by the
    first worker). `shuffle` permutes the partition order per `set_epoch` (same on every rank).
    """

    def __init__(self, cache_name: str, host: str | None = None, port: int | None = None, local: bool = False,
                 part: int = -1, page_size: int = 100, username: str | None = None, password: str | None = None,
                 certfile: str | None = None, keyfile: str | None = None, cert_password: str | None = None,
                 settings: Settings | None = None, shard_id: int = 0, num_shards: int = 1, shuffle: bool = False,
                 seed: int = 0, transform: Callable[[dict], Any] | None = None) -> None:
        self.source = dataset_source(cache_name, host, port, local, part, page_size, username, password, certfile,
                                     keyfile, cert_password, settings)
        effective_shard(shard_id, num_shards)  # validates
        self.shard_id, self.num_shards = shard_id, num_shards
        self.shuffle, self.seed, self.epoch = shuffle, seed, 0
        self.transform = transform
        self._partitions: int | None = None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[Any]:
        from torch.utils.data import get_worker_info

        info = get_worker_info()
        worker_id, num_workers = (info.id, info.num_workers) if info else (0, 1)
        index, count = effective_shard(self.shard_id, self.num_shards, worker_id, num_workers)
        if self.source.part >= 0:
            parts = [self.source.part] if index == 0 else []
        elif count == 1 and not self.shuffle:
            parts = [-1]  # one reader, no shuffling: one scan of the whole cache
        else:
            if self._partitions is None:
                self._partitions = self.source.partitions()
            order = epoch_order(range(self._partitions), self.seed, self.epoch, self.shuffle)
            parts = take_shard(order, index, count)
        if not parts:
            return
        for key, value in self.source.entries(parts):
            element = {"key": to_python(key), "val": to_python(value)}
            yield self.transform(element) if self.transform else element
