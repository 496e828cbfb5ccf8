"""`bench rss` reads whole epochs of each dataset size in fresh processes and compares their peaks."""

from __future__ import annotations

import json

import pytest

from workbench.bench.rss import add_rss_ratios, bench_rss, same_samples_epochs
from workbench.errors import WorkbenchError

pytestmark = pytest.mark.services


def test_every_loader_reads_each_whole_dataset_in_its_own_process(stack, tmp_path):
    rows = bench_rss(stack, ["fs", "s3-shards"], [90, 30], mean_kb=4, concurrency=4, repeats=1,
                     results_dir=tmp_path)
    assert [(r["loader"], r["count"], r["epochs"]) for r in rows] == [
        ("fs", 30, 1), ("fs", 90, 1), ("fs", 30, 3), ("s3-shards", 30, 1), ("s3-shards", 90, 1), ("s3-shards", 30, 3)]
    assert all(r["samples"] == r["count"] * r["epochs"] and r["bytes"] > r["samples"] * 1000 for r in rows)
    assert rows[0]["bytes"] * 3 == rows[2]["bytes"]  # every epoch whole
    assert all(r["peak_rss_mb"] >= r["start_rss_mb"] > 20 for r in rows)  # a real interpreter's own figures
    assert [r["rss_ratio"] for r in rows if (r["count"], r["epochs"]) == (30, 1)] == [1.0, 1.0]
    assert [r["rss_ratio_same_samples"] is None for r in rows] == [True, False, True] * 2
    assert all(len(r["widest_window"].split()) == 1 and int(r["widest_window"]) >= 4 for r in rows)  # per process
    written = json.loads(next(tmp_path.glob("rss-*.json")).read_text())["rows"]
    assert len(written) == 6 and "environment" in written[0]


def test_one_size_or_a_missing_loader_is_one_clear_line(stack, tmp_path):
    with pytest.raises(WorkbenchError, match="at least two dataset sizes"):
        bench_rss(stack, ["fs"], [30, 30], mean_kb=4, concurrency=4, repeats=1, results_dir=tmp_path)
    with pytest.raises(WorkbenchError, match="no-such-loader"):
        bench_rss(stack, ["no-such-loader"], [30, 60], mean_kb=4, concurrency=4, repeats=1, results_dir=tmp_path)


def test_ratios_are_against_the_same_loaders_smallest_dataset():
    rows = [{"loader": "a", "count": 20000, "epochs": 1, "peak_rss_mb": 110.0},
            {"loader": "a", "count": 2000, "epochs": 1, "peak_rss_mb": 100.0},
            {"loader": "a", "count": 2000, "epochs": 10, "peak_rss_mb": 105.0},
            {"loader": "b", "count": 2000, "epochs": 1, "peak_rss_mb": 50.0},
            {"loader": "b", "count": 7000, "epochs": 1, "peak_rss_mb": 60.0}]
    add_rss_ratios(rows)
    assert [r["rss_ratio"] for r in rows] == [pytest.approx(1.1), 1.0, 1.05, 1.0, 1.2]
    # one epoch of 20,000 against 10 of 2,000; b's 7,000 would need 4 epochs of 2,000, not measured here
    assert [r["rss_ratio_same_samples"] for r in rows] == [pytest.approx(110 / 105), None, None, None, None]


def test_the_equal_read_covers_at_least_the_bigger_datasets_samples():
    assert same_samples_epochs(2000, 20000) == 10
    assert same_samples_epochs(2000, 7000) == 4
    assert same_samples_epochs(30, 30) == 1
