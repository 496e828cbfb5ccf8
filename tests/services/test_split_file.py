"""`workbench split` and the loaders' split_file/split_index against the real Cassandra."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from typer.testing import CliRunner

from workbench.backends import make_backend
from workbench.cli import app
from workbench.data import SplitFile, SyntheticSource, largest_remainder
from workbench.errors import WorkbenchError
from workbench.ingest import ingest
from workbench.loaders import make_loader

pytestmark = pytest.mark.services


@pytest.fixture
def ingested(stack, unique):
    source = SyntheticSource(60, num_classes=3, mean_kb=8, name=unique, seed=5)
    backend = make_backend("cassandra", stack, unique)
    ingest(source, backend, check_images=False, progress=False)
    yield source
    backend.drop()


def split_cli(*args: str):
    return CliRunner().invoke(app, ["split", *args], catch_exceptions=False)


def test_split_command_writes_a_per_class_split_that_loaders_read_exactly(stack, ingested, tmp_path):
    path = tmp_path / "split.json"
    done = split_cli("--dataset", ingested.name, "-o", str(path), "--ratios", "8,2", "--seed", "3")
    assert done.exit_code == 0, done.output
    split = SplitFile.load(path)
    label_of = {s.id: s.label for s in ingested}
    per_class = Counter(label_of.values())
    for label, size in per_class.items():  # every class is cut 8:2 exactly (largest remainder)
        expected = dict(zip(("train", "val"), largest_remainder(size, [8, 2]), strict=True))
        assert {name: sum(label_of[i] == label for i in ids) for name, ids in split.splits.items()} == expected
    assert set(split.splits["train"]).isdisjoint(split.splits["val"])
    assert set(split.splits["train"]) | set(split.splits["val"]) == set(label_of)

    for loader in ("cassandra", "cassandra-py"):
        for index in ("val", 1):
            with make_loader(loader, stack, dataset=ingested.name, split_file=str(path), split_index=index) as reader:
                keys = [item.key for item in reader]
            assert sorted(keys) == sorted(str(i) for i in split.splits["val"]), (loader, index)

    again = tmp_path / "again.json"
    assert split_cli("--dataset", ingested.name, "-o", str(again), "--ratios", "8,2", "--seed", "3").exit_code == 0
    assert json.loads(again.read_text()) == json.loads(path.read_text())  # the same seed, the same split


def test_bad_split_file_settings_are_one_clear_line(stack, ingested, tmp_path):
    path = tmp_path / "split.json"
    assert split_cli("--dataset", ingested.name, "-o", str(path)).exit_code == 0
    with pytest.raises(WorkbenchError, match=r"split_index 'test' is not in .*split\.json \(splits: train, val\)"):
        make_loader("cassandra", stack, dataset=ingested.name, split_file=str(path), split_index="test")
    with pytest.raises(WorkbenchError, match=r"split_index 5 is out of range"):
        make_loader("cassandra", stack, dataset=ingested.name, split_file=str(path), split_index=5)
    with pytest.raises(WorkbenchError, match=r"was made for dataset .* make one for this dataset"):
        make_loader("cassandra", stack, dataset="another", split_file=str(path))
    with pytest.raises(WorkbenchError, match="source_uuids or split_file, not both"):
        make_loader("cassandra", stack, dataset=ingested.name, split_file=str(path),
                    source_uuids=[str(next(iter(ingested)).id)])
    with pytest.raises(WorkbenchError, match=r"no samples in split 'nope' of cassandra: .*--from"):
        split_cli("--dataset", ingested.name, "-o", str(tmp_path / "x.json"), "--from", "nope")
