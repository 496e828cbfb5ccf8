"""The index's one-line answer for the committed scaling and long-fat-network studies (their own data)."""

from pathlib import Path

import pytest

from workbench.report.data import load
from workbench.report.index import headline

STUDIES = Path(__file__).resolve().parents[2] / "results" / "studies"


@pytest.mark.skipif(not (STUDIES / "scaling").exists(), reason="the scaling study is not committed")
def test_the_scaling_headline_counts_exactly_once_and_compares_most_to_fewest_ranks():
    text = headline(load(STUDIES / "scaling"))
    assert text.startswith("exactly once in 18/18 runs; samples/s at 4 vs 1 ranks:")
    assert "cassandra on 3 node(s)" in text and "ignite on 1 node(s)" in text


@pytest.mark.skipif(not (STUDIES / "long-fat-network").exists(), reason="the study is not committed")
def test_the_link_headline_names_the_best_share_per_cap():
    text = headline(load(STUDIES / "long-fat-network"))
    assert text.startswith("share of the capped link at 100 ms RTT, best loader: 100 Mbit/s: ")
    shares = [float(part.rsplit(" ", 1)[1]) for part in text.split(": ", 1)[1].split("; ")]
    assert len(shares) == 2 and all(0 < s <= 1.0 for s in shares)


def test_the_shard_size_headline_names_the_best_layout_not_the_baseline_one():
    """A study of layouts is answered by its best layout: maxcount 200 (3,943 samples/s at 50 ms), not the
    baseline maxcount 20 (1,323). The committed study is this test's input: without it the test fails."""
    assert (STUDIES / "shard-size" / "runs.parquet").is_file(), "results/studies/shard-size/ is committed"
    text = headline(load(STUDIES / "shard-size"))
    assert text.startswith("fastest at 50 ms RTT: s3-shards [maxcount=200], 3,943 samples/s"), text
    assert text.endswith("(1.00 of its 0 ms rate)"), text
