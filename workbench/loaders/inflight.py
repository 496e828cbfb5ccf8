"""Keep many requests in flight: the one mechanism every remote loader uses to hide latency.

With `depth` requests outstanding, a path with round-trip time R delivers up to depth/R items per
second instead of 1/R. Results come back in submission order, or as they complete (`ordered=False`,
the plugin's out-of-order mode), which avoids head-of-line blocking behind one slow request.
"""

from __future__ import annotations

import queue
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from typing import TypeVar

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
