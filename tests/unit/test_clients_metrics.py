"""The arithmetic of `bench clients`: aggregate and per-rank rates, utilisation, the exactly-once check."""

from __future__ import annotations

import math

import pytest

from workbench.bench.clients_metrics import RankResult, exactly_once, summarise_ranks


def rank(r: int, samples: int, wall: float, **kw) -> RankResult:
    return RankResult(rank=r, shard_id=r, samples=samples, bytes=samples * 1000, wall_s=wall, **kw)


def test_aggregate_is_all_samples_over_the_slowest_rank():
    row = summarise_ranks([rank(1, 300, 3.0), rank(0, 100, 1.0)])
    assert row["samples"] == 400
    assert row["seconds"] == 3.0
    assert row["samples_per_s"] == pytest.approx(400 / 3)
    assert row["mb_per_s"] == pytest.approx(400 * 1000 / 1e6 / 3)
    assert row["slowest_rank"] == 1
    assert row["slowest_rank_samples_per_s"] == pytest.approx(100)
    assert row["min_rank_samples_per_s"] == pytest.approx(100)  # both at 100/s
    assert row["rank_imbalance"] == pytest.approx(3.0)
    assert row["rank_samples"] == [100, 300]  # ordered by rank
    assert row["rank_samples_per_s"] == [100.0, 100.0]


def test_slowest_rank_and_lowest_rate_can_differ():
    row = summarise_ranks([rank(0, 1000, 2.0), rank(1, 10, 1.0)])
    assert row["slowest_rank"] == 0 and row["slowest_rank_samples_per_s"] == pytest.approx(500)
    assert row["min_rank_samples_per_s"] == pytest.approx(10)


def test_a_rank_with_nothing_to_read_does_not_break_the_row():
    row = summarise_ranks([rank(0, 50, 1.0), rank(1, 0, 0.0)])
    assert row["samples_per_s"] == pytest.approx(50)
    assert math.isnan(row["rank_imbalance"])
    assert math.isnan(row["min_rank_samples_per_s"]) is False  # rank 0's 50/s; rank 1 has no rate
    assert row["min_rank_samples_per_s"] == pytest.approx(50)


def test_utilisation_excludes_the_first_step():
    # 3 s of wall: the first step ended at 1 s; the later steps computed 1.5 s of the remaining 2 s
    r = rank(0, 96, 3.0, first_step_s=1.0, compute_s=1.5, steps=3)
    assert r.accelerator_utilisation == pytest.approx(0.75)
    row = summarise_ranks([r, rank(1, 96, 3.0, first_step_s=1.0, compute_s=1.0, steps=3)])
    assert row["rank_accelerator_utilisation"] == [0.75, 0.5]
    assert row["rank_steps"] == [3, 3] and row["rank_first_step_s"] == [1.0, 1.0]
    assert row["accelerator_utilisation"] == pytest.approx(0.625)
    assert row["min_accelerator_utilisation"] == pytest.approx(0.5)


def test_no_compute_no_utilisation():
    r = rank(0, 10, 1.0, first_step_s=0.1, compute_s=0.0, steps=2)
    assert math.isnan(r.accelerator_utilisation)
    one_step = rank(0, 10, 1.0, first_step_s=1.0, compute_s=0.0, steps=1)
    assert math.isnan(one_step.accelerator_utilisation)
    row = summarise_ranks([r])
    assert math.isnan(row["accelerator_utilisation"]) and row["rank_accelerator_utilisation"] == [None]


def test_no_ranks_is_an_error():
    with pytest.raises(ValueError, match="no rank results"):
        summarise_ranks([])


def test_exactly_once_holds_for_disjoint_complete_reads():
    check = exactly_once({"a", "b", "c", "d"}, [["c", "a"], ["d", "b"]])
    assert check.ok
    assert (check.expected, check.read, check.distinct, check.missing, check.duplicated, check.unexpected) == \
        (4, 4, 4, 0, 0, 0)
    assert "exactly once" in check.line()


def test_two_ranks_on_the_same_shard_give_duplicates_and_missing():
    expected = {f"id{i}" for i in range(6)}
    shard0 = ["id0", "id2", "id4"]
    check = exactly_once(expected, [shard0, shard0])
    assert not check.ok
    assert check.duplicated == 3 and check.missing == 3 and check.unexpected == 0
    assert check.examples["duplicated"] == ["id0", "id2", "id4"]
    assert check.examples["missing"] == ["id1", "id3", "id5"]
    assert "3 missing, 3 duplicated of 6 samples" in check.line()


def test_an_id_read_twice_by_one_rank_is_a_duplicate():
    check = exactly_once({"a", "b"}, [["a", "a", "b"]])
    assert check.duplicated == 1 and not check.ok


def test_ids_outside_the_split_are_unexpected():
    check = exactly_once({"a"}, [["a"], ["z"]])
    assert check.unexpected == 1 and check.examples["unexpected"] == ["z"] and not check.ok


def test_an_empty_split_never_passes():
    check = exactly_once(set(), [[], []])
    assert not check.ok and "holds no samples" in check.line()


def test_examples_are_capped():
    check = exactly_once({str(i) for i in range(100)}, [[]])
    assert check.missing == 100 and len(check.examples["missing"]) == 5
