"""`AutoWindow`: the depth of requests in flight that ``concurrency="auto"`` finds by itself.

Why: the depth that hides a network's latency is rate x latency (Little's law), and neither is known before
reading. The window is an explicit state machine: a `Phase`, one method per phase, its tuning in a frozen
`AutoTuning`. How each phase decides, and why, is derived in auto_window.md beside this file.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import threading
import time
from collections.abc import Callable

from workbench.concurrency.pickling import PicklesWithoutLocks

AUTO_START = 4  # requests in flight before anything is measured
AUTO_CAP = 512  # the widest window "auto" opens (threads and connections are sized for it)
# An interval of the re-check spans at least this many mean latencies. Why: on a long round trip a window's
# completions come in bursts about one round trip apart, and an interval of a round trip or two counts a
# burst more or less depending on where it starts and ends (up to (k + 1) / k of the rate over k round trips),
# where the re-check tells depths apart by 5 %.
RECHECK_ROUND_TRIPS = 4


class Phase(enum.Enum):
    """Where the search is; each phase but the settled ones has one method that judges its intervals."""

    RAMP = enum.auto()  # `_ramp`: widen by Little's law after each window's worth of completions
    GROW = enum.auto()  # `_grow`: timed intervals; widen while full and not queueing, or while it gains
    NARROW = enum.auto()  # `_narrow`: the ramp overshot (requests queue): narrower while the rate holds
    SETTLED = enum.auto()  # the first run's depth, re-checked once from the second run on
    RECHECK = enum.auto()  # `_recheck`: narrower, then wider depths timed against the reference (A B A)
    DONE = enum.auto()  # re-checked: the depth stays


@dataclasses.dataclass(frozen=True)
class AutoTuning:
    """The constants of the search (auto_window.md says what each one bounds)."""

    growth: float = 2.0  # a step of the timed phases: x growth wider, / growth narrower
    min_gain: float = 0.05  # a wider window must raise the rate by this much to count as a gain
    patience: int = 2  # intervals that neither fill nor gain before the window stops growing
    min_interval_s: float = 0.1  # the shortest timed interval (at least `depth` completions too)
    latency_bound: float = 1.5  # latency over the base by more than this: requests queue
    max_queueing: float = 3.0  # a gain still counts up to this much latency over the base
    min_fill: float = 0.75  # rate x latency below this x depth: the submitter, not the window, limits
    ramp_factor: float = 8.0  # the most the ramp widens at once
    recheck_interval_s: float = 0.05  # the shortest interval of the re-check
    recheck_intervals: int = 2  # intervals averaged into one timing of the re-check

    def __post_init__(self) -> None:
        if self.growth <= 1:
            raise ValueError(f"growth must be > 1, got {self.growth}")


class AutoWindow(PicklesWithoutLocks):
    """A window that sizes itself: widen while that still raises the rate, then settle; re-check once.

    `started`/`finished` are called around every request (from any thread); `begin` starts a run (epoch),
    `stall`/`resume` bracket the time its submitter waits on its consumer. `limit` lowers the widest depth.
    `params` (an AutoTuning) or keyword overrides of its fields; `clock` is injectable for simulated time.
    """

    def __init__(self, start: int = AUTO_START, cap: int = AUTO_CAP, params: AutoTuning | None = None,
                 clock: Callable[[], float] = time.perf_counter, **overrides: float) -> None:
        if not 1 <= start <= cap:
            raise ValueError(f"need 1 <= start <= cap, got start {start}, cap {cap}")
        self.params = dataclasses.replace(params or AutoTuning(), **overrides)
        self.start, self.cap, self.clock = start, cap, clock
        self._lock = threading.Lock()
        self.phase = Phase.RAMP
        self._depth = start
        self._history = [start]
        self.best_rate = 0.0  # completions/s at best_depth
        self.best_depth = start
        self.base_latency_s = math.inf  # the lowest mean latency of an interval: the round trip plus service
        self._strikes = 0
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

    # ------------------------------------------------------------------------------- what it says

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
        return self.phase is not Phase.DONE

    @property
    def settled(self) -> bool:
        """Measuring nothing: the first run's depth is found (re-checked or not)."""
        return self.phase in (Phase.SETTLED, Phase.DONE)

    @property
    def ramping(self) -> bool:
        return self.phase is Phase.RAMP

    @property
    def narrowing(self) -> bool:
        return self.phase is Phase.NARROW

    @property
    def rechecking(self) -> bool:
        return self.phase is Phase.RECHECK

    @property
    def rechecked(self) -> bool:
        return self.phase is Phase.DONE

    # ------------------------------------------------------------------------------- what it is told

    def begin(self, total: int | None) -> None:
        """A new run of `total` requests (None: unknown) starts now; a settled depth is kept, and re-checked
        once (`_recheck`), from the second run on, in the next ones until that is done."""
        with self._lock:
            self._total, self._submitted, self._finished, self._peak_outstanding = total, 0, 0, 0
            self._t0, self._count, self._latency_sum, self._strikes = None, 0, 0.0, 0
            self._changed_at, self._stalled = -math.inf, False
            self._runs += 1
            if self._runs >= 2 and self.phase not in (Phase.RECHECK, Phase.DONE):
                self.phase, self._recheck_from, self._recheck_depth = Phase.RECHECK, self._depth, self._depth
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
        """Call when a request completes (from any thread): ends an interval once it is long enough, and hands
        it to its phase's method."""
        now = self.clock()
        with self._lock:
            self._finished += 1
            ramping = self.phase is Phase.RAMP  # the ramp counts requests sent before its last step too
            if self.settled or self._stalled or (started_at < self._changed_at and not ramping):
                return
            if self._t0 is None:
                self._t0 = now
            self._count += 1
            self._latency_sum += now - started_at
            remaining = None if self._total is None else self._total - self._submitted
            if remaining is not None and remaining <= 0:  # the tail drains: its rates say nothing
                return
            elapsed = now - self._t0
            shortest = self.params.min_interval_s
            if self.phase is Phase.RECHECK:  # short, but whole round trips: a window's completions come in bursts
                shortest = max(self.params.recheck_interval_s, RECHECK_ROUND_TRIPS * self._latency_sum / self._count)
            if self._count < self._depth or (elapsed < shortest and not ramping):
                return
            depth = self._depth
            judge = {Phase.RAMP: self._ramp, Phase.RECHECK: self._recheck}.get(self.phase, self._decide)
            judge(self._count / elapsed if elapsed > 0 else math.inf, self._latency_sum / self._count, remaining)
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

    # ------------------------------------------------------------------------------- the phases

    def _ramp(self, pace: float, latency_s: float, remaining: int | None) -> None:
        """RAMP: widen by the headroom Little's law gives (pace x latency / depth), at most `ramp_factor` at
        once, while the window is full, the headroom is over `latency_bound` and latency has not risen that
        much over the base; else GROW. A window of one request has no pace in one completion: GROW at once."""
        p = self.params
        self.measured.append((self._depth, round(pace, 1), round(latency_s * 1000, 2)))
        self.base_latency_s = min(self.base_latency_s, latency_s)
        if self._depth == 1:
            self.phase = Phase.GROW
            return
        full = self._peak_outstanding >= p.min_fill * self._depth  # else the submitter limits, not the window
        headroom = pace * latency_s / self._depth
        if full and headroom >= p.latency_bound and latency_s <= p.latency_bound * self.base_latency_s:
            wider = self._wider(remaining, min(headroom, p.ramp_factor))
            if wider > self._depth:
                self._set(wider)
                return
        self.phase = Phase.GROW

    def _decide(self, rate: float, latency_s: float, remaining: int | None) -> None:
        """A timed interval of GROW or NARROW: recorded, then judged by its phase's method."""
        self.measured.append((self._depth, round(rate, 1), round(latency_s * 1000, 2)))
        self.base_latency_s = min(self.base_latency_s, latency_s)
        queueing = latency_s / self.base_latency_s if self.base_latency_s > 0 else math.inf
        if self.phase is Phase.NARROW:
            self._narrow(rate, queueing)
        else:
            self._grow(rate, latency_s, queueing, remaining)

    def _grow(self, rate: float, latency_s: float, queueing: float, remaining: int | None) -> None:
        """GROW: x `growth` while full and not queueing (or gaining `min_gain` under `max_queueing`); after
        `patience` intervals that do neither, NARROW if requests queue, else SETTLED."""
        p = self.params
        full = rate * latency_s >= p.min_fill * self._depth  # Little's law: what was really in flight
        gained = self.best_rate > 0 and rate > self.best_rate * (1 + p.min_gain)
        if rate > self.best_rate:
            self.best_rate, self.best_depth = rate, self._depth
        if full and (queueing <= p.latency_bound or (gained and queueing <= p.max_queueing)):
            self._strikes = 0
            wider = self._wider(remaining)
            if wider > self._depth:
                self._set(wider)
            elif self._depth >= self.cap:
                self._settle()
            return
        self._strikes += 1
        if self._strikes < p.patience:
            return
        if queueing > p.latency_bound and self._narrower() < self._depth:
            self.phase = Phase.NARROW
            self._set(self._narrower())
            return
        self._settle()

    def _narrow(self, rate: float, queueing: float) -> None:
        """NARROW: keep a narrower window that held the best rate (within `min_gain`) and go narrower while its
        requests still queue; settle on the narrowest that held."""
        if rate < self.best_rate * (1 - self.params.min_gain):
            self._settle()  # on best_depth: where the best rate was, or the narrowest depth that held it
            return
        self.best_depth = min(self.best_depth, self._depth)
        if queueing > self.params.latency_bound and self._narrower() < self._depth:
            self._set(self._narrower())
        else:
            self._settle()

    def _recheck(self, rate: float, latency_s: float, remaining: int | None) -> None:
        """RECHECK: timings alternate reference, candidate, reference (A B A); the candidate's rate is compared
        with the mean of the two around it. Narrower candidates are kept while they read at least as fast; if
        the first of them does not, wider ones while each raises the rate by `min_gain`. A kept candidate is
        the next reference; DONE when a step loses."""
        p = self.params
        self.measured.append((self._depth, round(rate, 1), round(latency_s * 1000, 2)))
        self._recheck_sum, self._recheck_seen = self._recheck_sum + rate, self._recheck_seen + 1
        if self._recheck_seen < p.recheck_intervals:
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
        held = ratio >= 1 if self._recheck_step < 0 else ratio > 1 + p.min_gain
        if held:
            self._recheck_depth, self._recheck_before = self._recheck_next(), self._recheck_candidate
        elif self._recheck_step < 0 and self._recheck_depth == self._recheck_from:
            self._recheck_step, self._recheck_before = 1, timed  # the first narrower one lost: wider ones
        else:
            self._end_recheck()  # a narrower one held, then the next lost; or a wider one gained nothing
            return
        self._try_next()

    # ------------------------------------------------------------------------------- steps

    def _wider(self, remaining: int | None, factor: float | None = None) -> int:
        """The next depth up: `factor` (default `growth`) times this one, at most `cap`, never past the keys left."""
        wider = min(self.cap, math.ceil(self._depth * (factor or self.params.growth)))
        if remaining is not None:
            wider = min(wider, max(self._depth, remaining))
        return wider

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
            return max(1, math.ceil(self._recheck_depth / self.params.growth))
        return min(self.cap, math.ceil(self._recheck_depth * self.params.growth))

    def _end_recheck(self) -> None:
        self._set(self._recheck_depth)
        self.phase = Phase.DONE

    def _required(self) -> int:
        """The depth the round trip alone requires at the best rate (Little's law)."""
        return math.ceil(self.best_rate * self.base_latency_s) if math.isfinite(self.base_latency_s) else 1

    def _narrower(self) -> int:
        """The next depth down: this one / `growth`, never below what the round trip requires, nor 1."""
        return max(1, self._required(), math.ceil(self._depth / self.params.growth))

    def _settle(self) -> None:
        self._set(max(self.best_depth, min(self.cap, self._required())))
        self.phase = Phase.SETTLED

    def _set(self, depth: int) -> None:
        if depth != self._depth:
            self._depth = depth
            self._history.append(depth)
