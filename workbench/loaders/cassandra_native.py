"""Cassandra loader on a C++ driver (`acsylla`): I/O, framing and TLS run outside the GIL.

acsylla wraps ScyllaDB's fork of the DataStax C/C++ driver (the driver cassandra-dali-plugin is built on).

The same strategy and parameters as the Python-driver loader (`cassandra-py`, workbench/loaders/cassandra.py,
whose CassandraConfig, layout and id order it reuses): one prepared single-partition SELECT per sample,
`concurrency` reads in flight, `prefetch_buffers` whole batches ready, completion order with
`ordered=False`, the epoch/shard order of workbench/loaders/order.py, login, TLS with the CA and client
certificates, bounded retries of transient failures. Why a second driver: the Python driver spends most
of a core decoding frames, so the loader measured Python, not the storage (issue 13).

Threads: one asyncio event loop per loader runs in a background thread ("cassandra-native-io") and owns
the acsylla session; each epoch is one task on it that fills a bounded queue with whole batches. The
consumer thread only takes batches off that queue: it never does I/O and never takes a per-sample lock.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import queue
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, ClassVar

from workbench.clients.cassandra import (
    NativeTLS,
    acsylla_driver,
    configure_native_tls,
    open_native_session,
)
from workbench.clients.cassandra import native_connect_error as connect_error  # noqa: F401 - its old home
from workbench.clients.cassandra_connection import (
    PROTOCOL_VERSION,
    bundle_of,
    endpoints,
    login_of,
    own_certificate,
    ssl_context,
    tls_of,
    where_of,
)
from workbench.concurrency import AUTO, EventLoopThread, HasWindow, Window, fixed_depth, make_window, pool_size
from workbench.config import Settings
from workbench.errors import WorkbenchError, first_line
from workbench.layouts.cassandra_tables import ID_FETCH_SIZE, Layout, check_label_type
from workbench.loaders.base import Item, Loader, LoaderConfig, RequestModel
from workbench.loaders.cassandra_config import CassandraConfig, FreshConnections, resolve_layout
from workbench.loaders.order import effective_shard, epoch_order, take_shard
from workbench.loaders.retry import RetryPolicy, is_transient

_END = object()
_THREAD = "cassandra-native-io"


def _acsylla() -> Any:
    return acsylla_driver("the 'cassandra' loader", "use loader 'cassandra-py'")


# --------------------------------------------------------------------------------- errors, retries


def _transient_types() -> tuple[type[BaseException], ...]:
    errors = _acsylla().errors
    names = ("CassErrorLibNoHostsAvailable", "CassErrorLibRequestTimedOut", "CassErrorLibUnableToConnect",
             "CassErrorLibWriteError", "CassErrorLibNoStreams", "CassErrorLibRequestQueueFull",
             "CassErrorLibNoAvailableIoThread", "CassErrorServerUnavailable", "CassErrorServerOverloaded",
             "CassErrorServerIsBootstrapping", "CassErrorServerReadTimeout", "CassErrorSslClosed",
             "CassExceptionConnectionError")
    return tuple(getattr(errors, n) for n in names if hasattr(errors, n))


def transient(exc: BaseException) -> bool:
    """A dropped connection, a timeout or an unavailable server (here or in what caused `exc`): worth retrying."""
    types = _transient_types()
    seen: BaseException | None = exc
    for _ in range(16):
        if seen is None:
            break
        if isinstance(seen, types):
            return True
        seen = seen.__cause__
    return is_transient(exc)


def _policy(config: CassandraConfig) -> RetryPolicy:
    return RetryPolicy(attempts=config.retries + 1, budget_s=config.retry_budget_s, transient=transient)


def _where(settings: Settings, config: CassandraConfig) -> str:
    return where_of(settings, config)


# ------------------------------------------------------------------------------------ connection


def _native_tls(settings: Settings, config: CassandraConfig) -> NativeTLS | None:
    """TLS as the plugin does it: verify the server against `ssl_certificate` when given, else only encrypt.

    With use_ssl left unset and settings.tls on: the stack's CA, and the server's address or name
    checked against its certificate (as `workbench.clients` does).
    """
    use_ssl, certificate = tls_of(settings, config)
    if not use_ssl:
        return None
    ssl_context(settings, config)  # unreadable or invalid PEM files: the Python loader's messages, naming the file
    own = own_certificate(settings, config)
    return NativeTLS(certificate, check_identity=bool(certificate) and config.use_ssl is None,
                     own_certificate=own[0] if own else None, own_key=own[1] if own else None,
                     own_key_password=(own[2] or "") if own else "")


def _configure_tls(cluster: Any, settings: Settings, config: CassandraConfig) -> None:
    configure_native_tls(cluster, _native_tls(settings, config), endpoints(settings, config)[0][0])


async def open_session(settings: Settings, config: CassandraConfig) -> Any:
    """A connected session, every timeout settings.timeout_s; failures as one line (connect_error)."""
    login = login_of(settings, config)
    hosts, port = endpoints(settings, config)
    bundle = bundle_of(config)
    return await open_native_session(
        settings, hosts, port, login, None if bundle else _native_tls(settings, config), bundle,
        protocol_version=PROTOCOL_VERSION, num_threads_io=config.io_threads,
        # A restarted server is found again within a second; reads re-tried meanwhile (RetryPolicy) then succeed.
        constant_reconnect_delay_ms=500)


async def prepare(session: Any, layout: Layout, timeout_s: float) -> Any:
    """The per-sample SELECT; checks the label column's type against label_type (as the Python loader)."""
    errors = _acsylla().errors
    try:
        statement = await session.create_prepared(layout.select(), timeout=timeout_s)
    except (errors.CassErrorServerInvalidQuery, errors.CassErrorServerSyntaxError,
            errors.CassErrorServerUnauthorized) as exc:
        raise WorkbenchError(
            f"cannot read {layout.name}: {first_line(exc)} (ingested? right table and columns?)") from exc
    if layout.label_col is not None:
        query = _acsylla().create_statement(
            "SELECT column_name, type FROM system_schema.columns WHERE keyspace_name = ? AND table_name = ?",
            parameters=2, timeout=timeout_s)
        query.bind_list([layout.keyspace, layout.table])
        types = {row.as_tuple()[0]: row.as_tuple()[1] for row in await session.execute(query)}
        check_label_type(layout, types.get(layout.label_col))
    return statement


async def list_ids(session: Any, layout: Layout, timeout_s: float) -> list[str]:
    """Every id of the split, sorted: every rank, worker and driver starts from the same list."""
    acsylla = _acsylla()
    assert layout.ids_table is not None
    text = f'SELECT "{layout.id_col}" FROM {layout.quoted(layout.ids_table)}'
    ids: list[str] = []
    state: bytes | None = None
    try:
        while True:
            statement = acsylla.create_statement(text, page_size=ID_FETCH_SIZE, timeout=timeout_s)
            if state is not None:
                statement.set_page_state(state)
            result = await session.execute(statement)
            ids.extend(str(row.as_tuple()[0]) for row in result)
            if not result.has_more_pages():
                break
            state = result.page_state()
    except (acsylla.errors.CassErrorServerInvalidQuery, acsylla.errors.CassErrorServerSyntaxError) as exc:
        raise WorkbenchError(f"cannot list the ids of {layout.ids_table}: {first_line(exc)}") from exc
    if not ids:
        raise WorkbenchError(f"{layout.ids_table} holds no ids: nothing to read (ingest the dataset first)")
    return sorted(ids)


class _Failure:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


# ----------------------------------------------------------------------------------------- loader


class CassandraNativeLoader(FreshConnections, HasWindow, Loader):
    """This shard's rows through acsylla, `concurrency` reads in flight, `prefetch_buffers` batches ahead."""

    name = "cassandra"
    request_model = RequestModel("one single-partition SELECT (one sample)")
    backend = "cassandra"
    chaos_window: ClassVar[dict[str, Any] | None] = {"concurrency": 4, "batch_size": 8, "prefetch_buffers": 1}
    Config = CassandraConfig
    config: CassandraConfig

    def __init__(self, settings: Settings, config: LoaderConfig, worker_id: int = 0, num_workers: int = 1) -> None:
        if not isinstance(config, CassandraConfig):
            config = CassandraConfig(**config.model_dump())
        _acsylla()  # a missing driver says so before any epoch
        bundle_of(config)  # so does an unusable secure-connect bundle
        super().__init__(settings, config, worker_id, num_workers)
        self._reset()
        # kept across epochs (a settled "auto" stays); `_produce` tells it when the consumer holds it up
        self._window = make_window(self.config.concurrency, reports_stalls=True)

    @classmethod
    def raw_ceiling(cls, settings: Settings, config: LoaderConfig) -> tuple[int, int]:
        return raw_ceiling(settings, config)

    def _reset(self) -> None:
        """Connection state: nothing until the first epoch (loaders travel to DataLoader workers)."""
        self._connect_lock = threading.Lock()
        self._retry_lock = threading.Lock()
        self._io: EventLoopThread | None = None
        self._session: Any = None
        self._statement: Any = None
        self._layout: Layout | None = None
        self._ids: dict[tuple[str, str], list[str]] = {}
        self._producers: set[asyncio.Task] = set()
        self._retry_pool: concurrent.futures.ThreadPoolExecutor | None = None

    connection_state = ("_connect_lock", "_retry_lock", "_io", "_session", "_statement", "_layout", "_ids",
                        "_producers", "_retry_pool")

    def producing(self) -> int:
        """Epoch producers still running on the loop (0 once every epoch has ended or been left)."""
        return sum(1 for task in list(self._producers) if not task.done())

    # ------------------------------------------------------------------------------- connection

    @property
    def _safety_s(self) -> float:
        return 2 * self.settings.timeout_s + 1

    def _connect(self) -> tuple[Layout, EventLoopThread]:
        with self._connect_lock:
            if self._layout is None:
                self._layout = resolve_layout(self.settings, self.config)
            if self._io is None:
                self._io = EventLoopThread(f"{_THREAD}-{self.worker_id}", "the Cassandra driver")
            if self._session is None:
                session = self._io.call(open_session(self.settings, self.config), self._safety_s)
                try:
                    self._statement = self._io.call(prepare(session, self._layout, self.settings.timeout_s),
                                                    self._safety_s)
                except BaseException:  # a wrong table or label type: no half-made connection stays behind
                    with contextlib.suppress(Exception):
                        self._io.call(session.close(), self._safety_s)
                    raise
                self._session = session
            return self._layout, self._io

    def _connect_retrying(self) -> tuple[Layout, EventLoopThread]:
        return _policy(self.config).call(self._connect, "connecting to Cassandra")

    def all_ids(self) -> list[str]:
        """source_uuids, or every id of the split (read once per loader)."""
        if self.config.source_uuids is not None:
            return list(self.config.source_uuids)
        layout, io = self._connect_retrying()
        key = (layout.keyspace, self.config.split)
        if key not in self._ids:
            self._ids[key] = _policy(self.config).call(
                lambda: io.call(list_ids(self._session, layout, self.settings.timeout_s), self._safety_s),
                f"listing the ids of {layout.ids_table}")
        return self._ids[key]

    def shard_ids(self, epoch: int) -> list[str]:
        c = self.config
        order = epoch_order(self.all_ids(), c.seed, epoch, c.shuffle)
        return take_shard(order, *effective_shard(c.shard_id, c.num_shards, self.worker_id, self.num_workers))

    # ------------------------------------------------------------------------------------ reads

    def _reader(self, layout: Layout, io: EventLoopThread) -> Callable[[str], Awaitable[Item]]:
        """read(key) on the loop: one prepared SELECT; a transient failure is re-tried with the policy."""
        session, statement = self._session, self._statement
        with_label = layout.label_col is not None
        where = _where(self.settings, self.config)
        what = f"from {layout.name} at {where}"
        policy = _policy(self.config)

        def item_of(key: str, result: Any) -> Item:
            row = result.first()
            if row is None:
                raise WorkbenchError(f"sample {key} not found in table {layout.name} (id_col {layout.id_col})")
            values = row.as_tuple()
            if values[0] is None:
                raise WorkbenchError(f"sample {key} in table {layout.name} has no {layout.data_col}")
            return Item(key, values[1] if with_label else None, values[0])

        def read_again(key: str) -> Item:
            """One blocking re-read from a retry thread; the driver reconnects its session meanwhile."""
            if self._io is not io:
                raise WorkbenchError(f"the Cassandra loader was closed while re-reading sample {key}")
            return item_of(key, io.call(session.execute(statement.bind([key])), self._safety_s))

        async def read(key: str) -> Item:
            try:
                return item_of(key, await session.execute(statement.bind([key])))
            except WorkbenchError:
                raise
            except Exception as exc:
                if not transient(exc):
                    raise WorkbenchError(f"reading sample {key} {what} failed: {type(exc).__name__}: "
                                         f"{first_line(exc)}") from exc
                first = exc
            # Backoff sleeps and re-reads in a thread of their own (rare), with the shared RetryPolicy.
            return await asyncio.get_running_loop().run_in_executor(
                self._retrier(), lambda: policy.call(lambda: read_again(key), f"reading sample {key} {what}",
                                                     first_error=first))

        return read

    def _retrier(self) -> concurrent.futures.ThreadPoolExecutor:
        with self._retry_lock:  # not _connect_lock: a connecting thread holds that while it waits on the loop
            if self._retry_pool is None:
                self._retry_pool = concurrent.futures.ThreadPoolExecutor(
                    pool_size(self.config.concurrency), thread_name_prefix="cassandra-native-retry")
            return self._retry_pool

    async def _produce(self, keys: list[str], read: Callable[[str], Awaitable[Item]], out: queue.Queue,
                       slots: asyncio.Semaphore) -> None:
        """All of `keys` as whole batches into `out`; at most `prefetch_buffers` batches wait there."""
        c = self.config
        batch: list[Item] = []

        async def hand_over(items: list[Item]) -> None:
            """Into `out` once a slot is free; a wait for one is the consumer's time, not the window's."""
            if slots.locked():
                self._window.stall()
                try:
                    await slots.acquire()
                finally:
                    self._window.resume()
            else:
                await slots.acquire()
            out.put_nowait(items)

        async def emit(item: Item) -> None:
            nonlocal batch
            batch.append(item)
            if len(batch) >= c.batch_size:
                full, batch = batch, []
                await hand_over(full)

        try:
            if c.ordered:
                await _in_order(keys, read, emit, self._window)
            else:
                await _as_completed(keys, read, emit, self._window)
            if batch:
                await hand_over(batch)
            out.put_nowait(_END)
        except asyncio.CancelledError:
            with contextlib.suppress(queue.Full):
                out.put_nowait(None)  # a consumer still waiting learns that the epoch was stopped
            raise
        except BaseException as exc:  # handed to the consumer
            out.put_nowait(_Failure(exc))

    def _slots(self) -> int:
        """Batches that may wait for the consumer: `prefetch_buffers`, and with "auto" a full window's worth more.

        Why: an "auto" window's completions come in bursts of up to its depth, a round trip apart; with room for
        `prefetch_buffers` batches only (64 samples by default) each burst stalled the readers, and a window
        measures nothing while they stall (cassandra at 50 ms: no interval at 256 in flight in 7 epochs). The
        reads a stall holds back wait in memory either way.
        """
        c = self.config
        if c.concurrency != AUTO:
            return c.prefetch_buffers
        return c.prefetch_buffers + -(-pool_size(c.concurrency) // c.batch_size)  # a whole window, in batches

    def iter_epoch(self, epoch: int) -> Iterator[Item]:
        keys = self.unread(epoch, self.shard_ids(epoch), key=str)  # resuming: the ids not yet delivered
        if not keys:
            return
        layout, io = self._connect_retrying()
        read = self._reader(layout, io)
        room = self._slots()
        out: queue.Queue = queue.Queue(maxsize=room + 1)  # + the end or a failure

        async def start() -> tuple[asyncio.Task, asyncio.Semaphore]:
            slots = asyncio.Semaphore(room)
            task = asyncio.get_running_loop().create_task(self._produce(keys, read, out, slots))
            self._producers.add(task)
            task.add_done_callback(self._producers.discard)
            return task, slots

        task, slots = io.call(start(), self._safety_s)
        # The driver times out every read itself and the policy bounds its re-tries: this is a safety net.
        c = self.config
        waves = -(-c.batch_size // min(self._window.history)) + 1  # the narrowest window it had
        patience_s = waves * (self.settings.timeout_s + c.retry_budget_s + RetryPolicy().max_s)
        try:
            while True:
                try:
                    message = out.get(timeout=patience_s)
                except queue.Empty:
                    where = f"{layout.name} at {_where(self.settings, c)}"
                    raise WorkbenchError(f"no batch from {where} within {patience_s:.0f} s although every read "
                                         "has a timeout: a driver fault; re-run, and report it if it recurs") from None
                if message is None:  # the producer ended without a word (cancelled by close())
                    raise WorkbenchError("the Cassandra loader was closed during the epoch")
                if message is _END:
                    return
                if isinstance(message, _Failure):
                    raise message.exc
                io.loop.call_soon_threadsafe(slots.release)
                yield from message
        finally:
            self._stop(io, task)

    def _stop(self, io: EventLoopThread, task: asyncio.Task) -> None:
        """Cancel an epoch's producer and its reads, and wait until they are gone."""
        if task.done() or not io.thread.is_alive():
            return

        async def cancel() -> None:
            task.cancel()
            await asyncio.wait([task])

        with contextlib.suppress(Exception):
            io.call(cancel(), self._safety_s)

    def close(self) -> None:
        with self._connect_lock:
            io, self._io = self._io, None
            session, self._session, self._statement = self._session, None, None
            retry_pool, self._retry_pool = self._retry_pool, None
        if retry_pool is not None:
            retry_pool.shutdown(wait=False, cancel_futures=True)
        if io is None:
            return
        for task in list(self._producers):
            self._stop(io, task)
        if session is not None:
            with contextlib.suppress(Exception):
                io.call(session.close(), self._safety_s)
        io.stop(self._safety_s)


def _timed(read: Callable[[str], Awaitable[Item]], depth: Window) -> Callable[[str], Awaitable[Item]]:
    """`read`, telling the window when each read starts and ends (so an "auto" window can widen)."""

    async def timed(key: str) -> Item:
        started = depth.started()
        try:
            return await read(key)
        finally:
            depth.finished(started)

    return timed


async def _in_order(keys: list[str], read: Callable[[str], Awaitable[Item]],
                    emit: Callable[[Item], Awaitable[None]], depth: Window) -> None:
    """Submission order: a window of `depth.depth` reads (which may widen meanwhile), always waiting on the oldest."""
    loop = asyncio.get_running_loop()
    window: deque[asyncio.Future[Item]] = deque()
    depth.begin(len(keys))
    read = _timed(read, depth)
    try:
        for key in keys:
            window.append(loop.create_task(read(key)))  # type: ignore[arg-type]
            while len(window) >= depth.depth:  # `while`: a window that narrowed shrinks to its new depth
                await emit(await window.popleft())
        while window:
            await emit(await window.popleft())
    finally:
        for pending in window:
            pending.cancel()
        if window:
            await asyncio.wait(window)


async def _as_completed(keys: list[str], read: Callable[[str], Awaitable[Item]],
                        emit: Callable[[Item], Awaitable[None]], depth: Window) -> None:
    """Completion order (the plugin's out-of-order mode): readers take the next key as they finish; one more
    reader starts whenever the window widens (up to `depth.depth` readers)."""
    loop = asyncio.get_running_loop()
    queue_of_keys = iter(keys)
    depth.begin(len(keys))
    read = _timed(read, depth)
    active: set[asyncio.Task] = set()
    everyone: list[asyncio.Task] = []
    taken = 0
    more = asyncio.Event()  # the window widened: start readers

    async def reader() -> None:
        nonlocal taken
        for key in queue_of_keys:  # shared: each key goes to exactly one reader
            taken += 1
            item = await read(key)
            if len(active) < depth.depth and taken < len(keys):
                more.set()
            await emit(item)
            if len(active) > depth.depth:  # the window narrowed: one reader fewer
                active.discard(asyncio.current_task())  # type: ignore[arg-type]
                return

    def start_readers() -> None:
        spare = len(keys) - taken  # keys no reader has taken yet
        while len(active) < depth.depth and spare > 0:
            spare -= 1
            task = loop.create_task(reader())
            active.add(task)
            everyone.append(task)

    start_readers()
    waiter: asyncio.Task | None = None
    try:
        while active:
            waiter = loop.create_task(more.wait())
            done, _ = await asyncio.wait([*active, waiter], return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            for finished in done - {waiter}:
                active.discard(finished)
                if finished.exception() is not None:
                    raise finished.exception()  # type: ignore[misc]
            more.clear()
            start_readers()
    finally:
        if waiter is not None:
            waiter.cancel()
        for worker in everyone:
            worker.cancel()
        if everyone:
            await asyncio.wait([*everyone, *([waiter] if waiter else [])])


# ---------------------------------------------------------------------------------------- ceiling


def raw_ceiling(settings: Settings, config: LoaderConfig | dict) -> tuple[int, int]:
    """Every sample of the split through acsylla at `concurrency` in flight, no loader machinery: (samples, bytes)."""
    if isinstance(config, dict):
        config = CassandraConfig(**config)
    elif not isinstance(config, CassandraConfig):
        config = CassandraConfig(**config.model_dump())
    layout = resolve_layout(settings, config)

    async def run() -> tuple[int, int]:
        session = await open_session(settings, config)
        try:
            statement = await prepare(session, layout, settings.timeout_s)
            ids = config.source_uuids or await list_ids(session, layout, settings.timeout_s)
            samples = nbytes = 0
            window: deque = deque()

            def count(result: Any) -> None:
                nonlocal samples, nbytes
                row = result.first()
                if row is not None:
                    samples += 1
                    nbytes += len(row.as_tuple()[0] or b"")

            for i in ids:
                if len(window) >= fixed_depth(config.concurrency):
                    count(await window.popleft())
                window.append(asyncio.ensure_future(session.execute(statement.bind([i]))))
            while window:
                count(await window.popleft())
            return samples, nbytes
        finally:
            await session.close()

    return asyncio.run(run())
