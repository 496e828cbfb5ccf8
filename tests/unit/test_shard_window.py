"""s3-shards' window of whole-shard GETs: a number as given, "auto" within a byte budget of shards in flight."""

from __future__ import annotations

import pytest

from workbench.concurrency import AUTO_START, AutoWindow, FixedWindow
from workbench.data import ShardInfo
from workbench.loaders.s3_shards import MAX_PARALLEL_SHARDS, READ_BUDGET, S3ShardsConfig, shard_window

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


def test_auto_starts_at_the_old_default_and_widens_within_the_budget_of_the_largest_shard():
    window = shard_window("auto", shards(5 * MB, 11 * MB, 8 * MB), readers=1)
    assert isinstance(window, AutoWindow)
    assert (window.depth, window.cap) == (AUTO_START, READ_BUDGET // (11 * MB))
    assert window.cap * 11 * MB <= READ_BUDGET


def test_dataloader_workers_share_the_budget_and_big_shards_keep_the_old_four():
    assert shard_window("auto", shards(2 * MB), readers=2).cap == READ_BUDGET // 2 // (2 * MB)
    assert shard_window("auto", shards(11 * MB), readers=4).cap == AUTO_START  # budget/4 holds 2: never below 4
    assert shard_window("auto", shards(2**30), readers=1).cap == AUTO_START  # 1 GB shards: 4 in flight, as before


def test_tiny_shards_stop_at_the_threads_and_connections_provided():
    assert shard_window("auto", shards(1000), readers=1).cap == MAX_PARALLEL_SHARDS


def test_auto_skips_the_ramp():
    """Whole-shard GETs share the bandwidth and finish together: the ramp would read that as headroom (it opened
    4 -> 15 at 0 ms here); only timed intervals, whose latency rises when GETs queue, widen it."""
    window = shard_window("auto", shards(MB), readers=1)
    window.clock = clock = Clock()
    window.begin(1000)
    started = [window.started() for _ in range(AUTO_START)]
    for i, at in enumerate(started):
        clock.now = 0.2 + i * 0.001  # a window's worth, all together after 200 ms: the ramp's "pace"
        window.finished(at)
    assert window.depth == AUTO_START and not window.ramping


def test_the_config_takes_auto_or_a_number_and_refuses_zero():
    assert S3ShardsConfig(dataset="d").parallel_shards == "auto"
    assert S3ShardsConfig(dataset="d", parallel_shards="8").parallel_shards == 8
    with pytest.raises(ValueError, match="parallel_shards"):
        S3ShardsConfig(dataset="d", parallel_shards=0)
