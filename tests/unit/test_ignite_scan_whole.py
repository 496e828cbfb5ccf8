"""`scan_whole`: a full scan of an Ignite cache checked against the cache's size, scanned again while short
(a scan query can miss partitions moving between nodes), a clear error when it stays short."""

from __future__ import annotations

import pytest

from workbench.clients.ignite import scan_whole
from workbench.errors import WorkbenchError


class _Cluster:
    """A client whose cache holds `size` entries; the scans see the counts given, in turn."""

    def __init__(self, size: int, seen: list[int]) -> None:
        self.size, self.seen, self.scans, self.pauses = size, list(seen), 0, []

    def get_cache(self, name: str):
        assert name == "DATA_IDS"
        return self

    def get_size(self) -> int:
        return self.size

    def scan(self) -> int:
        self.scans += 1
        return self.seen.pop(0)


def _scan(cluster: _Cluster, attempts: int = 5) -> None:
    scan_whole(cluster, "DATA_IDS", "127.0.0.1:10800", cluster.scan, attempts=attempts, pause_s=0.5,
               sleep=cluster.pauses.append)


def test_a_complete_scan_is_taken_at_once():
    cluster = _Cluster(300, [300])
    _scan(cluster)
    assert (cluster.scans, cluster.pauses) == (1, [])


def test_a_short_scan_is_run_again_after_a_pause():
    cluster = _Cluster(300, [151, 151, 300])
    _scan(cluster)
    assert (cluster.scans, cluster.pauses) == (3, [0.5, 0.5])


def test_entries_written_during_the_scan_are_not_a_shortfall():
    cluster = _Cluster(300, [301])
    _scan(cluster)
    assert cluster.scans == 1


def test_a_scan_that_stays_short_is_one_error_naming_the_cache_the_counts_and_what_to_do():
    cluster = _Cluster(300, [151, 152, 150])
    with pytest.raises(WorkbenchError) as error:
        _scan(cluster, attempts=3)
    message = str(error.value)
    assert "\n" not in message and cluster.scans == 3
    assert message.startswith("Ignite cache DATA_IDS at 127.0.0.1:10800 holds 300 entries but the last of 3 scans "
                              "of it saw 150")
    assert "rebalanced" in message
