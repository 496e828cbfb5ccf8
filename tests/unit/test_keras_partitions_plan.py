"""The partition plan of `pipelines.train_keras_partitions`: which worker reads which partitions, TF_CONFIG, the
padding that gives every worker the same step count, and the one-line errors of bad partition numbers."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pipelines.train_keras_partitions import (  # noqa: E402
    assign_partitions,
    check_partitions,
    merge_epochs,
    pad_count,
    tf_config,
    worker_partitions,
)
from workbench.errors import WorkbenchError  # noqa: E402


@pytest.mark.parametrize(("partitions", "workers"), [(list(range(8)), 2), (list(range(7)), 3), ([3, 9], 2),
                                                     (list(range(1024)), 5)])
def test_every_partition_goes_to_exactly_one_worker(partitions, workers):
    plan = assign_partitions(partitions, workers)
    assert len(plan) == workers and all(plan)
    assert sorted(p for parts in plan for p in parts) == partitions
    assert max(map(len, plan)) - min(map(len, plan)) <= 1


def test_fewer_partitions_than_workers_is_one_line():
    with pytest.raises(WorkbenchError, match=r"2 partitions for 3 workers: a worker needs a partition of its own"):
        assign_partitions([0, 1], 3)
    with pytest.raises(WorkbenchError, match=r"--workers 0: use 1 or more"):
        assign_partitions([0, 1], 0)


def test_partition_numbers_the_cache_lacks_are_one_line():
    assert check_partitions([1, 0], 2, "C") == [0, 1]
    with pytest.raises(WorkbenchError, match=r"^IGNITE_DATASET_PART 2,7: Ignite cache C has 2 partitions \(0\.\.1\)"):
        check_partitions([0, 2, 7], 2, "C", "IGNITE_DATASET_PART")
    with pytest.raises(WorkbenchError, match=r"--partitions -1: "):
        check_partitions([-1], 2, "C")
    with pytest.raises(WorkbenchError, match="twice"):
        check_partitions([1, 1], 2, "C")


def test_the_article_override_names_the_worker_partition():
    assert worker_partitions({}, [0, 2]) == [0, 2]
    assert worker_partitions({"IGNITE_DATASET_PART": " 3 "}, [3]) == [3]
    assert worker_partitions({"IGNITE_DATASET_PART": ""}, [1]) == [1]
    with pytest.raises(WorkbenchError, match=r"IGNITE_DATASET_PART='x' is not a partition number"):
        worker_partitions({"IGNITE_DATASET_PART": "x"}, [1])


def test_tf_config_names_every_worker_and_this_one():
    config = json.loads(tf_config([2222, 3333], 1))
    assert config == {"cluster": {"worker": ["127.0.0.1:2222", "127.0.0.1:3333"]},
                      "task": {"type": "worker", "index": 1}}


def test_padding_fills_the_common_step_count():
    assert pad_count(721, 23, 32) == 15 and pad_count(736, 23, 32) == 0


def test_merge_epochs_counts_every_worker():
    merged = merge_epochs([[["a", "b"], ["b", "a"]], [["c"], ["c"]]])
    assert merged == [Counter({"a": 1, "b": 1, "c": 1})] * 2
    assert merge_epochs([[["a"]], [["a"]]]) == [Counter({"a": 2})]  # read twice: the count shows it
    with pytest.raises(WorkbenchError, match="different epoch counts"):
        merge_epochs([[["a"]], [["a"], ["a"]]])
