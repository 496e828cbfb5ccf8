"""The windows of workbench.concurrency: behaviours that mutation testing found unasserted (tests/mutation).

What a command line's concurrency may be, the budget's depth, the window each config asks for, a fixed window's
whole protocol, a limit learned during a re-check, and what the re-check records (simulated time, no sleeping).
"""

from __future__ import annotations

import math

import pytest

from workbench.concurrency import (
    AUTO,
    AUTO_CAP,
    AUTO_START,
    READ_BUDGET,
    AutoWindow,
    FixedWindow,
    Phase,
    budget_depth,
    make_window,
    parse_concurrency,
)
from workbench.errors import WorkbenchError

STEPS = 100_000  # completions at most: a window that never settles fails instead of looping


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def feed(window: AutoWindow, clock: Clock, completions: int, latency_s: float, rate: float) -> None:
    """`completions` requests, each exactly `latency_s` long, finishing `rate` per second."""
    for _ in range(completions):
        window.started()
        clock.now += 1 / rate
        window.finished(clock.now - latency_s)


@pytest.mark.parametrize("text,value", [("auto", AUTO), (" AUTO ", AUTO), ("8", 8), (8, 8), ("1", 1), (" 1024 ", 1024)])
def test_a_command_lines_concurrency_is_auto_or_1_to_1024(text, value):
    assert parse_concurrency(text) == value


@pytest.mark.parametrize("text", ["0", "1025", 0, 2000, "-3", "many", "", "4.5"])
def test_any_other_concurrency_is_one_line_naming_it(text):
    with pytest.raises(WorkbenchError) as info:
        parse_concurrency(text)
    assert str(info.value) == f"concurrency {text!r}: give a number of requests in flight (1 to 1024) or 'auto'"


def test_the_read_budget_sets_the_depth_of_big_requests():
    assert budget_depth(2**20) == READ_BUDGET // 2**20 == 96  # one reader by default
    assert budget_depth(2**20, readers=4) == 24
    assert budget_depth(1) == READ_BUDGET and budget_depth(0) == READ_BUDGET  # a request of no bytes counts as 1
    assert budget_depth(2**20, readers=0) == 96
    assert budget_depth(64 * 2**20) == AUTO_START  # never below the fixed default's depth


def test_auto_checks_how_full_the_window_is_unless_the_submitter_reports_its_stalls():
    assert make_window(AUTO).params.min_fill == 0.75
    assert make_window(AUTO, reports_stalls=True).params.min_fill == 0.0


def test_auto_windows_of_big_requests_have_whole_depths_of_at_least_one():
    for items in (3, 5, 1024, 4096):
        window = make_window(AUTO, items_per_request=items)
        assert type(window.cap) is int and type(window.depth) is int, items
        assert window.cap == max(1, AUTO_CAP // items) and window.depth == max(1, min(window.cap, AUTO_START // items))
    assert make_window(AUTO, items_per_request=3).cap == 170


def test_a_fixed_window_of_multi_item_requests_rounds_up_and_a_bad_one_is_named():
    assert make_window(1, items_per_request=16).depth == 1 and make_window(17, items_per_request=16).depth == 2
    with pytest.raises(ValueError, match=r"got -5$"):
        make_window(-5, items_per_request=16)


def test_a_fixed_window_never_changes_and_measures_nothing():
    window = FixedWindow(6)
    window.begin(100)
    started = window.started()
    window.stall()
    window.resume()
    window.finished(started)
    assert started == 0.0  # reads no clock
    assert (window.depth, window.history, window.measured, window.tuning) == (6, [6], [], False)


def _settled_at_64(clock: Clock) -> AutoWindow:
    """A window that settles at its cap of 64 in its first run: the next run re-checks it."""
    window = AutoWindow(clock=clock, start=64, cap=64, min_interval_s=0.0)
    window.begin(None)
    for _ in range(STEPS):
        if window.settled:
            return window
        feed(window, clock, 1, latency_s=window.depth / 1000, rate=1000)
    raise AssertionError(f"not settled after {STEPS} completions: {window.history}")


def test_the_recheck_times_each_depth_over_its_intervals_and_records_them_rounded():
    """Half the depth reads 3 % slower: the re-check times 64, 32, 64 (two intervals each) and keeps 64. Each
    interval is recorded as (depth, completions/s to 0.1, mean latency in ms to 0.01)."""
    clock = Clock()
    window = _settled_at_64(clock)
    first = len(window.measured)
    window.begin(None)
    for _ in range(STEPS):
        if window.rechecked:
            break
        feed(window, clock, 1, latency_s=0.00123456, rate=1000 * (0.97 if window.depth == 32 else 1.0))
    assert window.rechecked, window.history
    rechecked = window.measured[first:]
    assert [d for d, _, _ in rechecked] == [64, 64, 32, 32, 64, 64], rechecked
    assert all(latency == 1.23 for _, _, latency in rechecked), rechecked
    for depth, rate, _ in rechecked:
        assert type(rate) is float and rate == round(rate, 1)
        assert rate == pytest.approx(1000 * (0.97 if depth == 32 else 1.0), rel=0.05)
    assert any(rate != round(rate) for _, rate, _ in rechecked)  # the tenths are kept
    assert window.depth == 64
    assert window.settled and not window.rechecking


def test_a_limit_learned_during_the_recheck_bounds_it():
    clock = Clock()
    window = _settled_at_64(clock)
    window.begin(None)
    feed(window, clock, 200, latency_s=0.001, rate=1000)  # the re-check under way
    assert window.rechecking
    window.limit(16)
    assert (window.start, window.best_depth, window.depth) == (16, 16, 16)
    for _ in range(STEPS):
        if window.rechecked:
            break
        feed(window, clock, 1, latency_s=0.001, rate=1000 * math.log2(window.depth))
    assert window.rechecked, window.history
    assert max(window.history[window.history.index(16):]) == 16 and window.depth <= 16, window.history


def test_what_completes_after_a_stall_is_measured_afresh():
    clock = Clock()
    window = AutoWindow(clock=clock, start=16, ramp_factor=1.0)
    window.begin(None)
    feed(window, clock, 300, latency_s=0.002, rate=8000)
    window.stall()
    feed(window, clock, 5, latency_s=0.002, rate=8000)
    window.resume()
    before = len(window.measured)
    feed(window, clock, 3000, latency_s=0.002, rate=8000)
    after = window.measured[before:]
    assert after and all(latency == 2.0 for _, _, latency in after), after


def test_a_first_runs_intervals_are_recorded_rounded_too():
    clock = Clock()
    window = AutoWindow(clock=clock, start=64, cap=64, min_interval_s=0.0)
    window.begin(None)
    for _ in range(STEPS):
        if window.settled:
            break
        feed(window, clock, 1, latency_s=0.0641234, rate=1000)
    assert window.settled and len(window.measured) >= 2, window.measured
    assert all(latency == 64.12 for _, _, latency in window.measured), window.measured
    assert all(type(rate) is float and rate == round(rate, 1) and rate > 900 for _, rate, _ in window.measured)
    assert any(rate != round(rate) for _, rate, _ in window.measured), window.measured


# ------------------------------------------------------------------- one decision at a time, on explicit numbers


def _window(depth: int = 8, **state) -> AutoWindow:
    """A window at `depth` past its ramp, with the given state (base latency, best rate...)."""
    window = AutoWindow(clock=Clock(), start=depth, cap=64)
    window.phase = Phase.GROW
    for name, value in state.items():
        setattr(window, name, value)
    return window


@pytest.mark.parametrize("depth,peak,pace,latency,remaining,base,wider", [
    (8, 8, 4000, 0.01, None, math.inf, 40),  # headroom 5: x5 (Little's law), under ramp_factor 8
    (8, 8, 4000, 0.01, 20, math.inf, 20),  # never past the keys left
    (8, 6, 24, 0.5, None, math.inf, 12),  # full at exactly min_fill x depth, headroom exactly latency_bound
    (8, 8, 4000, 0.75, None, 0.5, 64),  # latency exactly latency_bound x base
])
def test_the_ramp_widens_by_its_headroom_while_full_and_not_queueing(depth, peak, pace, latency, remaining, base,
                                                                      wider):
    window = _window(depth, phase=Phase.RAMP, _peak_outstanding=peak, base_latency_s=base)
    window._ramp(pace, latency, remaining)
    assert (window.depth, window.ramping, window.history) == (wider, True, [depth, wider])


@pytest.mark.parametrize("depth,peak,pace,latency,base,cap", [
    (8, 5, 4000, 0.01, math.inf, 64),  # not full: the submitter limits the rate
    (8, 8, 20, 0.5, math.inf, 64),  # headroom 1.25: nothing to gain
    (8, 8, 4000, 0.8, 0.5, 64),  # latency 1.6 x the base: queueing
    (8, 8, 4000, 0.01, math.inf, 8),  # at the cap
    (1, 1, 4000, 0.01, math.inf, 64),  # a window of one request: the timed intervals take over
])
def test_the_ramp_ends_where_it_cannot_widen(depth, peak, pace, latency, base, cap):
    window = _window(depth, phase=Phase.RAMP, _peak_outstanding=peak, base_latency_s=base, cap=cap)
    window._ramp(pace, latency, None)
    assert window.ramping is False and window.depth == depth and window.history == [depth]
    assert window.base_latency_s == min(base, latency) and window.measured == [(depth, round(pace, 1), latency * 1000)]


@pytest.mark.parametrize("rate,latency,base,best,remaining,depth", [
    (1000, 0.008, math.inf, 0.0, None, 16),  # full, not queueing: x growth
    (1000, 0.008, math.inf, 0.0, 12, 12),  # never past the keys left
    (12, 0.5, math.inf, 0.0, None, 16),  # full at exactly min_fill x depth
    (8, 0.75, 0.5, 0.0, None, 16),  # queueing exactly latency_bound
    (10, 1.0, 0.5, 9.0, None, 16),  # queueing 2, but the rate gained over 5 %
    (8, 1.0, 0.5, 1.0, None, 16),  # ... over a best rate below 1/s too
    (10, 1.5, 0.5, 9.0, None, 16),  # queueing exactly max_queueing, with a gain
])
def test_an_interval_that_fills_the_window_widens_it(rate, latency, base, best, remaining, depth):
    window = _window(8, base_latency_s=base, best_rate=best, _strikes=1)
    window._decide(rate, latency, remaining)
    assert (window.depth, window._strikes, window.settled, window.narrowing) == (depth, 0, False, False)


@pytest.mark.parametrize("rate,latency,base,best", [
    (500, 0.008, math.inf, 0.0),  # not full: 4 of 8 in flight
    (8, 1.0, 0.5, 0.0),  # queueing 2, no best rate to gain over
    (10, 1.0, 0.5, 100.0),  # queueing 2, no gain
    (10.5, 1.0, 0.5, 10.0),  # queueing 2, a gain of exactly min_gain is none
    (10.0, 1.0, 0.5, 10.0),
    (10, 1.6, 0.5, 9.0),  # a gain, but queueing over max_queueing
    (10, 0.0, 0.0, 0.0),  # no latency at all: nothing in flight
])
def test_an_interval_that_does_not_fill_or_queues_is_a_strike(rate, latency, base, best):
    window = _window(8, base_latency_s=base, best_rate=best)
    window._decide(rate, latency, None)
    assert (window.depth, window._strikes, window.settled, window.narrowing) == (8, 1, False, False)


def test_a_rate_equal_to_the_best_keeps_the_best_depth():
    window = _window(8, base_latency_s=0.5, best_rate=10.0, best_depth=4)
    window._decide(10.0, 1.0, None)
    assert (window.best_rate, window.best_depth) == (10.0, 4)
    window._decide(10.04, 1.0, None)
    assert (window.best_rate, window.best_depth) == (10.04, 8)
    assert window.measured[-1] == (8, 10.0, 1000.0)  # rates recorded to 0.1


def test_after_patience_strikes_a_window_that_does_not_queue_settles():
    window = _window(8, base_latency_s=0.5, best_rate=1.0, best_depth=8)
    window._decide(1, 1.0 * 0.75, None)  # not full, queueing exactly latency_bound
    assert (window._strikes, window.settled) == (1, False)
    window._decide(1, 1.0 * 0.75, None)
    assert (window._strikes, window.settled, window.narrowing, window.depth) == (2, True, False, 8)


def test_after_patience_strikes_a_window_that_queues_narrows():
    window = _window(8, base_latency_s=0.5, best_rate=1.0, best_depth=8, _strikes=1)
    window._decide(1, 1.0, None)  # queueing 2; the round trip requires ceil(1 x 0.5) = 1
    assert (window.narrowing, window.settled, window.depth, window.history) == (True, False, 4, [8, 4])


def test_a_window_of_one_that_queues_settles_there():
    window = _window(1, base_latency_s=0.5, best_rate=1.0, best_depth=1, _strikes=1)
    window._decide(1, 1.0, None)
    assert (window.narrowing, window.settled, window.depth) == (False, True, 1)


@pytest.mark.parametrize("rate,queueing,depth,settled,best_depth", [
    (95.0, 1.0, 8, True, 8),  # held the best rate within min_gain, no longer queueing: settles here
    (94.9, 1.0, 16, True, 16),  # lost it: back to the best depth
    (100.0, 2.0, 4, False, 8),  # held, still queueing: narrower
    (100.0, 1.5, 8, True, 8),  # held, queueing exactly latency_bound: settles
])
def test_a_narrowing_window_keeps_what_held_the_rate(rate, queueing, depth, settled, best_depth):
    window = _window(8, phase=Phase.NARROW, best_rate=100.0, best_depth=16, base_latency_s=0.01)
    window._narrow(rate, queueing)
    assert (window.depth, window.settled, window.best_depth) == (depth, settled, best_depth)


def test_a_narrowing_window_at_one_settles():
    window = _window(1, phase=Phase.NARROW, best_rate=100.0, best_depth=1, base_latency_s=0.001)
    window._narrow(100.0, 2.0)
    assert (window.depth, window.settled) == (1, True)


def test_a_narrowing_window_is_judged_by_narrow():
    window = _window(8, phase=Phase.NARROW, best_rate=100.0, best_depth=16, base_latency_s=0.01)
    window._decide(100.0, 0.02, None)  # queueing 2: narrower
    assert (window.depth, window.settled, window.narrowing) == (4, False, True)


def test_a_second_run_starts_its_recheck_afresh():
    window = _window(8, phase=Phase.SETTLED, _runs=1, _submitted=5, _finished=4, _peak_outstanding=3, _strikes=2,
                     _recheck_step=1, _recheck_before=3.0, _recheck_candidate=2.0, _recheck_sum=7.0, _recheck_seen=1)
    window.begin(100)
    assert (window._submitted, window._finished, window._peak_outstanding, window._strikes) == (0, 0, 0, 0)
    assert window.settled is False and window.ramping is False and window.narrowing is False
    assert window.rechecking is True and (window._recheck_from, window._recheck_depth) == (8, 8)
    assert (window._recheck_step, window._recheck_before, window._recheck_candidate) == (-1, 0.0, 0.0)
    assert (window._recheck_sum, window._recheck_seen) == (0.0, 0)


@pytest.mark.parametrize("depth,best,base,narrower", [
    (16, 100.0, 0.05, 8),  # the round trip requires 5: half the depth
    (16, 100.0, 0.1, 10),  # it requires 10: no narrower
    (3, 0.0, math.inf, 2),  # nothing measured: requires 1
    (1, 0.0, math.inf, 1),  # never below 1
])
def test_the_next_depth_down_is_half_but_what_the_round_trip_requires(depth, best, base, narrower):
    window = _window(depth, best_rate=best, base_latency_s=base)
    assert window._narrower() == narrower


@pytest.mark.parametrize("remaining,factor,wider", [(None, None, 16), (None, 3.0, 24), (12, None, 12), (3, None, 8)])
def test_the_next_depth_up_is_growth_times_at_most_the_keys_left(remaining, factor, wider):
    assert _window(8)._wider(remaining, factor) == wider


def test_started_counts_what_is_in_flight_and_returns_the_clock():
    clock = Clock()
    window = AutoWindow(clock=clock, start=2)
    window.begin(None)
    clock.now = 5.0
    assert [window.started() for _ in range(3)] == [5.0, 5.0, 5.0]
    window.finished(5.0)
    assert (window._submitted, window._finished, window._peak_outstanding) == (3, 1, 3)


@pytest.mark.parametrize("total,started,decides", [(4, 4, False), (5, 4, True), (None, 4, True)])
def test_the_tail_of_a_run_decides_nothing(total, started, decides):
    """Once every request of the run was sent, completions only drain it: their rate says nothing."""
    clock = Clock()
    window = AutoWindow(clock=clock, start=2, min_interval_s=0.0)
    window.begin(total)
    for _ in range(started):
        window.started()
    for _ in range(2):
        clock.now += 0.01
        window.finished(clock.now - 0.01)
    assert bool(window.measured) is decides, window.measured


def test_a_stalled_window_counts_nothing_until_it_resumes():
    clock = Clock()
    window = AutoWindow(clock=clock, start=2, min_interval_s=0.0)
    window.begin(None)
    window.stall()
    assert window._stalled is True
    feed(window, clock, 4, latency_s=0.001, rate=1000)
    assert window.measured == [] and window._count == 0
    window.resume()
    assert window._stalled is False
    assert window._peak_outstanding == 0  # all 4 are back
    feed(window, clock, 2, latency_s=0.001, rate=1000)
    assert len(window.measured) == 1


def _rechecking(depth: int = 8, step: int = -1, reference: int = 8, since: int = 8, before: float = 100.0,
                candidate: float = 0.0) -> AutoWindow:
    """A window re-checking from `since`, its reference timed at `before`, about to time `reference` again."""
    return _window(depth, phase=Phase.RECHECK, _recheck_depth=reference, _recheck_from=since, _recheck_step=step,
                   _recheck_before=before, _recheck_candidate=candidate)


def _time(window: AutoWindow, rate: float) -> None:
    for _ in range(window.params.recheck_intervals):
        window._recheck(rate, 0.001, None)


def test_a_narrower_candidate_as_fast_as_its_reference_is_kept_and_the_next_one_tried():
    window = _rechecking(candidate=100.0)
    _time(window, 100.0)  # the candidate at 4 read 100/s between two 100/s timings of 8: held
    assert (window.depth, window._recheck_depth, window._recheck_step, window._recheck_before) == (2, 4, -1, 100.0)


def test_the_first_narrower_candidate_slower_turns_the_recheck_wider():
    window = _rechecking(candidate=90.0)
    _time(window, 100.0)
    assert (window.depth, window._recheck_depth, window._recheck_step, window._recheck_before) == (16, 8, 1, 100.0)
    assert not window.rechecked


def test_a_later_narrower_candidate_slower_ends_the_recheck_on_its_reference():
    window = _rechecking(depth=4, reference=4, since=8, candidate=90.0)
    _time(window, 100.0)
    assert (window.depth, window.rechecked, window.settled, window.rechecking) == (4, True, True, False)


@pytest.mark.parametrize("candidate,depth,reference,rechecked", [
    (105.0, 8, 8, True),  # a gain of exactly min_gain is none: the re-check ends
    (120.0, 32, 16, False),  # 20 %: 16 is kept, 32 tried next
])
def test_a_wider_candidate_is_kept_only_when_it_gains_over_min_gain(candidate, depth, reference, rechecked):
    window = _rechecking(step=1, candidate=candidate)
    _time(window, 100.0)
    assert (window.depth, window._recheck_depth, window.rechecked) == (depth, reference, rechecked)


def test_an_auto_window_starts_unmeasured_at_its_start_with_its_defaults():
    window = AutoWindow(start=6)
    p = window.params
    assert (window.cap, p.growth, p.min_gain, p.patience, p.min_interval_s) == (AUTO_CAP, 2.0, 0.05, 2, 0.1)
    assert (p.latency_bound, p.max_queueing, p.min_fill, p.ramp_factor) == (1.5, 3.0, 0.75, 8.0)
    assert (p.recheck_interval_s, p.recheck_intervals, window.phase) == (0.05, 2, Phase.RAMP)
    assert (window.depth, window.history, window.best_depth, window.best_rate, window.measured) == (6, [6], 6, 0.0, [])
    assert window.ramping is True and window.settled is False and window.narrowing is False
    assert window.rechecking is False and window.rechecked is False and window._stalled is False
    assert (window._recheck_depth, window._recheck_from, window._recheck_step) == (6, 6, -1)
    assert (window._recheck_before, window._recheck_candidate) == (0.0, 0.0)
    assert (window._total, window._submitted, window._finished, window._peak_outstanding) == (None, 0, 0, 0)
    assert (window._t0, window._count, window._latency_sum, window._changed_at) == (None, 0, 0.0, -math.inf)
    assert window.base_latency_s == math.inf


@pytest.mark.parametrize("options,message", [
    ({"start": 0}, "need 1 <= start <= cap, got start 0, cap 512"),
    ({"start": 9, "cap": 8}, "need 1 <= start <= cap, got start 9, cap 8"),
    ({"growth": 1.0}, "growth must be > 1, got 1.0"),
])
def test_a_bad_auto_window_is_one_line_naming_its_values(options, message):
    with pytest.raises(ValueError) as error:
        AutoWindow(**options)
    assert str(error.value) == message


def test_a_window_given_is_the_window_used_and_anything_else_is_named():
    window = FixedWindow(3)
    assert make_window(window) is window
    with pytest.raises(ValueError) as error:
        make_window("many")
    assert str(error.value) == "concurrency must be a positive number or 'auto', got 'many'"


def test_a_recheck_from_one_turns_wider_at_once():
    window = _rechecking(depth=1, reference=1, since=1, before=0.0)
    _time(window, 100.0)  # the reference's first timing: no narrower candidate below 1
    assert (window.depth, window._recheck_step, window._recheck_before, window.rechecking) == (2, 1, 100.0, True)
    assert _rechecking(reference=2)._recheck_next() == 1


def test_a_limit_of_one_or_of_the_depth_itself():
    window = _window(8, _recheck_from=8)
    window.limit(8)
    assert (window.depth, window._changed_at, window._recheck_from) == (8, -math.inf, 8)
    window.limit(0)
    assert (window.cap, window.depth, window._recheck_from) == (1, 1, 1)


def test_the_peak_in_flight_is_what_was_sent_less_what_came_back():
    clock = Clock()
    window = AutoWindow(clock=clock, start=8)
    window.begin(None)
    for _ in range(3):
        window.started()
    window.finished(0.0)
    window.started()
    assert window._peak_outstanding == 3


def test_a_decision_near_the_end_of_a_run_never_widens_past_the_keys_left():
    clock = Clock()
    window = AutoWindow(clock=clock, start=8, min_interval_s=0.0)
    window.phase = Phase.GROW
    window.begin(12)
    sent = [window.started() for _ in range(9)]  # 3 keys left
    for started in sent[:8]:
        clock.now = started + 0.008
        window.finished(started)
        clock.now += 0.001
    assert len(window.measured) == 1 and window.depth == 8, (window.measured, window.history)
