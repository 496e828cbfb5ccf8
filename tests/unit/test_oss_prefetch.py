"""The OSS connector's prefetch workers (`workbench.compat.oss_prefetch`): N workers share the fetches in flight,
results come back in key order, each key fetched once, a failure at its own position."""

from __future__ import annotations

import pickle
import re
import threading
import time
from collections import Counter, defaultdict

import pytest

from workbench.compat.oss_prefetch import PrefetchWorkers
from workbench.errors import WorkbenchError

WORKER = re.compile(r"-(\d+)_\d+$")  # the GET threads of worker w: <name>-<w>_<i>


class _Recorder:
    """A fetch that notes which worker's thread ran it and how many ran at once per worker."""

    def __init__(self, delay_s: float = 0.0, fail: int | None = None) -> None:
        self.delay_s, self.fail = delay_s, fail
        self.by: dict[int, int] = {}
        self.calls: Counter[int] = Counter()
        self.running: defaultdict[int, int] = defaultdict(int)
        self.peak: defaultdict[int, int] = defaultdict(int)
        self._lock = threading.Lock()

    def __call__(self, key: int) -> str:
        match = WORKER.search(threading.current_thread().name)
        assert match is not None, threading.current_thread().name
        worker = int(match.group(1))
        with self._lock:
            self.calls[key] += 1
            self.by[key] = worker
            self.running[worker] += 1
            self.peak[worker] = max(self.peak[worker], self.running[worker])
        try:
            time.sleep(self.delay_s)
            if key == self.fail:
                raise ValueError(f"fetch {key} failed")
            return f"object-{key}"
        finally:
            with self._lock:
                self.running[worker] -= 1


def test_two_workers_share_the_keys_round_robin_in_order_exactly_once():
    workers = PrefetchWorkers(2, 6, "t")
    fetch = _Recorder(delay_s=0.01)
    keys = list(range(40))
    assert list(workers.map(keys, fetch)) == [f"object-{k}" for k in keys]
    assert fetch.calls == Counter(keys)  # each key once
    assert fetch.by == {k: k % 2 for k in keys}  # worker w took positions w, w + 2, ...
    assert workers.depths == [3, 3]
    assert max(fetch.peak.values()) > 1 and all(peak <= 3 for peak in fetch.peak.values())
    workers.close()


def test_one_worker_fetches_everything_with_the_whole_concurrency():
    workers = PrefetchWorkers(1, 4, "t")
    fetch = _Recorder(delay_s=0.01)
    assert list(workers.map(list(range(12)), fetch)) == [f"object-{k}" for k in range(12)]
    assert set(fetch.by.values()) == {0} and workers.depths == [4] and fetch.peak[0] > 1
    workers.close()


def test_workers_are_capped_at_the_concurrency_and_split_it():
    assert PrefetchWorkers(8, 3, "t").depths == [1, 1, 1]
    assert PrefetchWorkers(4, 10, "t").depths == [3, 3, 2, 2]
    with pytest.raises(WorkbenchError, match="must be >= 1"):
        PrefetchWorkers(0, 3, "t")


def test_fewer_keys_than_workers_and_no_keys():
    workers = PrefetchWorkers(4, 8, "t")
    fetch = _Recorder()
    assert list(workers.map([7], fetch)) == ["object-7"]
    assert list(workers.map([], fetch)) == []
    workers.close()


def test_failure_is_raised_at_its_position():
    workers = PrefetchWorkers(3, 6, "t")
    got = []
    with pytest.raises(ValueError, match="fetch 7 failed"):
        for value in workers.map(list(range(20)), _Recorder(fail=7)):
            got.append(value)
    assert got == [f"object-{k}" for k in range(7)]
    workers.close()


def test_closing_early_stops_the_workers():
    workers = PrefetchWorkers(2, 2, "t")
    fetch = _Recorder(delay_s=0.005)
    stream = workers.map(list(range(1000)), fetch)
    assert next(stream) == "object-0"
    stream.close()
    time.sleep(0.3)
    started = sum(fetch.calls.values())
    time.sleep(0.2)
    assert sum(fetch.calls.values()) == started < 50  # nothing more is fetched
    assert not [t for t in threading.enumerate() if t.name.startswith("t-worker-")]
    workers.close()


def test_pickles_without_threads():
    workers = PrefetchWorkers(2, 4, "t")
    list(workers.map([1, 2, 3], _Recorder()))
    copy = pickle.loads(pickle.dumps(workers))
    assert (copy.workers, copy.depths) == (2, [2, 2])
    assert list(copy.map([5, 6], _Recorder())) == ["object-5", "object-6"]
    workers.close()
    copy.close()
