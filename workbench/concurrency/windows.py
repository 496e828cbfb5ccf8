"""The depth of requests in flight: what a config's ``concurrency`` asks for, and the windows that hold it.

A window is told when each request starts and finishes, so it may adapt: `FixedWindow` never does
(``concurrency=N``), `AutoWindow` (``"auto"``, auto_window.py) sizes itself, `RoundTripWindow` adds what a
long round trip needs to a byte budget's window.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Literal, Protocol

from workbench.concurrency.auto_window import AUTO_CAP, AUTO_START, AutoWindow
from workbench.concurrency.pickling import PicklesWithoutLocks
from workbench.errors import WorkbenchError

AUTO = "auto"
Concurrency = int | Literal["auto"]  # what a config's `concurrency` holds
# Bytes that an "auto" window of big requests (whole shards, get_all batches) may keep in flight per process,
# shared by its DataLoader workers: what arrives faster than it is consumed waits whole in memory.
READ_BUDGET = 96 * 2**20
REFERENCE_DEPTH = 32  # what a plain fixed loop (a raw ceiling) uses when the config says "auto"


def budget_depth(request_bytes: int, readers: int = 1) -> int:
    """Requests of `request_bytes` that READ_BUDGET, shared by a process's `readers`, holds; never below
    AUTO_START (requests too big for the budget keep the fixed default's depth)."""
    return max(AUTO_START, READ_BUDGET // max(1, readers) // max(1, request_bytes))


class Window(Protocol):
    """How many requests to keep in flight; told when each starts and finishes, so it may adapt."""

    @property
    def depth(self) -> int: ...

    @property
    def history(self) -> list[int]: ...

    @property
    def measured(self) -> list[tuple[int, float, float]]: ...

    @property
    def tuning(self) -> bool: ...

    def begin(self, total: int | None) -> None: ...

    def started(self) -> float: ...

    def finished(self, started_at: float) -> None: ...

    def stall(self) -> None: ...

    def resume(self) -> None: ...


class FixedWindow:
    """A window that never changes: ``concurrency=N``."""

    def __init__(self, depth: int) -> None:
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        self._depth = depth

    @property
    def depth(self) -> int:
        return self._depth

    @property
    def history(self) -> list[int]:
        return [self._depth]

    @property
    def measured(self) -> list[tuple[int, float, float]]:
        return []  # nothing is measured: the depth is given

    @property
    def tuning(self) -> bool:
        return False

    def begin(self, total: int | None) -> None:
        pass

    def started(self) -> float:
        return 0.0

    def finished(self, started_at: float) -> None:
        pass

    def stall(self) -> None:
        pass

    def resume(self) -> None:
        pass


class RoundTripWindow(PicklesWithoutLocks):
    """A window under a byte budget (`held`), plus the requests still a round trip away from their first byte.

    Why: a budget that bounds the bytes of big requests in flight (whole shards) holds enough of them to keep
    the client busy where the round trip is short; where it is long, each request spends its first round trip
    `round_trip_s` with nothing arriving, and the budget's requests spend that much less of their time
    transferring (s3-shards at 50 ms: 0.71-0.86 of its 0 ms rate at 8 GETs, 0.90-1.03 with the extra ones).
    By Little's law, with requests of mean latency T started at depth / T a second, depth x r / T of them
    wait out the round trip at any time; keeping `held.depth` of them transferring asks for
    depth = held x T / (T - r), that is held x r / (T - r) more, at most `most`, changed when that differs by
    a whole request. T is the mean latency of the last 2 x `held.depth` completions (at least 8); r is
    measured apart, by the reader (a request with no body). The extra requests' memory is taken when they
    start, so a long round trip costs its bandwidth-delay product in memory, at most `most` requests' worth
    (s3-shards at 50 ms: peak RSS 283 -> 305 MB).
    """

    def __init__(self, held: AutoWindow, round_trip_s: float, most: int) -> None:
        if round_trip_s < 0 or most < 0:
            raise ValueError(f"need round_trip_s >= 0 and most >= 0, got {round_trip_s}, {most}")
        self.held, self.round_trip_s, self.most = held, round_trip_s, most
        self._lock = threading.Lock()
        self._latencies: deque[float] = deque(maxlen=max(8, 2 * held.cap))
        self.extra = 0
        self._history = [held.depth]

    @property
    def depth(self) -> int:
        return self.held.depth + self.extra

    @property
    def history(self) -> list[int]:
        """Every depth this window took (the budget's and the round trip's together), in order."""
        return list(self._history)

    @property
    def measured(self) -> list[tuple[int, float, float]]:
        return self.held.measured

    @property
    def tuning(self) -> bool:
        return self.held.tuning

    def begin(self, total: int | None) -> None:
        self.held.begin(total)

    def started(self) -> float:
        return self.held.started()

    def finished(self, started_at: float) -> None:
        self.held.finished(started_at)
        latency = self.held.clock() - started_at
        with self._lock:
            self._latencies.append(latency)
            recent = list(self._latencies)[-max(8, 2 * self.held.depth):]
            transferring = sum(recent) / len(recent) - self.round_trip_s
            wanted = self.held.depth * self.round_trip_s / transferring if transferring > 0 else self.most
            if abs(wanted - self.extra) >= 1:  # a whole GET more or less: not every completion's noise
                self.extra = min(self.most, round(wanted))
            if self.depth != self._history[-1]:
                self._history.append(self.depth)

    def stall(self) -> None:
        self.held.stall()

    def resume(self) -> None:
        self.held.resume()


def make_window(concurrency: Concurrency | Window, items_per_request: int = 1, reports_stalls: bool = False) -> Window:
    """The window a config's `concurrency` asks for: "auto" -> AutoWindow, N -> FixedWindow(N).

    With `items_per_request` > 1 (a request reads several items), `concurrency` still counts items: the
    window counts requests, N / items_per_request of them ("auto": at most AUTO_CAP items), so the memory
    held by requests in flight does not grow with their size.

    `reports_stalls`: the submitter calls `stall`/`resume` whenever it waits on its consumer, so any other
    interval is one the window limits, and "auto" skips its Little's-law check of how full the window was.
    That check takes reads done but held behind the oldest (in-order delivery) for a submitter that lags:
    on an H100 (results/gpu/depths) the cassandra loader's intervals read "not full" and it settled at 28
    and 7 in flight, where a fixed 256 fed DALI 1.2x and 1.7x faster (measured before this change).
    """
    if concurrency == AUTO:
        widest = max(1, AUTO_CAP // items_per_request)
        filled = {"min_fill": 0.0} if reports_stalls else {}  # the window is full whenever it is not stalled
        return AutoWindow(start=min(widest, max(1, AUTO_START // items_per_request)), cap=widest, **filled)
    if isinstance(concurrency, int):
        return FixedWindow(-(-concurrency // items_per_request) if concurrency > 0 else concurrency)
    if hasattr(concurrency, "depth"):
        return concurrency  # type: ignore[return-value]
    raise ValueError(f"concurrency must be a positive number or 'auto', got {concurrency!r}")


def parse_concurrency(text: str | int) -> Concurrency:
    """A command line's concurrency: "auto" or a number from 1 to 1024; anything else is one clear line."""
    if isinstance(text, int) or str(text).strip().isdigit():
        value = int(text)
        if 1 <= value <= 1024:
            return value
    elif str(text).strip().lower() == AUTO:
        return AUTO
    raise WorkbenchError(f"concurrency {text!r}: give a number of requests in flight (1 to 1024) or 'auto'")


def pool_size(concurrency: Concurrency) -> int:
    """Threads or connections to provide for `concurrency`: the number itself, or the widest "auto" window."""
    return AUTO_CAP if concurrency == AUTO else int(concurrency)


def fixed_depth(concurrency: Concurrency) -> int:
    """A plain fixed loop's depth (raw ceilings): the number itself, or REFERENCE_DEPTH for "auto"."""
    return REFERENCE_DEPTH if concurrency == AUTO else int(concurrency)


class HasWindow:
    """A reader whose requests go through `self._window`: says which depth it used (recorded in results)."""

    _window: Window

    @property
    def window(self) -> int:
        """The depth in use at the end of the last epoch (or now, during one)."""
        return self._window.depth

    @property
    def window_history(self) -> list[int]:
        return self._window.history

    @property
    def window_intervals(self) -> list[tuple[int, float, float]]:
        """What an "auto" window decided on: (depth, completions/s, mean latency ms) per interval."""
        return self._window.measured

    @property
    def window_tuning(self) -> bool:
        """Whether an "auto" window still searches its depth (`bench loaders` times epochs once it does not)."""
        return self._window.tuning
