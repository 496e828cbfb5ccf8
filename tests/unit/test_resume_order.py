"""The arithmetic of resuming mid-epoch: a shard reader's shuffle buffer replayed on positions alone."""

from __future__ import annotations

import random

import pytest

from workbench.loaders.order import buffered_order, in_target_order, resume_shards, shuffle_buffer


def shard_items(sizes: list[int]) -> list[tuple[int, int]]:
    return [(shard, member) for shard, n in enumerate(sizes) for member in range(n)]


def resumed(sizes: list[int], buffer: int, seed: str, start: int) -> tuple[list, list[tuple[int, list[int]]]]:
    """What a resumed reader delivers (fetching exactly the planned members) and its plan."""
    plan = resume_shards(sizes, buffer, random.Random(seed), start)
    fetched = [[(shard, m) for m in members] for shard, members in plan.plan]
    return list(plan.items(fetched)), plan.plan


def test_buffered_order_replays_the_shuffle_buffer():
    items = [f"item-{i}" for i in range(500)]
    out = list(shuffle_buffer(iter(items), 64, random.Random("s:0:1")))
    assert [items[p] for p in buffered_order(500, 64, random.Random("s:0:1"))] == out


@pytest.mark.parametrize("trial", range(200))
def test_resuming_at_any_position_delivers_exactly_the_rest(trial):
    r = random.Random(trial)
    sizes = [r.randint(0, 15) for _ in range(r.randint(1, 9))]
    buffer = r.choice([0, 1, 2, 7, 40, 1000])
    start = r.randint(0, sum(sizes))
    full = list(shuffle_buffer(iter(shard_items(sizes)), buffer, random.Random(f"seed{trial}")))
    rest, _ = resumed(sizes, buffer, f"seed{trial}", start)
    assert rest == full[start:]


def test_without_shuffle_whole_shards_are_skipped_and_the_partial_one_starts_mid_shard():
    rest, plan = resumed([10, 10, 10, 10], 0, "x", 23)
    assert plan == [(2, [3, 4, 5, 6, 7, 8, 9]), (3, list(range(10)))]
    assert rest[0] == (2, 3) and len(rest) == 17


def test_with_a_buffer_only_shards_holding_items_still_to_come_are_read():
    sizes = [20] * 50
    full = list(shuffle_buffer(iter(shard_items(sizes)), 30, random.Random("b")))
    start = 700
    rest, plan = resumed(sizes, 30, "b", start)
    assert rest == full[start:]
    planned = {shard for shard, _ in plan}
    assert planned == {shard for shard, _ in full[start:]}
    assert min(planned) > 0 and len(planned) < 50  # emptied shards are not read again
    members = sum(len(m) for _, m in plan)
    assert members == len(full) - start  # nothing delivered is fetched again


def test_resuming_at_the_end_or_the_start():
    sizes = [4, 0, 6]
    full = list(shuffle_buffer(iter(shard_items(sizes)), 3, random.Random("e")))
    assert resumed(sizes, 3, "e", 10) == ([], [])
    assert resumed(sizes, 3, "e", 0)[0] == full
    with pytest.raises(ValueError, match="position 11 outside this reader's 10 items"):
        resume_shards(sizes, 3, random.Random("e"), 11)


def test_in_target_order_holds_items_only_until_due():
    pulled: list[int] = []

    def stream():
        for p in range(10):
            pulled.append(p)
            yield p, f"v{p}"

    out = in_target_order(stream(), [1, 0, 2, 5])
    assert next(out) == "v1" and pulled == [0, 1]
    assert list(out) == ["v0", "v2", "v5"] and pulled == [0, 1, 2, 3, 4, 5]
    with pytest.raises(ValueError, match="position 3 is not in the stream"):
        list(in_target_order(iter([(1, "a")]), [3]))


def test_a_shard_that_returns_fewer_members_than_planned_is_an_error():
    plan = resume_shards([3, 3], 0, random.Random(0), 1)
    with pytest.raises(ValueError, match="shard 0: 1 items fetched for 2 members"):
        list(plan.items([["a"], ["b", "c", "d"]]))
