"""s3-shards' window of whole-shard GETs: a number as given, "auto" within a byte budget of shards in flight."""

from __future__ import annotations

import pytest

from workbench.concurrency import AUTO_START, READ_BUDGET, AutoWindow, FixedWindow
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


def test_the_config_takes_auto_or_a_number_and_refuses_zero():
    assert S3ShardsConfig(dataset="d").parallel_shards == "auto"
    assert S3ShardsConfig(dataset="d", parallel_shards="8").parallel_shards == 8
    with pytest.raises(ValueError, match="parallel_shards"):
        S3ShardsConfig(dataset="d", parallel_shards=0)
