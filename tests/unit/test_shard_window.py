"""s3-shards' window of whole-shard GETs: a number as given, "auto" within a byte budget of shards in flight."""

from __future__ import annotations

import pickle

import pytest

from workbench.concurrency import AUTO_START, READ_BUDGET, AutoWindow, FixedWindow, RoundTripWindow
from workbench.data import ShardInfo
from workbench.loaders.s3_shards import MAX_PARALLEL_SHARDS, S3ShardsConfig, shard_window

MB = 2**20


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def shards(*sizes: int) -> list[ShardInfo]:
    return [ShardInfo(f"shard-{i:06d}.tar", 100, size, "a", "b") for i, size in enumerate(sizes)]


def test_a_number_is_a_fixed_window_whatever_the_shards():
    window = shard_window(6, shards(READ_BUDGET), readers=1)
    assert isinstance(window, FixedWindow) and window.depth == 6


def test_auto_starts_at_what_the_budget_holds_of_the_largest_shard():
    window = shard_window("auto", shards(5 * MB, 11 * MB, 8 * MB), readers=1)
    assert isinstance(window, AutoWindow)
    assert window.depth == window.cap == READ_BUDGET // (11 * MB) > AUTO_START
    assert window.cap * 11 * MB <= READ_BUDGET


def test_dataloader_workers_share_the_budget_and_big_shards_keep_the_old_four():
    assert shard_window("auto", shards(2 * MB), readers=2).cap == READ_BUDGET // 2 // (2 * MB)
    assert shard_window("auto", shards(11 * MB), readers=4).cap == AUTO_START  # budget/4 holds 2: never below 4
    assert shard_window("auto", shards(2**30), readers=1).cap == AUTO_START  # 1 GB shards: 4 in flight, as before


def test_tiny_shards_stop_at_the_threads_and_connections_provided():
    assert shard_window("auto", shards(1000), readers=1).cap == MAX_PARALLEL_SHARDS


def test_auto_never_widens_past_its_start():
    """GETs that share the bandwidth finish together, which a ramp would read as headroom: a window that starts
    at the budget has none to take, and its first window's worth of completions ends the ramp."""
    window = shard_window("auto", shards(4 * MB), readers=1)
    window.clock = clock = Clock()
    window.begin(1000)
    started = [window.started() for _ in range(window.depth)]
    for i, at in enumerate(started):
        clock.now = 0.2 + i * 0.001  # a window's worth, all together after 200 ms: the ramp's "pace"
        window.finished(at)
    assert window.depth == window.cap == READ_BUDGET // (4 * MB) and not window.ramping


def complete(window, clock: Clock, latency_s: float, count: int) -> None:
    """`count` GETs that each take `latency_s`, started one after another."""
    for _ in range(count):
        at = window.started()
        clock.now += latency_s
        window.finished(at)


def round_trip_window(round_trip_s: float, shard_bytes: int = 11 * MB) -> tuple[RoundTripWindow, Clock]:
    window = shard_window("auto", shards(shard_bytes), readers=1, round_trip_s=round_trip_s)
    assert isinstance(window, RoundTripWindow)
    window.held.clock = clock = Clock()
    window.begin(1000)
    return window, clock


def test_a_long_round_trip_adds_the_gets_waiting_for_their_first_byte():
    """8 GETs of 11 MB in 123 ms each with no round trip; at 50 ms each takes 173: 8 x 50 / 123 = 3.25 more keep
    8 of them transferring (Little's law), and the window records the depth it used."""
    window, clock = round_trip_window(0.050)
    held = READ_BUDGET // (11 * MB)
    assert window.depth == held and window.history == [held]  # nothing measured yet: the budget alone
    complete(window, clock, 0.173, held)
    assert window.extra == 3 and window.depth == held + 3 and window.history == [held, held + 3]


def test_a_short_round_trip_keeps_the_budgets_window():
    window, clock = round_trip_window(0.002)  # a HEAD on the same machine, GETs of 120 ms
    complete(window, clock, 0.120, 20)
    assert window.extra == 0 and window.depth == window.held.depth and window.history == [window.held.depth]


def test_the_round_trip_adds_at_most_the_budgets_window_again():
    """GETs that are all round trip (latency no longer than it) would ask for any number more: at most as many
    again, so a long round trip costs at most twice the budget."""
    window, clock = round_trip_window(0.200)
    complete(window, clock, 0.150, 20)
    assert window.extra == window.most == window.held.depth and window.depth == 2 * window.held.depth


def test_tiny_shards_get_no_more_than_the_threads_provided():
    window, clock = round_trip_window(0.050, shard_bytes=1000)
    complete(window, clock, 0.051, 100)
    assert window.held.depth == MAX_PARALLEL_SHARDS and window.most == 0 and window.depth == MAX_PARALLEL_SHARDS


def test_the_extra_follows_a_narrowed_budget_window_and_survives_pickling():
    window, clock = round_trip_window(0.050)
    window.held.limit(4)  # the budget's window narrowed: fewer GETs transferring, fewer waiting for them
    complete(window, clock, 0.173, 8)
    assert window.depth == 4 + round(4 * 0.050 / 0.123)
    copy = pickle.loads(pickle.dumps(window))
    assert copy.depth == window.depth and copy.history == window.history


def test_no_round_trip_measured_is_the_budgets_window_alone():
    window = shard_window("auto", shards(11 * MB), readers=1, round_trip_s=0.0)
    assert type(window) is AutoWindow and window.depth == window.cap == READ_BUDGET // (11 * MB)  # no extra on top


def test_the_config_takes_auto_or_a_number_and_refuses_zero():
    assert S3ShardsConfig(dataset="d").parallel_shards == "auto"
    assert S3ShardsConfig(dataset="d", parallel_shards="8").parallel_shards == 8
    with pytest.raises(ValueError, match="parallel_shards"):
        S3ShardsConfig(dataset="d", parallel_shards=0)
