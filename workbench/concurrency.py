"""Bounded concurrency, written once: requests in flight for readers, jobs in flight for writers.

`in_flight` keeps many requests outstanding: the one mechanism every remote loader uses to hide latency.

With `depth` requests outstanding, a path with round-trip time R delivers up to depth/R items per
second instead of 1/R. Results come back in submission order, or as they complete (`ordered=False`,
the plugin's out-of-order mode), which avoids head-of-line blocking behind one slow request.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, TypeVar

K = TypeVar("K")
V = TypeVar("V")


def in_flight(keys: Iterable[K], submit: Callable[[K], Future[V]], depth: int, ordered: bool = True,
              timeout_s: float | None = None) -> Iterator[tuple[K, V]]:
    """Yield (key, result) for every key, keeping up to `depth` submitted requests outstanding.

    A failed request raises its exception (after cancelling what has not started); a request that
    takes longer than `timeout_s` raises TimeoutError naming the key.
    """
    if depth < 1:
        raise ValueError(f"depth must be >= 1, got {depth}")
    in_order: deque[tuple[K, Future[V]]] = deque()  # ordered: oldest first
    running: set[Future[V]] = set()  # every outstanding request, for cancellation
    completed: queue.SimpleQueue[tuple[K, Future[V]]] = queue.SimpleQueue()  # unordered: as they finish
    keys = iter(keys)
    try:
        while True:
            for key in keys:
                future = submit(key)
                running.add(future)
                if ordered:
                    in_order.append((key, future))
                else:
                    future.add_done_callback(lambda f, k=key: completed.put((k, f)))
                if len(running) >= depth:
                    break
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


class LazyPool:
    """A loader's request threads: started on first use, shut down by `close()`, never pickled.

    Why: loaders are built, then pickled into DataLoader workers (or forked), and only then read;
    each process must start its own threads, and a loader that is never read starts none.
    `wait_on_close` waits for running requests (local reads) instead of abandoning them.
    """

    def __init__(self, workers: int, name: str, wait_on_close: bool = False) -> None:
        self.workers, self.name, self.wait_on_close = workers, name, wait_on_close
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def get(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self.workers, thread_name_prefix=self.name)
            return self._executor

    def close(self) -> None:
        with self._lock:
            if self._executor is not None:
                self._executor.shutdown(wait=self.wait_on_close, cancel_futures=True)
                self._executor = None

    def __getstate__(self) -> dict:
        return {"workers": self.workers, "name": self.name, "wait_on_close": self.wait_on_close}

    def __setstate__(self, state: dict) -> None:
        self.__init__(**state)



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
