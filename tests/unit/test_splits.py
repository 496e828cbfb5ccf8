"""Split files: exact per-class proportions, reproducibility, balance modes, JSON round trip."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path

import pytest

from workbench.data import SplitFile, largest_remainder, make_split, parse_ratios, sample_id
from workbench.errors import WorkbenchError

# Classes of 10, 7 and 3 samples: sizes that do not divide evenly by the ratios.
SIZES = {0: 10, 1: 7, 2: 3}
ITEMS = [(sample_id("ds", f"c{c}/{k}"), c) for c, n in SIZES.items() for k in range(n)]
LABEL = dict(ITEMS)


def _per_class(split: SplitFile) -> dict[str, Counter[int]]:
    return {name: Counter(LABEL[i] for i in ids) for name, ids in split.splits.items()}


def test_largest_remainder_sums_exactly() -> None:
    assert largest_remainder(10, [8, 2]) == [8, 2]
    assert largest_remainder(7, [8, 2]) == [6, 1]  # quotas 5.6 / 1.4
    assert largest_remainder(3, [8, 2]) == [2, 1]  # quotas 2.4 / 0.6
    assert largest_remainder(10, [1, 1, 1]) == [4, 3, 3]
    assert largest_remainder(0, [1, 2]) == [0, 0]
    for n in range(50):
        assert sum(largest_remainder(n, [7, 2, 1])) == n


def test_split_proportions_per_class_are_exact() -> None:
    split = make_split(ITEMS, ratios=(8, 2), names=("train", "val"), seed=0, dataset="ds")
    per = _per_class(split)
    assert per["train"] == Counter({0: 8, 1: 6, 2: 2})
    assert per["val"] == Counter({0: 2, 1: 1, 2: 1})
    assert split.dataset == "ds" and split.ratios == [8.0, 2.0] and split.seed == 0


def test_split_is_disjoint_and_complete_and_sorted() -> None:
    split = make_split(ITEMS, ratios=(6, 2, 2), names=("train", "val", "test"), seed=5)
    all_ids = [i for ids in split.splits.values() for i in ids]
    assert len(all_ids) == len(set(all_ids)) == len(ITEMS)
    assert set(all_ids) == {i for i, _ in ITEMS}
    for ids in split.splits.values():
        assert ids == sorted(ids, key=lambda u: u.int)
    # 10 -> 6/2/2, 7 -> 4/2/1, 3 -> 2/1/0: ties in remainder go to the earlier split.
    assert split.counts() == {"train": 12, "val": 5, "test": 3}


def test_split_is_reproducible_and_seed_dependent() -> None:
    a = make_split(ITEMS, seed=1)
    b = make_split(list(reversed(ITEMS)), seed=1)  # input order does not matter
    c = make_split(ITEMS, seed=2)
    assert a.splits == b.splits
    assert a.splits["val"] != c.splits["val"]


def test_balance_random_subsamples_each_class_by_half_or_more() -> None:
    items = [(sample_id("ds", f"{c}/{k}"), c) for c in range(4) for k in range(100)]
    labels = dict(items)
    split = make_split(items, balance="random", seed=3)
    kept = Counter(labels[i] for ids in split.splits.values() for i in ids)
    assert all(50 <= kept[c] <= 100 for c in range(4))
    assert len(set(kept.values())) > 1  # not all the same fraction
    assert make_split(items, balance="random", seed=3).splits == split.splits
    assert split.balance == "random"


def test_balance_weights_set_class_proportions() -> None:
    equal = make_split(ITEMS, balance=[1, 1, 1], ratios=[1], names=["all"])
    assert _per_class(equal)["all"] == Counter({0: 3, 1: 3, 2: 3})
    weighted = make_split(ITEMS, balance=[2, 1, 0], ratios=[1], names=["all"])
    assert _per_class(weighted)["all"] == Counter({0: 10, 1: 5})
    assert weighted.balance == [2.0, 1.0, 0.0]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"ratios": (8, 2), "names": ("train",)}, "one ratio per split"),
        ({"ratios": (8, 0)}, "positive"),
        ({"ratios": (8, -1)}, "positive"),
        ({"ratios": (1, 1), "names": ("a", "a")}, "distinct"),
        ({"balance": [1, 1]}, "one weight per class"),
        ({"balance": [0, 0, 0]}, "at least one"),
        ({"balance": "weird"}, "unknown balance"),
    ],
)
def test_make_split_rejects_bad_arguments(kwargs: dict, match: str) -> None:
    with pytest.raises(WorkbenchError, match=match):
        make_split(ITEMS, **kwargs)


def test_make_split_rejects_duplicate_ids() -> None:
    with pytest.raises(WorkbenchError, match="duplicate"):
        make_split([*ITEMS, ITEMS[0]])


def test_parse_ratios() -> None:
    assert parse_ratios("8,2") == [8.0, 2.0]
    assert parse_ratios("0.7, 0.2, 0.1") == [0.7, 0.2, 0.1]
    for bad in ("", "8,x", "8,0", "-1,2", "nan,1"):
        with pytest.raises(WorkbenchError, match="bad ratios"):
            parse_ratios(bad)


def test_split_file_round_trip(tmp_path: Path) -> None:
    split = make_split(ITEMS, ratios=(7, 3), seed=9, dataset="ds", balance=[1, 1, 1])
    path = tmp_path / "split.json"
    split.save(path)
    doc = json.loads(path.read_text())
    assert all(isinstance(i, str) for i in doc["splits"]["train"])
    assert SplitFile.load(path) == split


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        json.dumps({"format": "other"}),
        json.dumps({"format": "workbench-split", "dataset": "d", "seed": 0, "ratios": [1]}),
        json.dumps(
            {"format": "workbench-split", "dataset": "d", "seed": 0, "ratios": [1], "splits": {"a": ["x"]}}
        ),
        json.dumps(
            {
                "format": "workbench-split",
                "dataset": "d",
                "seed": 0,
                "ratios": [1, 1],
                "splits": {"a": [str(uuid.UUID(int=1))], "b": [str(uuid.UUID(int=1))]},
            }
        ),
    ],
)
def test_split_file_load_rejects_bad_content(tmp_path: Path, content: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(WorkbenchError, match=r"split file .*bad\.json"):
        SplitFile.load(path)
