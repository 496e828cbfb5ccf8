"""Keep many requests in flight: the one mechanism every remote loader uses to hide latency.

With `depth` requests outstanding, a path with round-trip time R delivers up to depth/R items per
second instead of 1/R. Results come back in submission order, or as they complete (`ordered=False`,
the plugin's out-of-order mode), which avoids head-of-line blocking behind one slow request.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, wait
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
    pending: deque[tuple[K, Future[V]]] = deque()
    keys = iter(keys)
    exhausted = False
    try:
        while True:
            while not exhausted and len(pending) < depth:
                try:
                    key = next(keys)
                except StopIteration:
                    exhausted = True
                    break
                pending.append((key, submit(key)))
            if not pending:
                return
            if ordered:
                key, future = pending.popleft()
            else:
                done, _ = wait([f for _, f in pending], timeout=timeout_s, return_when=FIRST_COMPLETED)
                if not done:
                    raise TimeoutError(f"no request finished within {timeout_s}s (next key {pending[0][0]})")
                index = next(i for i, (_, f) in enumerate(pending) if f in done)
                key, future = pending[index]
                del pending[index]
            try:
                result = future.result(timeout=timeout_s)
            except TimeoutError:
                raise TimeoutError(f"request for {key} took longer than {timeout_s}s") from None
            yield key, result
    finally:
        for _, future in pending:
            future.cancel()
