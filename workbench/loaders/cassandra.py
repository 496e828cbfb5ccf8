"""Cassandra loader: the cassandra-dali-plugin's strategy on the Python driver.

Samples are rows of ``<keyspace>.data_<split>(id uuid PRIMARY KEY, label, data blob)``; the ids come
from the split's metadata table (or `source_uuids`; `workbench.layouts.cassandra_tables`). Each epoch
this shard's ids are read with one prepared single-partition SELECT per sample, `concurrency` requests in flight
(`workbench.concurrency`), and a background thread keeps `prefetch_buffers` whole batches ready,
so the consumer never waits on the network while a batch is complete. Parameter names follow the
plugin (cassandra_ips, cassandra_port, table, id_col/label_col/data_col, source_uuids, prefetch_buffers,
io_threads, username/password, use_ssl and ssl_*, cloud_config: `workbench.loaders.cassandra_config`); how
they connect, with the stack's login and TLS by default, is `workbench.clients.cassandra_connection`.

`raw_ceiling` is the backend's ceiling for the benchmark: the plain driver loop, no loader machinery.
"""

from __future__ import annotations

import contextlib
import itertools
import queue
import threading
import uuid
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, InvalidStateError, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, ClassVar

from workbench.clients.cassandra_connection import bundle_of, connect, make_cluster, where_of
from workbench.concurrency import HasWindow, fixed_depth, in_flight, make_window, pool_size
from workbench.config import Settings
from workbench.errors import WorkbenchError
from workbench.layouts.cassandra_tables import Layout, list_ids, prepare
from workbench.loaders.base import Item, Loader, LoaderConfig, RequestModel
from workbench.loaders.cassandra_config import CassandraConfig, FreshConnections, resolve_layout
from workbench.loaders.order import effective_shard, epoch_order, take_shard
from workbench.loaders.retry import RetryPolicy, is_transient, policy_of

if TYPE_CHECKING:
    from cassandra.cluster import Cluster, Session
    from cassandra.query import PreparedStatement

_END = object()


class _Failure:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class CassandraLoader(FreshConnections, HasWindow, Loader):
    """This shard's rows, `concurrency` asynchronous reads in flight, `prefetch_buffers` batches ahead."""

    name = "cassandra-py"
    request_model = RequestModel("one single-partition SELECT (one sample)")
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
