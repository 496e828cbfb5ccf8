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
    assert make_window(AUTO).min_fill == 0.75
    assert make_window(AUTO, reports_stalls=True).min_fill == 0.0


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
