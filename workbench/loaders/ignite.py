"""Apache Ignite as a training data source: the workbench loader (TF's IgniteDataset: `workbench.compat`).

How ``IgniteLoader`` reads the layouts of `workbench.backends.ignite` (binary objects in a PARTITIONED cache keyed
by sample id, or an SQL table whose cache is ``SQL_PUBLIC_<TABLE>``):

* ``IgniteLoader`` (registry name ``ignite``), the benchmark loader, in two modes:

  - ``get_all`` (default): the split's keys are read once per loader (from the small ``<CACHE>_IDS``
    companion cache in binary mode, read with `scan_scalars` and scanned again while it saw fewer ids than the
    cache holds (`scan_whole`: a scan misses partitions moving between nodes); ``SELECT id, split`` in sql
    mode: a few MB of ids, never the images), put in this epoch's order (`epoch_order`), cut to this rank's and
    DataLoader worker's share (`take_shard`), then fetched with ``get_all`` in batches of ``get_batch`` keys
    with ``concurrency`` batches in flight (under "auto", at most ``READ_BUDGET`` bytes of batches:
    `workbench.concurrency`). ``client="aio"`` (default): one pyignite ``AioClient`` connection on an
    asyncio loop in a thread of its own carries the whole window (each answer received into a buffer of its
    own size, `workbench.clients.ignite.FramedProtocol`); the consumer only takes finished batches.
    ``client="sync"``: a thread pool, one connection per thread (a pyignite ``Client`` is not thread-safe).
    Either way ``decode="fast"`` (default) reads the answers with struct/memoryview
    (`workbench.clients.ignite.FastGetAll`) instead of pyignite's per-object ctypes decoding, which cost
    ~1 ms of CPU per 110 KB sample; what it does not know goes to pyignite. Exact per-sample shuffling,
    exactly once across ranks x workers. With more than one node and a partition-aware client (``sync``
    always, ``aio`` with ``partition_aware``) a batch is split by the keys' primary nodes and each part
    sent to its node (`key_groups`). Measured (issue 13, 2-core machine, same run, median of 3):
    aio + fast ~1.0x the Java thin-client ceiling at ~1/4 of the sync loader's CPU per sample; several
    fetch processes and partition awareness (one node) did not beat it.
  - ``scan``: no key list at all. The cache's partitions are shuffled per epoch (same permutation on every
    rank) and split across ranks x workers; each partition is read by its own scan query with a large
    ``page_size`` (``concurrency`` partitions in flight). Shuffling is therefore only at *partition
    granularity* plus a bounded ``shuffle_buffer`` (seeded) over the resulting stream, like tar shards:
    samples of one partition stay near each other. A scan cannot filter on the server (thin clients have
    no server-side filter without deploying Java code), so it moves every split's objects and drops the
    other splits here. Each empty partition still costs one round trip (1024 partitions by default), and
    up to ``concurrency`` whole partitions are held in memory.

  Resuming mid-epoch (a loaded `state_dict`): ``get_all`` skips the keys already delivered; ``scan`` does not
  know how many samples of the split each partition holds, so it scans the epoch again and drops them.

  The key of every `Item` is the sample id string, the label follows ``label_type`` and the data is the
  object's ``data`` (``DATA`` in sql mode) byte array; any other value raises a WorkbenchError naming the
  key and the cache. Nothing connects before the first epoch (loaders travel into DataLoader workers).

``raw_ceiling(settings, config)`` is the no-framework reference: a plain threaded ``get_all`` loop.

Login and TLS: ``username``/``password`` default to the settings' Ignite login; with ``WORKBENCH_TLS=1``
every connection uses TLS, the server verified against the stack's CA. Failed logins, TLS mismatches and
untrusted certificates end in one WorkbenchError line naming host:port (`workbench.clients.ignite`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, SecretStr

from workbench.backends import locate
from workbench.clients.ignite import (
    AioClients,
    FastGetAll,
    ThreadClients,
    UnusualScan,
    ignite_errors,
    partition_count,
    require_cache,
    scan_cursor,
    scan_scalars,
    scan_whole,
    schema_names,
    schema_names_async,
    settings_endpoint,
)
from workbench.concurrency import (
    AutoWindow,
    EventLoopThread,
    HasWindow,
    budget_depth,
    fixed_depth,
    in_flight,
    make_window,
    pool_size,
)
from workbench.config import Settings
from workbench.errors import WorkbenchError, first_line
from workbench.loaders.base import Item, Loader, LoaderConfig, RequestModel
from workbench.loaders.order import effective_shard, epoch_order, shuffle_buffer, take_shard
from workbench.loaders.retry import RetryConfig, is_transient, policy_of

if TYPE_CHECKING:
    from pyignite import Client

log = logging.getLogger(__name__)
logging.getLogger("pyignite").setLevel(logging.CRITICAL)  # tracebacks per refused connection; we raise our own

ID_PAGE_SIZE = 5000  # ids are ~40 bytes: one round trip per 5000 keys


# --------------------------------------------------------------------------------------- sample objects


def field(value: Any, name: str) -> Any:
    """A field of a binary object by its name as written (binary mode) or upper-cased (SQL columns)."""
    found = getattr(value, name, None)
    if found is None and not isinstance(value, str | bytes | bytearray | int | float):
        found = getattr(value, name.upper(), None)
    return found


def describe_value(value: Any) -> str:
    schema = getattr(type(value), "_schema", None)
    if schema:
        return f"a {type(value).__name__} object with fields {', '.join(schema)}"
    return f"a {type(value).__name__} ({repr(value)[:60]})"


def sample_item(key: Any, value: Any, cache_name: str, label_type: str) -> Item:
    """An Item from one cache entry of the workbench layout, or a WorkbenchError naming key and cache."""
    data = field(value, "data")
    if not isinstance(data, bytes | bytearray):
        raise WorkbenchError(
            f"Ignite cache {cache_name}: key {key!r} holds {describe_value(value)}, not an object with a byte[] "
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


class IgniteLoaderConfig(LoaderConfig, RetryConfig):
    cache_name: str | None = Field(None, description="cache to read (default: the catalog's, as ingested)")
    mode: Literal["get_all", "scan"] = Field("get_all", description="key batches, or partition scans")
    client: Literal["aio", "sync"] = Field(
        "aio", description="get_all: one asyncio connection with the whole window in flight on a loop thread (aio), "
                           "or a thread pool with a connection per thread (sync)")
    partition_aware: bool = Field(False, description="aio: pyignite's partition awareness (a connection per node, "
                                                     "each get_all batch split by the keys' primary nodes)")
    decode: Literal["fast", "pyignite"] = Field(
        "fast", description="get_all: read answers with struct/memoryview (fast; pyignite decodes what it does not "
                            "know), or let pyignite decode every object (~1 ms of CPU per 110 KB sample)")
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


class IgniteLoader(HasWindow, Loader):
    name = "ignite"
    request_model = RequestModel("one get_all of `get_batch` keys", per_request="get_batch")
    chaos_window: ClassVar[dict[str, Any] | None] = {"concurrency": 2, "get_batch": 8}
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
        self._clients: ThreadClients | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._window = make_window(c.concurrency)  # batches in flight; "auto" widens it while the rate rises
        self._fast = FastGetAll()  # field names of the schemas seen (plain data: travels with the loader)
        self._aio: EventLoopThread | None = None
        self._aio_clients: AioClients | None = None
        self._retry_pool: ThreadPoolExecutor | None = None

    # pickling (DataLoader workers, spawn): settings and config travel, connections and threads never do
    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        for name in ("_lock", "_clients", "_pool", "_aio", "_aio_clients", "_retry_pool"):
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._clients = None
        self._pool = None
        self._aio = None
        self._aio_clients = None
        self._retry_pool = None

    # ------------------------------------------------------------------------------- layout

    @property
    def layout(self) -> dict:
        """The catalog entry of the dataset (or the backend's default layout), read once."""
        if self._layout is None:
            self._layout = locate(self.settings, "ignite", self.config.dataset)
        return self._layout

    @property
    def cache_name(self) -> str:
        return self.config.cache_name or self.layout.get("cache") or self.config.dataset.upper()

    def _ensure_pool(self) -> tuple[ThreadClients, ThreadPoolExecutor]:
        if self._clients is None:
            self._clients = ThreadClients(self.endpoint)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(pool_size(self.config.concurrency), thread_name_prefix="ignite-read")
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
        keys = self.unread(epoch, take_shard(epoch_order(self.split_keys(), c.seed, epoch, c.shuffle), *self._shard()),
                           key=str)
        batches = [keys[i:i + c.get_batch] for i in range(0, len(keys), c.get_batch)]
        if c.client == "aio":
            loop = self._ensure_aio()
            submit = lambda i: loop.submit(self._aio_batch(batches[i]))  # noqa: E731
        else:
            _, pool = self._ensure_pool()
            submit = lambda i: pool.submit(self._get_batch, batches[i])  # noqa: E731
        for _, items in in_flight(range(len(batches)), submit, self._window, c.ordered):
            yield from items

    def _get_all(self, keys: list[str]) -> dict:
        """One get_all on this thread's client; a broken connection is dropped, so a retry reconnects."""
        assert self._clients is not None
        try:
            client = self._clients.get()
            cache = client.get_cache(self.cache_name)
            if self.config.decode == "fast":
                values = self._fast_get_all(client, cache, keys)
                if values is not None:
                    return values
            return cache.get_all(keys)
        except ignite_errors() as exc:
            self._clients.discard()
            raise self._get_all_error(keys, exc) from exc

    def _get_all_error(self, keys: list[str], exc: BaseException) -> Exception:
        """A lost connection as ConnectionError (RetryPolicy re-submits the keys on a new one), else one line."""
        if is_transient(exc) or isinstance(exc, OSError | EOFError):  # pyignite: OSError("Connection broken.")
            return ConnectionError(f"Ignite connection lost: {type(exc).__name__}: {first_line(exc)}")
        if "Cache does not exist" in str(exc):
            return WorkbenchError(
                f"Ignite cache {self.cache_name} at {self.endpoint.where} no longer exists (the node restarted? "
                f"its caches live in memory): re-run the ingest of '{self.config.dataset}' into ignite")
        return WorkbenchError(
            f"get_all of {len(keys)} keys from Ignite cache {self.cache_name} at {self.endpoint.where} failed: "
            f"{type(exc).__name__}: {first_line(exc)}")

    def _fast_get_all(self, client: Client, cache: Any, keys: list[str]) -> dict | None:
        """get_all, each key on its primary node (`key_groups`), the answers read by FastGetAll; None when
        pyignite must decode one (errors included)."""
        values: dict = {}
        for node, group in key_groups(client, cache, keys).items():
            _, request = self._fast.request(client, cache.cache_info, group)
            answer = node.request(request)
            for type_id, schema_id in self._fast.unknown(answer):
                self._fast.learn((type_id, schema_id), schema_names(client, type_id, schema_id))
            parsed = self._fast.parse(answer)
            if parsed is None:
                return None
            values.update(parsed)
        return values

    def _get_batch(self, keys: list[str]) -> list[Item]:
        values = policy_of(self.config).call(
            lambda: self._get_all(keys),
            f"get_all of {len(keys)} keys from Ignite cache {self.cache_name} at {self.endpoint.where}")
        return self._items(keys, values)

    # ------------------------------------------------------------------------------- asyncio client

    def _ensure_aio(self) -> EventLoopThread:
        with self._lock:
            if self._aio is None:
                self._aio = EventLoopThread(f"ignite-aio-{self.worker_id}", "the Ignite client")
                self._aio_clients = AioClients(self.endpoint, self.config.partition_aware)
            return self._aio

    async def _aio_get_all(self, keys: list[str]) -> dict:
        """One get_all on the shared AioClient, bounded by settings.timeout_s; errors as `_get_all` raises them."""
        assert self._aio_clients is not None
        timeout_s = self.settings.timeout_s
        client = await self._aio_clients.get()
        try:
            cache = await asyncio.wait_for(client.get_cache(self.cache_name), timeout_s)
            if self.config.decode == "fast":
                groups = await asyncio.wait_for(key_groups_async(client, cache, keys), timeout_s)
                answers = await asyncio.gather(*(self._aio_request(client, cache, node, group)
                                                 for node, group in groups.items()))
                if all(answer is not None for answer in answers):
                    return {key: value for answer in answers for key, value in answer.items()}
            return await asyncio.wait_for(cache.get_all(keys), timeout_s)
        except (*ignite_errors(), TimeoutError) as exc:
            await self._aio_clients.discard(client)
            raise self._get_all_error(keys, exc) from exc

    async def _aio_request(self, client: Any, cache: Any, node: Any, keys: list[str]) -> dict | None:
        """One get_all request to `node`, read by FastGetAll (None: pyignite must decode it)."""
        timeout_s = self.settings.timeout_s
        request_id, request = self._fast.request(client, cache.cache_info, keys)
        answer = await asyncio.wait_for(node.request(request_id, request), timeout_s)
        for type_id, schema_id in self._fast.unknown(answer):
            names = await asyncio.wait_for(schema_names_async(client, type_id, schema_id), timeout_s)
            self._fast.learn((type_id, schema_id), names)
        return self._fast.parse(answer)

    async def _aio_batch(self, keys: list[str]) -> list[Item]:
        """A batch read on the loop; re-tries (rare) sleep in a thread of their own, with the shared policy."""
        try:
            return self._items(keys, await self._aio_get_all(keys))
        except Exception as exc:  # a lost connection, or a connect that failed for a transient cause
            if not is_transient(exc):
                raise
            first = exc
        loop = self._aio
        assert loop is not None
        what = f"get_all of {len(keys)} keys from Ignite cache {self.cache_name} at {self.endpoint.where}"

        def again() -> dict:
            if self._aio is not loop:
                raise WorkbenchError(f"the Ignite loader was closed during a {what}")
            return loop.call(self._aio_get_all(keys), 2 * self.settings.timeout_s + 1)

        with self._lock:
            if self._retry_pool is None:
                self._retry_pool = ThreadPoolExecutor(4, thread_name_prefix="ignite-aio-retry")
            retry_pool = self._retry_pool
        values = await asyncio.get_running_loop().run_in_executor(
            retry_pool, lambda: policy_of(self.config).call(again, what, first_error=first))
        return self._items(keys, values)

    def _items(self, keys: list[str], values: dict) -> list[Item]:
        items = []
        for key in keys:
            if key not in values:
                raise WorkbenchError(
                    f"Ignite cache {self.cache_name}: sample {key} of split '{self.config.split}' is listed but "
                    "has no object (deleted since the ingest?): re-run the ingest"
                )
            items.append(sample_item(key, values[key], self.cache_name, self.config.label_type))
        self._budget_window(items)
        return items

    def _budget_window(self, items: list[Item]) -> None:
        """Under concurrency "auto", at most what READ_BUDGET (shared by the process's DataLoader workers)
        holds of batches of samples this size. Why: answers that arrive faster than they are consumed wait
        whole in memory, and a longer epoch gave the window time to open wider (64 batches of 64 x 110 KB
        where a short one reached 28): peak RSS grew with the epoch's length. 16 batches held the rate at
        50 ms (same run as 28: 4,422 against 3,399 samples/s)."""
        if isinstance(self._window, AutoWindow) and items:
            batch_bytes = self.config.get_batch * sum(len(item.data) for item in items) // len(items)
            self._window.limit(budget_depth(batch_bytes, self.num_workers))

    def _scan_epoch(self, epoch: int) -> Iterator[Item]:
        c = self.config
        index, count = self._shard()
        parts = take_shard(epoch_order(range(self.partitions()), c.seed, epoch, c.shuffle), index, count)
        _, pool = self._ensure_pool()
        stream = (item for _, items in in_flight(parts, lambda p: pool.submit(self._scan_partition, p),
                                                 self._window, c.ordered) for item in items)
        if c.shuffle and c.shuffle_buffer > 1:
            stream = shuffle_buffer(stream, c.shuffle_buffer, random.Random(f"{c.seed}:{epoch}:{index}"))
        yield from stream

    def _scan_partition(self, partition: int) -> list[Item]:
        assert self._clients is not None
        c = self.config
        items = []
        try:
            with scan_cursor(self._clients.get(), self.cache_name, c.page_size, partition, c.local) as cursor:
                for key, value in cursor:
                    if field(value, "data") is not None and _split_of(value) != c.split:
                        continue
                    items.append(sample_item(key, value, self.cache_name, c.label_type))
        except ignite_errors() as exc:
            self._clients.discard()
            raise WorkbenchError(
                f"scan of partition {partition} of Ignite cache {self.cache_name} at {self.endpoint.where} failed: "
                f"{type(exc).__name__}: {first_line(exc)}"
            ) from exc
        return items

    def connect(self) -> None:
        """The listing's client now and, with client "aio", the shared asyncio client (sync mode's per-thread
        clients still connect on their thread's first request)."""
        clients, _ = self._ensure_pool()
        policy_of(self.config).call(clients.get, f"connecting to Ignite at {self.endpoint.where}",
                                    on_retry=lambda _: clients.discard())
        if self.config.client == "aio" and self.config.mode != "scan":
            loop = self._ensure_aio()
            assert self._aio_clients is not None
            loop.call(self._aio_clients.get(), self.settings.timeout_s)

    def close(self) -> None:
        with self._lock:
            loop, self._aio = self._aio, None
            clients, self._aio_clients = self._aio_clients, None
            retry_pool, self._retry_pool = self._retry_pool, None
        if retry_pool is not None:
            retry_pool.shutdown(wait=False, cancel_futures=True)
        if loop is not None:
            if clients is not None:
                with contextlib.suppress(Exception):  # closing a broken connection must not hide the real error
                    loop.call(clients.close(), 2 * self.settings.timeout_s + 1)
            loop.stop(2 * self.settings.timeout_s + 1)
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        if self._clients is not None:
            self._clients.close()
            self._clients = None

    @classmethod
    def raw_ceiling(cls, settings: Settings, config: LoaderConfig | dict) -> tuple[int, int]:
        return raw_ceiling(settings, config)


def _routed(client: Any) -> bool:
    """Whether keys are worth routing: a partition-aware client connected to more than one node."""
    return bool(client.partition_aware) and len(getattr(client, "_nodes", ()) or ()) > 1


def key_groups(client: Client, cache: Any, keys: list[str]) -> dict[Any, list[str]]:
    """{connection: keys}: each key with the node that holds it as primary, as pyignite's partition awareness
    picks it for one key (its affinity mapping and Ignite's rendezvous hash); one group on the random node when
    the client is not partition-aware or knows one node. A get_all sent to one node otherwise fetches the
    other nodes' keys over the cluster's own network first."""
    if not _routed(client):
        return {client.random_node: keys}
    from pyignite.datatypes import String

    groups: dict[Any, list[str]] = {}
    for key in keys:
        groups.setdefault(client.get_best_node(cache, key, String), []).append(key)
    return groups


async def key_groups_async(client: Any, cache: Any, keys: list[str]) -> dict[Any, list[str]]:
    """`key_groups` for an AioClient."""
    if not _routed(client):
        return {await client.random_node(): keys}
    from pyignite.datatypes import String

    groups: dict[Any, list[str]] = {}
    for key in keys:
        groups.setdefault(await client.get_best_node(cache, key, String), []).append(key)
    return groups


def list_split_keys(client: Client, where: str, layout: dict, cache_name: str, split: str) -> list[str]:
    """Sorted ids of one split: from the ids cache (binary), ``SELECT id`` (sql) or, failing both, a key scan."""
    require_cache(client, cache_name, where, "ingest the dataset first (or pass the right cache_name)")
    names = set(client.get_cache_names())
    same_cache = layout.get("cache") in (None, cache_name)
    ids_cache = layout.get("ids_cache") if same_cache and layout.get("ids_cache") else f"{cache_name}_IDS"
    splits: set[str] = set()
    keys: list[str] = []

    def take(pairs: Iterable[tuple[Any, Any]]) -> int:
        """The keys of `split` from (key, split) pairs, afresh (a scan may be taken again); how many pairs."""
        keys.clear()
        splits.clear()
        seen = 0
        for key, s in pairs:
            seen += 1
            splits.add(s or "train")
            if (s or "train") == split:
                keys.append(str(key))
        return seen

    try:
        if layout.get("mode") == "sql" and same_cache and layout.get("table"):
            with client.sql(f"SELECT id, split FROM {layout['table']}", page_size=ID_PAGE_SIZE) as cursor:
                take(cursor)
        elif ids_cache in names:
            def listing() -> int:
                try:
                    return take(scan_scalars(client, ids_cache, ID_PAGE_SIZE))
                except UnusualScan:  # not plain ids and splits, or an error: pyignite decodes it (or raises)
                    with client.get_cache(ids_cache).scan(page_size=ID_PAGE_SIZE) as cursor:
                        return take(cursor)

            scan_whole(client, ids_cache, where, listing)
        else:  # a cache written by something else: learn the keys by scanning it (moves every object once)
            log.warning("Ignite cache %s has no ids cache: listing its keys with a full scan", cache_name)

            def full_scan() -> int:
                with client.get_cache(cache_name).scan(page_size=100) as cursor:
                    return take((key, _split_of(value)) for key, value in cursor)

            scan_whole(client, cache_name, where, full_scan)
    except ignite_errors() as exc:
        raise WorkbenchError(
            f"listing the ids of Ignite cache {cache_name} at {where} failed: {type(exc).__name__}: {first_line(exc)}"
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
    c = c.model_copy(update={"concurrency": fixed_depth(c.concurrency)})  # a plain loop: a fixed number of threads
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


