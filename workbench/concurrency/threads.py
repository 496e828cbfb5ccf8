"""Threads a loader starts in each process: a lazily started pool, and an asyncio loop for async clients."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from workbench.concurrency.windows import Concurrency, pool_size

V = TypeVar("V")


class LazyPool:
    """A loader's request threads: started on first use, shut down by `close()`, never pickled.

    Why: loaders are built, then pickled into DataLoader workers (or forked), and only then read;
    each process must start its own threads, and a loader that is never read starts none.
    `wait_on_close` waits for running requests (local reads) instead of abandoning them.
    """

    def __init__(self, workers: Concurrency, name: str, wait_on_close: bool = False) -> None:
        workers = pool_size(workers)  # "auto": threads start as requests need them, up to the widest window
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


class EventLoopThread:
    """An asyncio loop in a daemon thread, for the native async clients (acsylla, pyignite's aio client):
    their sessions live on the loop; other threads submit coroutines and wait, each wait bounded."""

    def __init__(self, name: str, what: str = "the client") -> None:
        self.what = what  # named in a timeout: "the Cassandra driver", "the Ignite client"
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self.thread.start()

    def submit(self, coro: Awaitable[V]) -> concurrent.futures.Future[V]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)  # type: ignore[arg-type]

    def call(self, coro: Awaitable[V], timeout_s: float) -> V:
        future = self.submit(coro)
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"no answer from {self.what} within {timeout_s:.0f} s") from None

    def stop(self, timeout_s: float) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout_s)
        if not self.thread.is_alive():
            self.loop.close()
