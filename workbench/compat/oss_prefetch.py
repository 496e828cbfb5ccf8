"""The OSS connector's prefetch workers (``datasetConfig.prefetchWorker``): N threads share the GETs in flight.

The connector's ``prefetchWorker`` is "the vcpu number for prefetching data", ``prefetchConcurrency`` the GETs
in flight over all of them. Here: a stream of N keys is dealt out round-robin to `workers` prefetch threads
(worker w takes positions w, w + N, ...), and worker w keeps its share of the concurrency in flight (24 over 2
workers: 12 each) on its own GET threads (``<name>-<w>_<i>``), handing finished results to the consumer
through a one-slot queue. The consumer takes them back in round-robin order, so results come in key order,
each key fetched once. The workers refill their windows while the consumer is busy (a transform, a training
step), not only when it asks for the next item.

A failed fetch is raised at its own position (results before it are delivered first); closing the stream
early stops the workers (GETs not yet started are cancelled). Threads start on first use in each process, and
the object pickles without them (DataLoader workers make their own).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Generic, TypeVar

from workbench.concurrency import LazyPool, map_in_flight
from workbench.errors import WorkbenchError

K = TypeVar("K")
V = TypeVar("V")

_STOP_POLL_S = 0.05  # how soon a worker with a full slot notices the consumer has gone


class PrefetchWorkers(Generic[K, V]):
    """`workers` prefetch threads per stream sharing `concurrency` fetches in flight (module docstring).

    More workers than the concurrency would leave some without a fetch to keep in flight: they are capped at
    `concurrency` (`workers` says how many are used).
    """

    def __init__(self, workers: int, concurrency: int, name: str) -> None:
        if workers < 1 or concurrency < 1:
            raise WorkbenchError(f"prefetch workers and concurrency must be >= 1, got {workers} and {concurrency}")
        self.workers = min(workers, concurrency)
        self.concurrency = concurrency
        self.name = name
        n = self.workers
        self.depths = [concurrency // n + (w < concurrency % n) for w in range(n)]  # sums to concurrency
        self._pools = [LazyPool(depth, f"{name}-{w}") for w, depth in enumerate(self.depths)]

    def map(self, keys: Sequence[K], fn: Callable[[K], V]) -> Iterator[V]:
        """`fn(key)` for every key, in key order, run on the workers' threads."""
        n = min(self.workers, len(keys))
        stop = threading.Event()
        slots: list[queue.Queue[tuple[bool, object]]] = [queue.Queue(maxsize=1) for _ in range(n)]
        threads = [threading.Thread(target=self._work, args=(w, keys[w::n], fn, slots[w], stop),
                                    name=f"{self.name}-worker-{w}", daemon=True) for w in range(n)]
        for thread in threads:
            thread.start()
        try:
            for position in range(len(keys)):
                ok, value = slots[position % n].get()
                if not ok:
                    assert isinstance(value, BaseException)
                    raise value
                yield value  # type: ignore[misc]
        finally:
            stop.set()

    def _work(self, w: int, share: Sequence[K], fn: Callable[[K], V], slot: queue.Queue, stop: threading.Event) -> None:
        results: Iterator[V] | None = None
        try:
            results = map_in_flight(share, fn, self._pools[w].get(), self.depths[w])
            for value in results:
                if not _hand_over(slot, (True, value), stop):
                    return
        except BaseException as exc:  # delivered at its position; nothing after it from this worker
            _hand_over(slot, (False, exc), stop)
        finally:
            if results is not None:
                results.close()  # type: ignore[attr-defined]

    def close(self) -> None:
        for pool in self._pools:
            pool.close()


def _hand_over(slot: queue.Queue, item: tuple[bool, object], stop: threading.Event) -> bool:
    """Put `item` in the worker's slot once the consumer took the last one; False once the consumer has gone."""
    while not stop.is_set():
        try:
            slot.put(item, timeout=_STOP_POLL_S)
            return True
        except queue.Full:
            continue
    return False
