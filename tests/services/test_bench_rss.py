"""`bench rss` reads whole epochs of each dataset size in fresh processes and compares their peaks."""

from __future__ import annotations

import json

import pytest

from workbench.bench.rss import add_rss_ratios, bench_rss
from workbench.errors import WorkbenchError

pytestmark = pytest.mark.services


def test_every_loader_reads_each_whole_dataset_in_its_own_process(stack, tmp_path):
    rows = bench_rss(stack, ["fs", "s3-shards"], [90, 30], mean_kb=4, concurrency=4, repeats=1,
                     results_dir=tmp_path)
    assert [(r["loader"], r["count"]) for r in rows] == [("fs", 30), ("fs", 90), ("s3-shards", 30), ("s3-shards", 90)]
    assert all(r["samples"] == r["count"] and r["bytes"] > r["count"] * 1000 for r in rows)
    assert all(r["peak_rss_mb"] >= r["start_rss_mb"] > 20 for r in rows)  # a real interpreter's own figures
    assert [r["rss_ratio"] for r in rows if r["count"] == 30] == [1.0, 1.0]
    assert all(len(r["widest_window"].split()) == 1 and int(r["widest_window"]) >= 4 for r in rows)  # per process
    written = json.loads(next(tmp_path.glob("rss-*.json")).read_text())["rows"]
    assert len(written) == 4 and "environment" in written[0]


def test_one_size_or_a_missing_loader_is_one_clear_line(stack, tmp_path):
    with pytest.raises(WorkbenchError, match="at least two dataset sizes"):
        bench_rss(stack, ["fs"], [30, 30], mean_kb=4, concurrency=4, repeats=1, results_dir=tmp_path)
    with pytest.raises(WorkbenchError, match="no-such-loader"):
        bench_rss(stack, ["no-such-loader"], [30, 60], mean_kb=4, concurrency=4, repeats=1, results_dir=tmp_path)


def test_ratios_are_against_the_same_loaders_smallest_dataset():
    rows = [{"loader": "a", "count": 20000, "peak_rss_mb": 110.0}, {"loader": "a", "count": 2000, "peak_rss_mb": 100.0},
            {"loader": "b", "count": 2000, "peak_rss_mb": 50.0}]
    add_rss_ratios(rows)
    assert [r["rss_ratio"] for r in rows] == [pytest.approx(1.1), 1.0, 1.0]
