"""Bounded concurrency, written once: requests in flight for readers, jobs in flight for writers.

`in_flight` keeps many requests outstanding: the one mechanism every remote loader uses to hide latency.

With `depth` requests outstanding, a path with round-trip time R delivers up to depth/R items per
second instead of 1/R. Results come back in submission order, or as they complete (`ordered=False`,
the plugin's out-of-order mode), which avoids head-of-line blocking behind one slow request.

The depth is a number, or a `Window` that may change it while requests run: `AutoWindow` (what
``concurrency="auto"`` gives) measures completions per second and widens the window while the rate
still rises, so users need not guess the depth a network needs (Little's law: depth = rate x latency).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import itertools
import math
import queue
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, ClassVar, Literal, Protocol, TypeVar

from workbench.errors import WorkbenchError

K = TypeVar("K")
V = TypeVar("V")

AUTO = "auto"
Concurrency = int | Literal["auto"]  # what a config's `concurrency` holds
AUTO_START = 4  # requests in flight before anything is measured
AUTO_CAP = 512  # the widest window "auto" opens (threads and connections are sized for it)
# Bytes that an "auto" window of big requests (whole shards, get_all batches) may keep in flight per process,
# shared by its DataLoader workers: what arrives faster than it is consumed waits whole in memory.
READ_BUDGET = 96 * 2**20
REFERENCE_DEPTH = 32  # what a plain fixed loop (a raw ceiling) uses when the config says "auto"
# An interval of the re-check spans at least this many mean latencies. Why: on a long round trip a window's
# completions come in bursts about one round trip apart, and an interval of a round trip or two counts a
# burst more or less depending on where it starts and ends (up to (k + 1) / k of the rate over k round trips),
# where the re-check tells depths apart by 5 %.
RECHECK_ROUND_TRIPS = 4


def budget_depth(request_bytes: int, readers: int = 1) -> int:
    """Requests of `request_bytes` that READ_BUDGET, shared by a process's `readers`, holds; never below
    AUTO_START (requests too big for the budget keep the fixed default's depth)."""
    return max(AUTO_START, READ_BUDGET // max(1, readers) // max(1, request_bytes))


# ------------------------------------------------------------------------------------------ pickling


class PicklesWithoutLocks:
    """Pickles (DataLoader workers, spawn) without its locks and its process-bound state; a copy gets new locks.

    `locks`: attributes holding a threading.Lock; `process_state`: attribute -> the value a copy starts with
    (clients, pools, datasets that each process builds for itself).
    """

    locks: ClassVar[tuple[str, ...]] = ("_lock",)
    process_state: ClassVar[dict[str, Any]] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = {k: v for k, v in self.__dict__.items() if k not in self.locks}
        state.update({name: copy.copy(value) for name, value in self.process_state.items()})
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        for name in self.locks:
            setattr(self, name, threading.Lock())


# ------------------------------------------------------------------------------------------ windows


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


class AutoWindow(PicklesWithoutLocks):
    """A window that sizes itself: widen geometrically while that still raises the rate, then settle.

    Why: the depth that hides a network's latency is rate x latency (Little's law), and neither is known
    before reading. It starts with a ramp: from `start`, after each window's worth of completions (about
    one round trip), the window widens by the pace at which they arrived x their latency / depth (the
    depth Little's law asks for), at most `ramp_factor` at once, while that is above `latency_bound`;
    waiting for the timed intervals below at every step would spend most of a short epoch at narrow
    depths on a long round trip. From then on, each interval of at least `depth` completions (and
    `min_interval_s`) of requests sent at the current depth gives a rate and the mean latency of its
    requests. The window grows by `growth` (up to `cap`, never past the keys left) while it is full
    (rate x latency >= `min_fill` x depth: else the submitter, not the window, limits the rate) and its
    requests do not queue (mean latency <= `latency_bound` x the base latency, the lowest interval mean
    seen: wider means proportionally faster, whatever the noise in the rate), or while a wider window
    raised the rate by more than `min_gain` with latency still below `max_queueing` x the base. After
    `patience` intervals that do neither, a window whose requests queue (the ramp overshot: a local disk
    or a busy client, where requests wait for the CPU, not the network) narrows by `growth` while the
    rate stays within `min_gain` of the best and its requests still queue. It settles on the narrowest
    depth that held the best rate, never below best rate x base latency (what the round trip alone
    requires). The depth of the first run (epoch) stays for later ones, after one re-check (`_recheck`,
    from the second run on, settled or not): the first epoch is a cold one (first reads from disk,
    connections, imports), whose slow completions set a base latency that warm reads queueing for the
    CPU stay under, so wider depths looked profitable. The re-check judges by rate alone: it tries
    narrower depths while they read at least as fast, or, when the first narrower one does not, wider ones
    while they raise the rate, and keeps the best. Each candidate is timed between two timings of the depth it is
    compared with (A B A), each the mean of `recheck_intervals` intervals of at least `recheck_interval_s`
    (short: a fast local reader's epoch lasts a fraction of a second; two: one short interval on a shared
    CPU is noisy): the load of a shared machine drifts by a tenth between minutes, and a candidate timed
    after its reference only would be judged by that drift. While the submitter waits on its consumer
    (`stall` to `resume`: a full output queue) nothing is measured: such intervals time the consumer, not
    the window. Thread-safe; `clock` is injectable so the logic runs on simulated time.
    """

    def __init__(self, start: int = AUTO_START, cap: int = AUTO_CAP, growth: float = 2.0, min_gain: float = 0.05,
                 patience: int = 2, min_interval_s: float = 0.1, latency_bound: float = 1.5,
                 max_queueing: float = 3.0, min_fill: float = 0.75, ramp_factor: float = 8.0,
                 recheck_interval_s: float = 0.05, recheck_intervals: int = 2,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        if not 1 <= start <= cap:
            raise ValueError(f"need 1 <= start <= cap, got start {start}, cap {cap}")
        if growth <= 1:
            raise ValueError(f"growth must be > 1, got {growth}")
        self.start, self.cap, self.growth, self.min_gain = start, cap, growth, min_gain
        self.patience, self.min_interval_s, self.clock = patience, min_interval_s, clock
        self.latency_bound, self.max_queueing, self.min_fill = latency_bound, max_queueing, min_fill
        self.ramp_factor = ramp_factor
        self.recheck_interval_s, self.recheck_intervals = recheck_interval_s, recheck_intervals
        self._lock = threading.Lock()
        self._depth = start
        self._history = [start]
        self.settled = False
        self.best_rate = 0.0  # completions/s at best_depth
        self.best_depth = start
        self.base_latency_s = math.inf  # the lowest mean latency of an interval: the round trip plus service
        self._strikes = 0
        self.ramping = True  # sizing by Little's law each window's worth of completions (`_ramp`)
        self.narrowing = False  # requests queued at the widest depth: trying narrower ones (`_narrow`)
        self.rechecking = False  # a later run tries narrower or wider depths (`_recheck`)
        self.rechecked = False  # that re-check is done: the depth stays
        self._runs = 0  # calls of `begin`
        self._recheck_depth = start  # the reference: the narrowest depth that held the rate, or widest that raised it
        self._recheck_from = start  # the depth the re-check started at
        self._recheck_step = -1  # -1: narrower, +1: wider
        self._recheck_before = 0.0  # the reference's rate timed before the candidate (0: not timed yet)
        self._recheck_candidate = 0.0  # the candidate's rate
        self._recheck_sum, self._recheck_seen = 0.0, 0  # the rates of this timing's intervals, and their count
        self._total: int | None = None
        self._submitted = 0
        self._finished = 0
        self._peak_outstanding = 0  # the most requests in flight since the last decision
        self._stalled = False  # the submitter waits on its consumer: completions now say nothing
        self._t0: float | None = None  # start of the measuring interval: its first completion
        self._changed_at = -math.inf  # requests sent before the last change belong to the old depth
        self._count = 0  # completions in it
        self._latency_sum = 0.0  # their latencies
        self.measured: list[tuple[int, float, float]] = []  # (depth, completions/s, mean latency ms) per interval

    @property
    def depth(self) -> int:
        return self._depth

    @property
    def history(self) -> list[int]:
        """Every depth this window took, in order (the first is `start`)."""
        return list(self._history)

    @property
    def tuning(self) -> bool:
        """Still searching its depth: until its re-check (from the second run on) is done."""
        return not self.rechecked

    def begin(self, total: int | None) -> None:
        """A new run of `total` requests (None: unknown) starts now; a settled depth is kept, and re-checked
        once (`_recheck`), from the second run on, in the next ones until that is done."""
        with self._lock:
            self._total, self._submitted, self._finished, self._peak_outstanding = total, 0, 0, 0
            self._t0, self._count, self._latency_sum, self._strikes = None, 0, 0.0, 0
            self._changed_at, self._stalled = -math.inf, False
            self._runs += 1
            if self._runs >= 2 and not self.rechecked and not self.rechecking:
                self.settled = self.ramping = self.narrowing = False
                self.rechecking, self._recheck_from, self._recheck_depth = True, self._depth, self._depth
                self._recheck_step, self._recheck_before, self._recheck_candidate = -1, 0.0, 0.0
                self._recheck_sum, self._recheck_seen = 0.0, 0

    def started(self) -> float:
        """Call when a request is submitted; pass what it returns to `finished`."""
        now = self.clock()
        with self._lock:
            self._submitted += 1
            self._peak_outstanding = max(self._peak_outstanding, self._submitted - self._finished)
        return now

    def finished(self, started_at: float) -> None:
        """Call when a request completes (from any thread)."""
        now = self.clock()
        with self._lock:
            self._finished += 1
            if self.settled or self._stalled or (started_at < self._changed_at and not self.ramping):
                return
            if self._t0 is None:
                self._t0 = now
            self._count += 1
            self._latency_sum += now - started_at
            remaining = None if self._total is None else self._total - self._submitted
            if remaining is not None and remaining <= 0:  # the tail drains: its rates say nothing
                return
            elapsed = now - self._t0
            shortest = self.min_interval_s
            if self.rechecking:  # short, but whole round trips: a window's completions come in bursts
                shortest = max(self.recheck_interval_s, RECHECK_ROUND_TRIPS * self._latency_sum / self._count)
            if self._count < self._depth or (elapsed < shortest and not self.ramping):
                return
            depth = self._depth
            decide = self._recheck if self.rechecking else self._ramp if self.ramping else self._decide
            decide(self._count / elapsed if elapsed > 0 else math.inf, self._latency_sum / self._count, remaining)
            self._t0, self._count, self._latency_sum = (now if self._depth == depth else None), 0, 0.0
            self._peak_outstanding = self._submitted - self._finished
            if self._depth != depth:
                self._changed_at = now

    def stall(self) -> None:
        """The submitter waits on its consumer: drop the interval under way, measure nothing until `resume`."""
        with self._lock:
            self._stalled = True
            self._t0, self._count, self._latency_sum = None, 0, 0.0

    def resume(self) -> None:
        """The submitter sends again: a new interval starts with the requests sent from now on."""
        now = self.clock()
        with self._lock:
            self._stalled = False
            self._changed_at = now
            self._peak_outstanding = self._submitted - self._finished

    def _ramp(self, pace: float, latency_s: float, remaining: int | None) -> None:
        """The start, sized by Little's law; the timed intervals of `_decide` take over when it ends.

        A window's worth of completions arrives at the pace the server and client can go (`pace`, per
        second); the window alone would give depth / latency. Their ratio, the headroom, says how much
        wider the window should be: it widens by it (at most `ramp_factor` at once) while the headroom is
        above `latency_bound` and latency has not risen that much above the base either. A window of one
        request (requests of many items, a local disk) has no pace in one completion: the ramp ends there, and
        the timed intervals measure one request's rate and latency, the base a wider window must beat (on a
        busy client a second reading thread only queues for the CPU: measured on fs, 16 files in flight read
        13,000 files/s at 73 µs of CPU each, 64 files 9,300/s at 143 µs).
        """
        self.measured.append((self._depth, round(pace, 1), round(latency_s * 1000, 2)))
        self.base_latency_s = min(self.base_latency_s, latency_s)
        if self._depth == 1:
            self.ramping = False
            return
        full = self._peak_outstanding >= self.min_fill * self._depth  # else the submitter limits, not the window
        headroom = pace * latency_s / self._depth
        if full and headroom >= self.latency_bound and latency_s <= self.latency_bound * self.base_latency_s:
            wider = self._wider(remaining, min(headroom, self.ramp_factor))
            if wider > self._depth:
                self._set(wider)
                return
        self.ramping = False

    def _wider(self, remaining: int | None, factor: float | None = None) -> int:
        """The next depth up: `factor` (default `growth`) times this one, at most `cap`, never past the keys left."""
        wider = min(self.cap, math.ceil(self._depth * (factor or self.growth)))
        if remaining is not None:
            wider = min(wider, max(self._depth, remaining))
        return wider

    def _decide(self, rate: float, latency_s: float, remaining: int | None) -> None:
        self.measured.append((self._depth, round(rate, 1), round(latency_s * 1000, 2)))
        self.base_latency_s = min(self.base_latency_s, latency_s)
        queueing = latency_s / self.base_latency_s if self.base_latency_s > 0 else math.inf
        if self.narrowing:
            self._narrow(rate, queueing)
            return
        full = rate * latency_s >= self.min_fill * self._depth  # Little's law: what was really in flight
        gained = self.best_rate > 0 and rate > self.best_rate * (1 + self.min_gain)
        if rate > self.best_rate:
            self.best_rate, self.best_depth = rate, self._depth
        if full and (queueing <= self.latency_bound or (gained and queueing <= self.max_queueing)):
            self._strikes = 0
            wider = self._wider(remaining)
            if wider > self._depth:
                self._set(wider)
            elif self._depth >= self.cap:
                self._settle()
            return
        self._strikes += 1
        if self._strikes < self.patience:
            return
        if queueing > self.latency_bound and self._narrower() < self._depth:
            self.narrowing = True
            self._set(self._narrower())
            return
        self._settle()

    def _narrow(self, rate: float, queueing: float) -> None:
        """One interval of a narrower window: keep it if it held the best rate (within `min_gain`), and go
        narrower while its requests still queue; settle on the narrowest that held."""
        if rate < self.best_rate * (1 - self.min_gain):
            self._settle()  # on best_depth: where the best rate was, or the narrowest depth that held it
            return
        self.best_depth = min(self.best_depth, self._depth)
        if queueing > self.latency_bound and self._narrower() < self._depth:
            self._set(self._narrower())
        else:
            self._settle()

    def _recheck(self, rate: float, latency_s: float, remaining: int | None) -> None:
        """One interval of the re-check. Its timings alternate reference, candidate, reference (A B A): the
        candidate's rate is compared with the mean of the two around it. Narrower candidates (/ `growth`) are
        kept while they read at least as fast; if the first of them does not, wider ones (x `growth`, up to
        `cap`) while each raises the rate by `min_gain`. A kept candidate is the next reference.

        By rate alone, with no floor from latency: the lowest latency seen may come from another epoch, and a
        depth the round trip needs loses rate when narrowed (measured: fs settled at 64-128 files after a cold
        first epoch, where 16 read 1.3x faster on warm epochs). A tie keeps the wider depth: a window too narrow
        loses rate, one too wide costs memory only, and where it costs rate (requests queueing for a busy CPU)
        narrower reads faster, not as fast. A narrower depth kept when within `min_gain` left s3-objects at 50 ms
        at 128 in flight where 256 read 5-10 % faster, and losses within it add up from step to step.
        """
        self.measured.append((self._depth, round(rate, 1), round(latency_s * 1000, 2)))
        self._recheck_sum, self._recheck_seen = self._recheck_sum + rate, self._recheck_seen + 1
        if self._recheck_seen < self.recheck_intervals:
            return
        timed, self._recheck_sum, self._recheck_seen = self._recheck_sum / self._recheck_seen, 0.0, 0
        if self._depth != self._recheck_depth:  # the candidate's timing: back to the reference for its second
            self._recheck_candidate = timed
            self._set(self._recheck_depth)
            return
        if not self._recheck_before:  # the reference's first timing: the first candidate next
            self._recheck_before = timed
            self._try_next()
            return
        ratio = self._recheck_candidate / ((self._recheck_before + timed) / 2)
        held = ratio >= 1 if self._recheck_step < 0 else ratio > 1 + self.min_gain
        if held:
            self._recheck_depth, self._recheck_before = self._recheck_next(), self._recheck_candidate
        elif self._recheck_step < 0 and self._recheck_depth == self._recheck_from:
            self._recheck_step, self._recheck_before = 1, timed  # the first narrower one lost: wider ones
        else:
            self._end_recheck()  # a narrower one held, then the next lost; or a wider one gained nothing
            return
        self._try_next()

    def _try_next(self) -> None:
        """Time the candidate after the reference; where there is none, turn wider (none below 1) or end."""
        following = self._recheck_next()
        if following == self._recheck_depth and self._recheck_step < 0 and self._recheck_depth == self._recheck_from:
            self._recheck_step = 1
            following = self._recheck_next()
        if following == self._recheck_depth:
            self._end_recheck()
        else:
            self._set(following)

    def _recheck_next(self) -> int:
        """The candidate after the reference: one `growth` step from it, within 1 and `cap`."""
        if self._recheck_step < 0:
            return max(1, math.ceil(self._recheck_depth / self.growth))
        return min(self.cap, math.ceil(self._recheck_depth * self.growth))

    def _end_recheck(self) -> None:
        self._set(self._recheck_depth)
        self.rechecking, self.rechecked, self.settled = False, True, True

    def _required(self) -> int:
        """The depth the round trip alone requires at the best rate (Little's law)."""
        return math.ceil(self.best_rate * self.base_latency_s) if math.isfinite(self.base_latency_s) else 1

    def _narrower(self) -> int:
        """The next depth down: this one / `growth`, never below what the round trip requires, nor 1."""
        return max(1, self._required(), math.ceil(self._depth / self.growth))

    def _settle(self) -> None:
        self._set(max(self.best_depth, min(self.cap, self._required())))
        self.settled = True

    def limit(self, cap: int) -> None:
        """Lower the widest depth to `cap` (at least 1), and the depth with it: for a reader that learns the size
        of its requests from the first answers (a memory budget over the bytes a request brings)."""
        with self._lock:
            self.cap = max(1, min(self.cap, cap))
            self.start = min(self.start, self.cap)
            self.best_depth = min(self.best_depth, self.cap)
            self._recheck_depth = min(self._recheck_depth, self.cap)
            self._recheck_from = min(self._recheck_from, self.cap)
            if self._depth > self.cap:
                self._set(self.cap)
                self._changed_at = self.clock()

    def _set(self, depth: int) -> None:
        if depth != self._depth:
            self._depth = depth
            self._history.append(depth)


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


# ------------------------------------------------------------------------------------------ in flight


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
