import random
import threading
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from workbench.concurrency import in_flight
from workbench.loaders.order import effective_shard, epoch_order, shuffle_buffer, take_shard

ITEMS = list(range(103))


def test_epoch_order_is_a_seeded_permutation_that_changes_per_epoch():
    e0, e1 = epoch_order(ITEMS, seed=1, epoch=0), epoch_order(ITEMS, seed=1, epoch=1)
    assert sorted(e0) == ITEMS and sorted(e1) == ITEMS
    assert e0 != e1 != ITEMS
    assert epoch_order(ITEMS, seed=1, epoch=0) == e0
    assert epoch_order(ITEMS, seed=2, epoch=0) != e0
    assert epoch_order(ITEMS, seed=1, epoch=0, shuffle=False) == ITEMS


@pytest.mark.parametrize("ranks,workers", [(1, 1), (2, 1), (1, 4), (2, 4), (3, 2)])
def test_ranks_and_workers_cover_everything_exactly_once(ranks, workers):
    order = epoch_order(ITEMS, seed=7, epoch=3)
    seen = Counter()
    for rank in range(ranks):
        for worker in range(workers):
            seen.update(take_shard(order, *effective_shard(rank, ranks, worker, workers)))
    assert seen == Counter(ITEMS)
    shards = [effective_shard(r, ranks, w, workers) for r in range(ranks) for w in range(workers)]
    sizes = [len(take_shard(order, *shard)) for shard in shards]
    assert max(sizes) - min(sizes) <= 1


def test_bad_shard_ids_are_rejected():
    with pytest.raises(ValueError, match=r"shard_id 2 outside 0\.\.1"):
        effective_shard(2, 2)
    with pytest.raises(ValueError, match="worker_id"):
        effective_shard(0, 1, 3, 2)


def test_shuffle_buffer_keeps_every_item_and_mixes():
    out = list(shuffle_buffer(range(1000), 100, random.Random(0)))
    assert sorted(out) == list(range(1000)) and out != list(range(1000))
    assert list(shuffle_buffer(range(10), 1, random.Random(0))) == list(range(10))


def test_in_flight_ordered_keeps_order_and_overlaps_requests():
    barrier = threading.Barrier(16, timeout=10)  # passes only once 16 requests are in flight together

    def request(k: int) -> int:
        if k < 16:
            barrier.wait()
        time.sleep(0.001 * (32 - k) / 4)  # later requests finish first: order must still be kept
        return k * 10

    with ThreadPoolExecutor(16) as pool:
        out = list(in_flight(range(32), lambda k: pool.submit(request, k), depth=16))
    assert out == [(k, k * 10) for k in range(32)]


def test_in_flight_never_exceeds_depth():
    lock, current, peak = threading.Lock(), [0], [0]

    def work(k):
        with lock:
            current[0] += 1
            peak[0] = max(peak[0], current[0])
        time.sleep(0.01)
        with lock:
            current[0] -= 1
        return k

    with ThreadPoolExecutor(32) as pool:
        assert [k for k, _ in in_flight(range(50), lambda k: pool.submit(work, k), depth=5)] == list(range(50))
    assert peak[0] <= 5


def test_in_flight_unordered_yields_fast_results_first():
    others_done, finished = threading.Event(), []

    def count(_: Future) -> None:
        finished.append(1)
        if len(finished) == 3:
            others_done.set()

    def submit(k: int) -> Future:  # request 0 finishes only after the three others have
        future = pool.submit(lambda: (others_done.wait(10), k)[1] if k == 0 else k)
        if k:
            future.add_done_callback(count)
        return future

    with ThreadPoolExecutor(4) as pool:
        out = [k for k, _ in in_flight([0, 1, 2, 3], submit, depth=4, ordered=False)]
    assert sorted(out) == [0, 1, 2, 3] and out[-1] == 0


def test_in_flight_raises_the_failure_and_names_slow_keys():
    def submit(k):
        f: Future = Future()
        if k == 3:
            f.set_exception(KeyError("missing object 3"))
        else:
            f.set_result(k)
        return f

    with pytest.raises(KeyError, match="missing object 3"):
        list(in_flight(range(10), submit, depth=4))
    with pytest.raises(TimeoutError, match="request for 0"):
        list(in_flight([0], lambda k: Future(), depth=1, timeout_s=0.05))
    with pytest.raises(ValueError, match="depth"):
        list(in_flight([0], submit, depth=0))
