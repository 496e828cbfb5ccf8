"""AutoWindow on simulated time: a server with a fixed round trip and a bounded service rate, no sleeping."""

import asyncio
import heapq
import math
import pickle
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from workbench.concurrency import AUTO_CAP, AutoWindow, FixedWindow, fixed_depth, in_flight, make_window, pool_size
from workbench.loaders.cassandra_native import _as_completed, _in_order


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def simulate(latency_s: float, service_s: float, requests: int = 5000, jitter: float = 0.0,
             contention: float = 0.0, **options) -> AutoWindow:
    """Drive an AutoWindow like `in_flight` does: one server (FIFO, `service_s` per request) behind `latency_s`.

    `jitter`: each service time is drawn uniformly within +-jitter of `service_s` (a shared, noisy CPU).
    `contention`: each request in flight beyond the first adds this share to every service time (Python
    threads that hand the GIL to each other: two readers are slower than one).
    """
    window = AutoWindow(clock=Clock(), **options)
    run_epoch(window, latency_s, service_s, requests, jitter, contention)
    return window


def run_epoch(window: AutoWindow, latency_s: float, service_s: float, requests: int = 5000, jitter: float = 0.0,
              contention: float = 0.0, drift: float = 0.0) -> float:
    """One run of `requests` through `window` (whose clock is a Clock) against that server; returns its rate.

    `drift`: every round trip and service time stretches by this share per second since the run began (the load
    of a shared machine rising, or easing when < 0): every depth's rate changes by the same factor.
    """
    noise = random.Random(1)
    clock = window.clock
    window.begin(requests)
    pending: list[tuple[float, int, float]] = []  # (completion time, seq, started_at)
    began = server_free = clock.now
    submitted = 0
    while submitted < requests or pending:
        while submitted < requests and len(pending) < window.depth:
            started = window.started()
            load = 1 + drift * (clock.now - began)
            served = load * service_s * (1 + noise.uniform(-jitter, jitter)) * (1 + contention * len(pending))
            server_free = max(server_free, clock.now + load * latency_s / 2) + served  # queue at the server
            heapq.heappush(pending, (server_free + load * latency_s / 2, submitted, started))
            submitted += 1
        done, _, started = heapq.heappop(pending)
        clock.now = done
        window.finished(started)
    return requests / (clock.now - began)


def test_the_window_at_50ms_is_wider_than_at_0ms():
    fast = simulate(latency_s=0.0, service_s=0.001)
    slow = simulate(latency_s=0.050, service_s=0.001)
    assert fast.settled and slow.settled
    assert slow.depth > fast.depth
    assert slow.depth >= 0.050 / 0.001  # Little's law: rate 1000/s x 50 ms


def test_a_long_round_trip_costs_under_a_tenth_of_a_short_epoch():
    """2,000 requests to a 1,000/s server: the ramp sizes the window by Little's law within a few round trips,
    so 50 ms of round trip keeps >= 0.9 of the 0 ms rate (simulated time: the issue's target, without the noise)."""
    near = simulate(latency_s=0.0, service_s=0.001, requests=2000)
    far = simulate(latency_s=0.050, service_s=0.001, requests=2000)
    assert far.clock.now <= near.clock.now / 0.9, (far.history, far.measured[:6])
    assert far.history[2] >= 0.050 / 0.001, far.history  # Little's depth by the second widening


def test_it_stops_growing_when_the_rate_plateaus():
    window = simulate(latency_s=0.010, service_s=0.001)  # the server's 1000/s is reached at about 10 in flight
    assert window.settled
    assert 10 <= window.depth <= 40
    assert max(window.history) <= 64  # no probing far past the plateau
    assert window.best_rate == pytest.approx(1000, rel=0.1)


def test_a_window_that_overshot_narrows_to_the_depth_that_holds_the_rate():
    """10 ms round trip, 1,000/s server: 34 in flight only queue (Little's law asks for about 12.5); the
    window steps back while the rate holds, and not below what the round trip requires."""
    window = simulate(latency_s=0.010, service_s=0.001)
    assert window.settled and max(window.history) > window.depth, window.history
    assert 0.0125 * 1000 <= window.depth <= 2 * 0.0125 * 1000, window.measured


def test_requests_of_many_items_on_a_busy_client_stay_narrow():
    """A window of one 16-file request on a local disk: no pace to measure from one completion, so no jump
    by the ramp factor; requests that only queue for the CPU settle at a few in flight."""
    window = simulate(latency_s=0.0, service_s=0.0013, start=1, cap=16, requests=400)
    assert window.history[:2] == [1, 2], window.history
    assert window.settled and window.depth <= 3, window.measured


def test_a_reader_that_only_slows_down_when_widened_settles_at_one_request():
    """One request measured over a timed interval, not one completion: the base latency and rate that a wider
    window must beat. Two requests in flight each 30 % slower (GIL handoffs, as fs measured): back to one."""
    window = simulate(latency_s=0.0, service_s=0.0013, start=1, cap=16, requests=1500, contention=0.3)
    assert window.measured[1][0] == 1, window.measured  # an interval at one request, after the first completion
    assert window.settled and window.depth == 1, window.measured


def test_a_noisy_rate_does_not_widen_a_window_whose_requests_queue():
    """No network latency, a busy server with +-60 % noise: rates jump around, latencies say it is saturated."""
    for seed in range(5):
        window = simulate(latency_s=0.0, service_s=0.001, jitter=0.6, requests=3000 + seed)
        assert window.settled and window.depth <= 8, window.measured


def feed(window: AutoWindow, clock: Clock, completions: int, latency_s: float, rate: float | None = None) -> None:
    """`completions` requests, each `latency_s` long, finishing `rate` per second (None: depth / latency, a
    full window whose rate rises with its depth)."""
    for _ in range(completions):
        started = window.started()
        clock.now += 1 / (rate or window.depth / latency_s)
        window.finished(min(started, clock.now - latency_s))


def test_what_completes_while_the_consumer_holds_up_the_submitter_is_not_measured():
    """The consumer stalls the submitter (a full output queue): the completions that trickle in then time the
    consumer, slow and late. Measured, they stop a window that was still widening profitably; between
    `stall` and `resume` they are dropped, and the window widens on once the reads are the limit again."""
    for told in (False, True):
        clock = Clock()
        window = AutoWindow(clock=clock, start=16, ramp_factor=1.0)
        window.begin(None)
        feed(window, clock, 2000, latency_s=0.002)  # 2 ms each, however many in flight: widening
        before = window.depth, len(window.measured)
        assert window.depth > 16 and not window.settled, window.measured
        if told:
            window.stall()
        feed(window, clock, 2000, latency_s=0.006, rate=1500)  # the consumer's pace, late completions
        if told:
            window.resume()
            assert (window.depth, len(window.measured)) == before, window.measured
            feed(window, clock, 20000, latency_s=0.002)
            assert window.depth > before[0], window.measured
        else:
            assert window.settled and window.depth <= before[0], window.measured
            assert min(rate for _, rate, _ in window.measured) < 2000, window.measured


def test_a_submitter_that_reports_its_stalls_is_not_judged_by_how_full_its_window_looks():
    """In-order reads: done ones wait behind the oldest, so only about half the window is at the server,
    yet the rate rises with the depth. The fill check reads that as a lagging submitter and settles; a window
    whose submitter reports its stalls (`reports_stalls`) skips the check and widens."""
    depths = {}
    for reports in (False, True):
        clock = Clock()
        window = make_window("auto", reports_stalls=reports)
        window.clock = clock
        window.begin(None)
        for _ in range(20000):  # half the window at the server: rate x latency = depth / 2
            started = window.started()
            clock.now += 1 / (0.5 * window.depth / 0.002)
            window.finished(min(started, clock.now - 0.002))
        depths[reports] = window.depth
    assert depths[True] >= 4 * depths[False], depths


def test_it_never_exceeds_the_cap_nor_the_keys_left():
    unbounded = simulate(latency_s=0.5, service_s=0.00001, cap=64)  # would want 50,000 in flight
    assert unbounded.depth == 64 and max(unbounded.history) == 64
    few = simulate(latency_s=0.05, service_s=0.00001, requests=40)
    assert max(few.history) <= 40


def test_it_never_settles_below_what_the_latency_requires():
    window = simulate(latency_s=0.05, service_s=0.001, growth=3.0)
    assert window.depth >= window.best_rate * window.base_latency_s


def test_a_settled_window_that_the_round_trip_needs_is_kept_after_its_recheck_and_pickles():
    """20 ms round trip, 1,000/s server: the next epoch tries half the depth (slower), then twice (no faster),
    each timed between two timings of the depth, and goes back to it for good."""
    window = simulate(latency_s=0.02, service_s=0.001)
    depth, tried = window.depth, len(window.history)
    rate = run_epoch(window, latency_s=0.02, service_s=0.001)
    assert window.settled and window.rechecked and window.depth == depth, window.measured
    assert window.history[tried:] == [-(-depth // 2), depth, 2 * depth, depth], window.history
    assert rate > 0.9 * 1000
    run_epoch(window, latency_s=0.02, service_s=0.001)
    assert window.depth == depth and len(window.history) == tried + 4  # done: no second re-check
    copy = pickle.loads(pickle.dumps(window))
    assert copy.depth == depth and copy.history == window.history and copy.rechecked


def test_a_window_that_settled_wide_in_a_cold_epoch_narrows_in_the_next_ones():
    """A cold first epoch (slow, late reads: 5 ms each) settles wide; warm, a local read takes 0.1 ms and every other
    one in flight slows each by 5 % (threads queueing for 2 cores), so narrower is faster. The re-check finds that
    by rate in the next epochs (short ones: it spans several) and keeps the narrowest depth that holds it."""
    window = AutoWindow(clock=Clock(), start=16)
    run_epoch(window, latency_s=0.005, service_s=0.00005, requests=10000)
    assert window.settled and window.depth >= 64, window.measured
    wide = window.depth
    rate_wide = run_epoch(AutoWindow(clock=Clock(), start=wide, cap=wide), latency_s=0.0, service_s=0.0001,
                          requests=2000, contention=0.05)  # what that depth reads, warm
    rates = [run_epoch(window, latency_s=0.0, service_s=0.0001, requests=2000, contention=0.05) for _ in range(8)]
    assert window.rechecked and window.depth <= wide // 4, (window.history, window.measured)
    assert rates[-1] > 1.5 * rate_wide, (rates, rate_wide)


def test_a_window_that_a_short_first_run_left_narrow_widens_in_the_next():
    """30 requests at 50 ms cannot open the window the round trip needs (Little's law: 1,000/s x 50 ms = 50); the
    next, long run re-checks it: half is slower, so it tries wider ones while they raise the rate."""
    window = AutoWindow(clock=Clock())
    run_epoch(window, latency_s=0.05, service_s=0.001, requests=30)
    narrow = window.depth
    assert narrow < 50, window.history
    run_epoch(window, latency_s=0.05, service_s=0.001, requests=5000)
    assert window.rechecked and window.depth >= 50 and window.depth > narrow, (window.history, window.measured)


def test_a_window_of_one_request_tries_two_and_keeps_one_when_that_is_slower():
    window = simulate(latency_s=0.0, service_s=0.0013, start=1, cap=16, requests=1500, contention=0.3)
    assert window.depth == 1
    run_epoch(window, latency_s=0.0, service_s=0.0013, requests=1500, contention=0.3)
    assert window.rechecked and window.depth == 1 and 2 in window.history[-2:], window.history


def test_make_window_and_sizes():
    assert isinstance(make_window("auto"), AutoWindow)
    assert make_window(8).depth == 8 and make_window(8).history == [8]
    assert pool_size("auto") == AUTO_CAP and pool_size(5) == 5
    assert fixed_depth("auto") == 32 and fixed_depth(3) == 3
    with pytest.raises(ValueError, match="depth must be >= 1"):
        FixedWindow(0)
    with pytest.raises(ValueError, match="concurrency must be"):
        make_window("many")  # type: ignore[arg-type]


def test_a_window_of_multi_item_requests_still_counts_items():
    assert make_window(32, items_per_request=16).depth == 2 and make_window(5, items_per_request=16).depth == 1
    auto = make_window("auto", items_per_request=16)
    assert isinstance(auto, AutoWindow) and auto.depth == 1 and auto.cap == AUTO_CAP // 16


def test_in_flight_follows_a_window_that_widens():
    """Real threads: 5 ms requests, so the rate rises with the window and in_flight keeps more outstanding."""
    running = peak = 0
    lock = threading.Lock()

    def request(key: int) -> int:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.005)
        with lock:
            running -= 1
        return key

    window = AutoWindow(start=2, cap=16, min_interval_s=0.0)
    with ThreadPoolExecutor(16) as pool:
        out = [k for k, _ in in_flight(range(400), lambda k: pool.submit(request, k), window)]
    assert out == list(range(400))
    assert window.history[0] == 2 and max(window.history) > 2
    assert peak > 2 and peak <= 16


def test_the_recheck_on_a_long_round_trip_is_not_fooled_by_bursts():
    """100 ms, 1,000/s server (Little's law: 100 in flight): at half the depth completions come in bursts a round
    trip apart, and an interval of 50 ms counts one burst too many, so half looks as fast (measured: it kept 59,
    reading 580/s). Intervals of whole round trips keep the depth the round trip needs."""
    window = simulate(latency_s=0.1, service_s=0.001)
    depth = window.depth
    assert depth >= 100, window.history
    rates = [run_epoch(window, latency_s=0.1, service_s=0.001) for _ in range(2)]  # whole round trips: 2 epochs
    assert window.rechecked and window.depth >= 100 and min(rates) > 850, (rates, window.history, window.measured)


def test_the_recheck_is_not_fooled_by_a_load_that_drifts():
    """The load eases by a tenth a second while the re-check runs (36 ms round trip, 1,000/s server: every depth
    from 36 reads the same). A candidate timed after its reference only looks faster by the drift: timed
    between two timings of its reference, it does not, and the window stays at the depth of the first epoch."""
    window = simulate(latency_s=0.036, service_s=0.001, requests=3000)
    depth, tried = window.depth, len(window.history)
    assert depth >= 36, window.history
    for _ in range(3):
        run_epoch(window, latency_s=0.036, service_s=0.001, requests=3000, drift=-0.1)
    assert window.rechecked and window.depth == depth, (window.history, window.measured)
    assert max(window.history[tried:]) <= 2 * depth, window.history


class Narrowing:
    """A window of `wide` that narrows to `narrow` after `after` completions, tracking what was outstanding."""

    def __init__(self, wide: int, narrow: int, after: int) -> None:
        self.depth, self.narrow, self.after = wide, narrow, after
        self.history: list[int] = []
        self.measured: list[tuple[int, float, float]] = []
        self.done = self.outstanding = 0
        self.peak_after = 0  # the most outstanding once the requests sent before the change are back
        self.changed_at: int | None = None  # completions when it narrowed
        self.lock = threading.Lock()

    def started(self) -> float:
        with self.lock:
            self.outstanding += 1
            if self.changed_at is not None and self.done >= self.changed_at + self.after:
                self.peak_after = max(self.peak_after, self.outstanding)
        return 0.0

    def finished(self, started_at: float) -> None:
        with self.lock:
            self.outstanding -= 1
            self.done += 1
            if self.done == self.after:
                self.depth, self.changed_at = self.narrow, self.done

    def begin(self, total: int | None) -> None:
        pass

    def stall(self) -> None:
        pass

    def resume(self) -> None:
        pass


def test_in_flight_follows_a_window_that_narrows():
    """Once the window narrows, in_flight sends nothing until fewer than the new depth are outstanding (it used
    to send one for each one handed over, so a window never shrank within a run)."""
    window = Narrowing(wide=16, narrow=2, after=40)
    with ThreadPoolExecutor(16) as pool:
        out = [k for k, _ in in_flight(range(300), lambda k: pool.submit(time.sleep, 0.002), window)]  # type: ignore[arg-type]
    assert out == list(range(300))
    assert 1 <= window.peak_after <= 2, window.peak_after


@pytest.mark.parametrize("ordered", [True, False])
def test_the_native_cassandra_submitters_follow_a_window_that_narrows(ordered):
    window = Narrowing(wide=16, narrow=2, after=40)
    got: list[str] = []

    async def read(key: str) -> str:
        await asyncio.sleep(0.002)
        return key

    async def emit(item: str) -> None:
        got.append(item)

    keys = [str(i) for i in range(300)]
    asyncio.run((_in_order if ordered else _as_completed)(keys, read, emit, window))  # type: ignore[arg-type]
    assert (got if ordered else sorted(got, key=int)) == keys
    assert 1 <= window.peak_after <= 2, window.peak_after


def test_a_limit_learned_mid_run_bounds_the_window_from_then_on():
    """A reader that learns its requests' size from the first answers lowers the cap: the depth comes down at
    once, a long round trip no longer widens it past the limit, and a limit never raises the cap."""
    window = AutoWindow(clock=Clock(), start=32, cap=256)
    window.limit(13)
    assert window.depth == window.cap == 13 and window.history == [32, 13]
    run_epoch(window, latency_s=0.05, service_s=0.0002)  # would open wide: Little's law asks ~250
    assert max(window.history[1:]) == 13
    window.limit(400)
    assert window.cap == 13
    window.limit(0)
    assert window.cap == window.depth == 1


def test_a_narrower_depth_that_reads_a_little_slower_is_not_kept():
    """Each halving of the window reads 3 % slower: within `min_gain`, but slower. The re-check keeps the depth:
    a tie goes to the wider one, and small losses kept step after step would add up (to 0.83 at 1 in flight)."""
    clock = Clock()
    window = AutoWindow(clock=clock, start=64, cap=64, min_interval_s=0.0)

    def rate(depth: int) -> float:
        return 1000 * 0.97 ** math.log2(64 / depth)

    for _ in range(2):  # the first run settles at its cap; the second re-checks
        window.begin(None)
        while not window.settled:
            feed(window, clock, 1, latency_s=window.depth / rate(window.depth), rate=rate(window.depth))
    assert window.rechecked and window.depth == 64 and 32 in window.history, (window.history, window.measured)
