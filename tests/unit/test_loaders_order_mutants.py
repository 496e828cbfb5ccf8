"""Reader order (workbench.loaders.order): the edges that mutation testing found unasserted (tests/mutation).

Each test names a behaviour a reader relies on: the flat shard space's defaults and bounds, the shuffle buffer's
size rule and how far it reads ahead, and a resumed reader refusing fetched shards that do not match its plan.
"""

from __future__ import annotations

import random

import pytest

from workbench.loaders.order import effective_shard, resume_shards, shuffle_buffer


def test_a_reader_without_dataloader_workers_is_its_rank():
    assert effective_shard(1, 2) == (1, 2)
    assert effective_shard(0, 3) == (0, 3)


def test_the_last_worker_is_in_range_and_one_past_it_is_named():
    assert effective_shard(0, 1, 1, 2) == (1, 2)
    with pytest.raises(ValueError, match=r"^worker_id 2 outside 0\.\.1$"):
        effective_shard(0, 1, 2, 2)


def test_a_buffer_of_one_item_passes_the_stream_through_without_drawing():
    rng = random.Random(5)
    before = rng.getstate()
    assert list(shuffle_buffer(range(10), 1, rng)) == list(range(10))
    assert rng.getstate() == before  # the reader's rng is left for what comes next (0 or 1: no shuffle)


def test_a_buffer_of_two_items_shuffles():
    outs = {tuple(shuffle_buffer(range(20), 2, random.Random(seed))) for seed in range(5)}
    assert tuple(range(20)) not in outs


def test_the_buffer_reads_one_item_past_its_size_before_the_first_output():
    pulled = []

    def stream():
        for i in range(50):
            pulled.append(i)
            yield i

    out = shuffle_buffer(stream(), 4, random.Random(0))
    next(out)
    assert len(pulled) == 5  # 4 held, the 5th swapped in for the first output


def test_a_resumed_reader_refuses_fewer_fetched_shards_than_its_plan():
    resume = resume_shards([3, 3], 1, random.Random(0), 2)
    assert resume.plan == [(0, [2]), (1, [0, 1, 2])]
    assert list(resume.items([["c"], ["d", "e", "f"]])) == ["c", "d", "e", "f"]
    with pytest.raises(ValueError):
        list(resume.items([["c"]]))
