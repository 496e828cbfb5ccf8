"""Where the consumer stands when a pipeline reads ahead of it: loader states kept until their element is taken.

Why: tf.data and DALI ask a loader for elements before the training loop takes them (prefetching, DALI's
queue depth), so the loader's own `state_dict()` is ahead of what the loop has seen; saving it would skip the
elements in flight. The producer records the loader's state as it hands out each element (`produced`, before
the element can reach the consumer), the consumer says when it takes one (`taken`), and `state_dict()` is the
state recorded with the last element taken: the loader's own state, nothing computed twice.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any


class ConsumedState:
    """Loader states recorded per element handed out, released as the consumer takes the elements."""

    def __init__(self, start: dict[str, Any]) -> None:
        self._lock = threading.Lock()
        self._ahead: deque[dict[str, Any]] = deque()
        self._current = dict(start)
        self._final: dict[str, Any] | None = None

    def restart(self, start: dict[str, Any]) -> None:
        """A new iteration begins at `start` (elements recorded before and never taken are dropped)."""
        with self._lock:
            self._ahead.clear()
            self._current, self._final = dict(start), None

    def produced(self, state: dict[str, Any]) -> None:
        """The producer hands out an element; `state` is the loader's state just after it."""
        with self._lock:
            self._ahead.append(state)

    def finished(self, state: dict[str, Any]) -> None:
        """The producer's iteration ended; `state` is the loader's state then (its epoch marked done)."""
        with self._lock:
            self._final = state

    def taken(self, count: int = 1) -> None:
        """The consumer took `count` more elements, in the order they were produced."""
        with self._lock:
            for _ in range(count):
                if not self._ahead:
                    raise RuntimeError("taken() more elements than were produced")
                self._current = self._ahead.popleft()

    def exhausted(self) -> None:
        """The consumer saw the end of the iteration: everything produced was taken."""
        with self._lock:
            if self._ahead:
                self._current = self._ahead[-1]
                self._ahead.clear()
            if self._final is not None:
                self._current = self._final

    def state_dict(self) -> dict[str, Any]:
        with self._lock:
            return dict(self._current)
