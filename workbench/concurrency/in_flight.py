"""Requests in flight for readers, jobs in flight for writers: the one mechanism that hides latency.

With `depth` requests outstanding, a path with round-trip time R delivers up to depth/R items per second
instead of 1/R. Results come back in submission order, or as they complete (`ordered=False`, the plugin's
out-of-order mode), which avoids head-of-line blocking behind one slow request.
"""

from __future__ import annotations

import itertools
import queue
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, Protocol, TypeVar

from workbench.concurrency.windows import Concurrency, FixedWindow, Window, make_window

K = TypeVar("K")
V = TypeVar("V")


def in_flight(keys: Iterable[K], submit: Callable[[K], Future[V]], depth: Concurrency | Window,
              ordered: bool = True, timeout_s: float | None = None) -> Iterator[tuple[K, V]]:
    """Yield (key, result) for every key, keeping up to `depth` submitted requests outstanding.

    `depth` is a number, "auto" (a new AutoWindow) or a Window, whose depth may change while this runs.
    A failed request raises its exception (after cancelling what has not started); a request that
    takes longer than `timeout_s` raises TimeoutError naming the key.
    """
    window = make_window(depth)
    window.begin(len(keys) if hasattr(keys, "__len__") else None)  # type: ignore[arg-type]
    adaptive = not isinstance(window, FixedWindow)
    in_order: deque[tuple[K, Future[V]]] = deque()  # ordered: oldest first
    running: set[Future[V]] = set()  # every outstanding request, for cancellation
    completed: queue.SimpleQueue[tuple[K, Future[V]]] = queue.SimpleQueue()  # unordered: as they finish
    keys = iter(keys)
    try:
        while True:
            # up to the depth now: none while a narrowed window still has more outstanding than it allows
            for key in itertools.islice(keys, max(0, window.depth - len(running))):
                if adaptive:
                    started = window.started()
                    future = submit(key)
                    future.add_done_callback(lambda f, t=started: window.finished(t))
                else:
                    future = submit(key)
                running.add(future)
                if ordered:
                    in_order.append((key, future))
                else:
                    future.add_done_callback(lambda f, k=key: completed.put((k, f)))
            if not running:
                return
            if ordered:
                key, future = in_order.popleft()
            else:
                try:
                    key, future = completed.get(timeout=timeout_s)
                except queue.Empty:
                    raise TimeoutError(f"no request finished within {timeout_s}s") from None
            running.discard(future)
            try:
                result = future.result(timeout=timeout_s)
            except TimeoutError:
                raise TimeoutError(f"request for {key} took longer than {timeout_s}s") from None
            yield key, result
    finally:
        for future in running:
            future.cancel()


class Collector(Protocol[K, V]):
    """A client that starts requests without waiting and hands back finished ones in batches, from one thread.

    Why: a blocking call per request costs two thread handoffs and a GIL round each (obstore's GETs spent a
    third of their kernel time switching threads); submitting and collecting many at once costs them per call.
    """

    def submit(self, token: int, key: K) -> None:
        """Start the request for `key`; its result comes back from `collect` under `token`."""

    def collect(self, timeout_s: float) -> list[tuple[int, V]]:
        """(token, result) of requests finished since the last call: at least one, or [] after `timeout_s`."""

    def cancel(self) -> None:
        """Abandon every outstanding request."""


def in_flight_collected(keys: Iterable[K], client: Collector[Any, V], depth: Concurrency | Window,
                        ordered: bool = True, timeout_s: float = 60.0,
                        request: Callable[[K], Any] = lambda key: key) -> Iterator[tuple[K, V]]:
    """`in_flight` for a `Collector`: (key, result) for every key, `request(key)` submitted for it, up to
    `depth` submitted and not yet yielded, in order or as they finish. Results that are failures are yielded
    like any other value: the caller decides. Raises TimeoutError when no request finishes within `timeout_s`;
    closing the generator early cancels what is outstanding.
    """
    window = make_window(depth)
    window.begin(len(keys) if hasattr(keys, "__len__") else None)  # type: ignore[arg-type]
    pending: dict[int, tuple[K, float]] = {}  # token -> (key, when the window saw it start)
    held: dict[int, tuple[K, V]] = {}  # ordered: finished before an older one
    submitted = delivered = 0
    keys = iter(keys)
    try:
        while True:
            for key in itertools.islice(keys, max(0, window.depth - len(pending) - len(held))):
                pending[submitted] = (key, window.started())
                client.submit(submitted, request(key))
                submitted += 1
            if ordered and delivered in held:
                yield held.pop(delivered)
                delivered += 1
                continue
            if not pending:
                return
            finished = client.collect(timeout_s)
            if not finished:
                raise TimeoutError(f"none of {len(pending)} requests in flight finished within {timeout_s}s")
            for token, result in finished:
                key, started = pending.pop(token)
                window.finished(started)
                if ordered:
                    held[token] = (key, result)
                else:
                    yield key, result
    finally:
        if pending:
            client.cancel()


def map_in_flight(keys: Iterable[K], fn: Callable[[K], V], pool: ThreadPoolExecutor, depth: Concurrency | Window,
                  ordered: bool = True) -> Iterator[V]:
    """`fn(key)` for every key on `pool`'s threads, `depth` in flight (`in_flight`); yields the results.

    Closing the generator early cancels the requests not yet started.
    """
    results = in_flight(keys, lambda key: pool.submit(fn, key), depth, ordered=ordered)
    try:
        for _, value in results:
            yield value
    finally:
        results.close()


class InFlight:
    """Jobs on `workers` threads, at most `limit` submitted and unfinished (so memory stays bounded).

    Results are handled by each job's `then` in the submitting thread (progress bars and journals are
    not thread-safe). After a failure no new job is accepted; jobs already running still finish and
    their results are still handled, so everything that was written completely is recorded.
    """

    def __init__(self, workers: int, limit: int, name: str) -> None:
        self.pool = ThreadPoolExecutor(max(1, workers), thread_name_prefix=name)
        self.limit = max(1, limit)
        self.pending: dict[Future, Callable[[Any], None]] = {}
        self.error: BaseException | None = None

    def submit(self, fn: Callable[..., Any], *args: Any, then: Callable[[Any], None]) -> None:
        self._handle([f for f in self.pending if f.done()])
        while len(self.pending) >= self.limit and self.error is None:
            done, _ = wait(self.pending, return_when=FIRST_COMPLETED)
            self._handle(done)
        if self.error is not None:
            raise self.error
        self.pending[self.pool.submit(fn, *args)] = then

    def _handle(self, done: Iterable[Future]) -> None:
        for future in done:
            then = self.pending.pop(future)
            try:
                then(future.result())
            except BaseException as exc:  # kept, and raised in the writing thread
                if self.error is None:
                    self.error = exc

    def drain(self) -> BaseException | None:
        """Wait for every job, handle its result; returns the first error (the caller decides to raise)."""
        try:
            while self.pending:
                done, _ = wait(self.pending, return_when=FIRST_COMPLETED)
                self._handle(done)
        finally:
            self.pool.shutdown(wait=True)
        return self.error


def finish(flight: InFlight, body_failed: bool) -> None:
    """Raise the first job error, unless the writing loop already has an exception on its way."""
    error = flight.drain()
    if error is not None and not body_failed:
        raise error
