"""Split files (workbench.data.splits): the behaviours mutation testing found unasserted (tests/mutation).

Defaults of `make_split`, the "random" balance's bounds, the errors a bad split file or bad ratios give (each
names what is wrong), and the file's own form (one id per line, its version).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from workbench.data import SplitFile, make_split, parse_ratios, sample_id
from workbench.data.splits import _class_counts
from workbench.errors import WorkbenchError

ITEMS = [(sample_id("ds", f"c{c}/{k}"), c) for c, n in {0: 10, 1: 7, 2: 3}.items() for k in range(n)]


def _doc(**changes) -> dict:
    doc = make_split(ITEMS, seed=3, dataset="ds").to_json()
    doc.update(changes)
    return doc


def _load(tmp_path: Path, doc) -> SplitFile:
    path = tmp_path / "split.json"
    path.write_text(json.dumps(doc))
    return SplitFile.load(path)


def test_make_split_defaults_to_seed_0_and_no_dataset_name():
    split = make_split(ITEMS)
    assert split.seed == 0 and split.dataset == ""
    assert split.splits == make_split(ITEMS, seed=0).splits
    assert split.splits != make_split(ITEMS, seed=1).splits


def test_balance_weights_are_recorded_as_a_list_of_floats():
    split = make_split(ITEMS, balance=(1, 1, 2))
    assert split.balance == [1.0, 1.0, 2.0] and isinstance(split.balance, list)


def test_random_balance_keeps_between_half_and_all_of_each_class():
    kept = _class_counts("random", [1000] * 20, np.random.default_rng(0))
    assert all(500 <= k <= 1000 for k in kept), kept
    assert 0.6 < sum(kept) / 20_000 < 0.9  # fractions uniform in [0.5, 1]: about 0.75


def test_random_balance_keeps_one_of_a_single_sample_and_none_of_an_empty_class():
    assert _class_counts("random", [1, 0, 1], np.random.default_rng(0)) == [1, 0, 1]


@pytest.mark.parametrize("weights", [(-1, 2, 1), (float("nan"), 1, 1)])
def test_negative_or_nan_balance_weights_are_rejected(weights):
    with pytest.raises(WorkbenchError, match="balance weights must be >= 0"):
        make_split(ITEMS, balance=weights)


def test_bad_ratios_say_so_with_or_without_their_text():
    with pytest.raises(WorkbenchError, match=r"^bad ratios: every ratio must be a positive number"):
        make_split(ITEMS, ratios=(1, -1))
    with pytest.raises(WorkbenchError, match=r"^bad ratios '8,-2': every ratio must be a positive number"):
        parse_ratios("8,-2")


def test_the_saved_file_has_one_id_per_line_and_its_version(tmp_path):
    split = make_split(ITEMS, seed=3, dataset="ds")
    assert split.to_json()["version"] == 1
    path = tmp_path / "split.json"
    split.save(path)
    lines = path.read_text().splitlines()
    first = split.splits["train"][0]
    assert f'   "{first}",' in lines  # indent 1: a split's ids three levels down, one a line
    assert len(lines) > len(ITEMS)


def test_a_file_without_a_balance_loads_as_original(tmp_path):
    doc = _doc()
    del doc["balance"]
    assert _load(tmp_path, doc).balance == "original"
    assert _load(tmp_path, _doc(balance="random")).balance == "random"
    assert _load(tmp_path, _doc(balance=[1, 2, 3])).balance == [1.0, 2.0, 3.0]


@pytest.mark.parametrize("doc,reason", [
    (_doc(format="other"), "not a workbench-split document"),
    ([1, 2], "not a workbench-split document"),
    (_doc(splits={"train": "abc"}), "'splits' must map split names to lists of ids"),
    (_doc(splits={"a": [str(ITEMS[0][0])], "b": [str(ITEMS[0][0])]}), "an id appears more than once"),
    (_doc(seed="3"), "'seed' must be an integer"),
    (_doc(seed=True), "'seed' must be an integer"),
    ({k: v for k, v in _doc().items() if k != "ratios"}, "missing key 'ratios'"),
    (_doc(ratios=5), "'int' object is not iterable"),
])
def test_bad_split_files_name_the_reason(tmp_path, doc, reason):
    with pytest.raises(WorkbenchError) as info:
        _load(tmp_path, doc)
    message = str(info.value)
    assert message == f"split file {tmp_path / 'split.json'}: invalid content ({reason})"
