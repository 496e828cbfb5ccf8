"""The objects layout's pure logic (workbench.layouts.objects), asserted edge by edge for mutation testing
(tests/mutation): keys from sample names, manifest keys' encoding, which keys are samples, which journal lines
are live, and a manifest read back."""

from __future__ import annotations

import uuid

import pytest

from workbench.data import Sample
from workbench.errors import WorkbenchError
from workbench.layouts.objects import ObjectSet, _is_data_key, manifest_key, object_key
from workbench.storage import DirStore


def _sample(name: str, split: str = "train") -> Sample:
    return Sample(uuid.uuid4(), name, 1, b"x", split)


def test_a_sample_name_becomes_its_key_under_its_split():
    assert object_key(_sample("class_003/img_1.jpg")) == "train/class_003/img_1.jpg"
    assert object_key(_sample("a/b/c.png", "val")) == "val/a/b/c.png"
    assert object_key(_sample("img_1.jpg")) == "train/unlabelled/img_1.jpg"
    assert object_key(_sample("c/x.labels")) == "train/c/x.labels"  # only the sidecar's own suffix is refused


@pytest.mark.parametrize("name", ["", "/abs/x.jpg", "a/../x.jpg", "./x.jpg", "a/./x.jpg", "..", "a//x.jpg", "a/",
                                  "a/x.jpg.label", "a/x\x00.jpg"])
def test_names_that_cannot_be_keys_are_one_line_naming_them(name):
    with pytest.raises(WorkbenchError) as info:
        object_key(_sample(name))
    assert str(info.value).startswith(f"sample name {name!r} cannot be an object key: use a relative 'class/file'")
    assert "not ending in '.label'" in str(info.value)


def test_a_bad_split_is_refused_by_the_key():
    with pytest.raises(WorkbenchError, match="invalid split name"):
        object_key(_sample("c/x.jpg", "../up"))


def test_manifest_keys_percent_encode_percent_and_whitespace_only():
    assert manifest_key("c/x.jpg") == "c/x.jpg"
    assert manifest_key("c d/x%1\t.jpg") == "c%20d/x%251%09.jpg"
    assert manifest_key("a\nb\u00a0c") == "a%0Ab%C2%A0c"  # a non-ASCII space as its UTF-8 bytes
    assert manifest_key("é+&") == "é+&"


def test_data_keys_are_samples_in_a_split_and_class_not_sidecars_journals_or_shards():
    assert _is_data_key("train/c/x.jpg") and _is_data_key("train/c/d/x.jpg")
    assert not _is_data_key("train/x.jpg")  # a split's own files (manifest.txt)
    assert not _is_data_key("_journal/a/b.jsonl")
    assert not _is_data_key("train/c/x.jpg.label")
    assert not _is_data_key("train/ids/shard-000001.json")  # the shard layout sharing the prefix


def test_a_journal_line_is_live_when_its_object_and_any_sidecar_are_listed():
    records = {"t/c/a": {"blob": False}, "t/c/b": {"blob": True}, "t/c/c": {"blob": True}, "t/c/d": {}}
    keys = {"t/c/a", "t/c/b", "t/c/b.label", "t/c/c", "t/c/x"}
    assert ObjectSet._live(records, keys) == {"t/c/a": {"blob": False}, "t/c/b": {"blob": True}}


def test_a_manifest_is_read_as_key_and_label_lines(tmp_path):
    store = DirStore(tmp_path)
    store.put("train/manifest.txt", b"c/a.jpg 3\nc%20d/b.jpg\nc/m.png c/m.png.label\n")
    objects = ObjectSet(store, workers=1, label_type="int")
    assert objects.manifest("train") == [("c/a.jpg", "3"), ("c%20d/b.jpg", ""), ("c/m.png", "c/m.png.label")]
    assert objects.manifest("val") == []
