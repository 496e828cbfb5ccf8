"""The shard layout's index and slicing (workbench.layouts.shards): edges that mutation testing found unasserted
(tests/mutation). Which keys belong to the layout, what a listing says, the shard numbers reserved for
partitioned writers, and the errors a sample or an index gives (each names what is wrong)."""

from __future__ import annotations

import dataclasses
import io
import logging
import tarfile

import pytest

from workbench.data import Item, ShardInfo, StoredSample, SyntheticSource, pack_shards, read_index, write_index
from workbench.data.shard_spans import SpanTable
from workbench.data.shards import span_key, spans_from_tar
from workbench.errors import WorkbenchError
from workbench.layouts import shards
from workbench.layouts.shards import (
    PARTITION_BLOCK,
    ShardSet,
    _entries,
    _missing,
    _samples_of,
    _shown,
    _wrong_size,
    fetch_items,
    is_shard_key,
    read_split_index,
    sample_item,
    shard_items,
)
from workbench.storage import DirStore


@pytest.mark.parametrize("key,mine", [
    ("train/shard-000000.tar", True), ("train/shard-1234567.tar", True), ("train/index.json", True),
    ("train/ids/shard-000003.json", True), ("train/shard-00001.tar", False), ("train/shard-000000.tar.tmp", False),
    ("shard-000000.tar", False), ("a/b/shard-000000.tar", False), ("train/ids/shard-000003.tar", False),
    ("train/x/shard-000003.json", False), ("train/ids/index.json", False), ("train/c/x.jpg", False),
    ("train/manifest.txt", False), ("train/ids/shard-000003.json/x", False),
])
def test_shard_keys_are_tars_indexes_and_records_of_a_split(key, mine):
    assert is_shard_key(key) is mine


def _shard_set(tmp_path, keys: dict[str, bytes]) -> ShardSet:
    store = DirStore(tmp_path)
    for key, data in keys.items():
        store.put(key, data)
    return ShardSet(store, 1e8, 4, 1, "int")


def test_a_listing_finds_each_splits_tars_records_and_index(tmp_path):
    shards = _shard_set(tmp_path, {"train/shard-000000.tar": b"abc", "train/shard-000002.tar": b"de",
                                   "train/ids/shard-000002.json": b"{}", "val/index.json": b"[]",
                                   "test/ids/shard-000007.json": b"{}", "train/c/x.jpg": b"x"})
    listing = shards._listing()
    assert listing.tars == {"train": {0: 3, 2: 2}}
    assert listing.records == {"train": {2}, "test": {7}}
    assert listing.indexes == {"val"}
    assert listing.splits == shards.splits() == ["test", "train", "val"]


def test_free_blocks_start_after_every_shard_and_record_of_any_split(tmp_path):
    shards = _shard_set(tmp_path, {"train/shard-000004.tar": b"a", "val/ids/shard-000009.json": b"{}"})
    assert shards.free_blocks(3) == [range(10 + p * PARTITION_BLOCK, 10 + (p + 1) * PARTITION_BLOCK) for p in range(3)]
    assert _shard_set(tmp_path / "empty", {}).free_blocks(1) == [range(0, PARTITION_BLOCK)]
    assert shards.free_blocks(0) == []


def test_a_split_without_an_index_says_how_to_make_one(tmp_path):
    store = DirStore(tmp_path)
    with pytest.raises(WorkbenchError) as info:
        read_split_index(store, "train", "digits")
    message = str(info.value)
    assert message.startswith(f"no shard index at {store.where}/train/index.json: dataset 'digits' split 'train'")
    assert "--backend s3-shards" in message and "bucket/prefix/root" in message
    store.put("train/index.json", b"not json")
    with pytest.raises(WorkbenchError, match=rf"^{store.where}/train/index.json: "):
        read_split_index(store, "train", "digits")


def test_a_sample_item_takes_its_key_image_and_label_by_type():
    entries = {"__key__": "s1", "__url__": "u", "jpg": b"img", "cls": b"3", "uid": b"k-1"}
    assert sample_item(entries, "int") == Item("k-1", 3, b"img")
    assert sample_item(entries, "none") == Item("k-1", None, b"img")
    assert sample_item({**entries, "uid": "k-2"}, "int").key == "k-2"  # already text


@pytest.mark.parametrize("entries,message", [
    ({"__key__": "s1", "__url__": "u.tar", "jpg": b"i"}, "sample s1 in u.tar has no 'uid' entry: not a workbench"),
    ({"__key__": "s1", "jpg": b"i"}, "sample s1 in a shard has no 'uid' entry"),
    ({"__key__": "s1", "__url__": "u", "jpg": b"i", "uid": b"\xff"}, "sample s1 in u: its 'uid' entry is not UTF-8"),
    ({"__key__": "s1", "__url__": "u", "uid": b"k"}, "sample k in u has no image entry"),
    ({"__key__": "s1", "__url__": "u", "sum": b"x", "uid": b"k"}, "sample k in u has no image entry"),
    ({"__key__": "a\nb", "__url__": "u", "jpg": b"i"}, "sample 'a\\nb' in u has no 'uid' entry"),
])
def test_a_bad_sample_is_one_line_naming_it_and_its_shard(entries, message):
    with pytest.raises(WorkbenchError) as info:
        sample_item(entries, "none")
    assert str(info.value).startswith(message), str(info.value)


def test_names_are_shown_as_is_unless_they_hold_unprintable_characters():
    assert _shown("shard-1") == "shard-1"
    assert _shown("a\nb") == "'a\\nb'"
    assert _shown(None) == "None"


# ------------------------------------------------------------------------------------------ a scan's samples


def _shard(count: int = 4):
    samples = list(SyntheticSource(count, mean_kb=1, name="scan-mutants"))
    [(info, data)] = list(pack_shards(iter(samples), 1e8, 100))
    return samples, info, data


def test_a_scan_yields_each_sample_of_a_shard_sliced_or_parsed():
    samples, info, data = _shard()
    expected = [StoredSample(s.id, "val", s.label, s.data) for s in samples]
    assert list(_samples_of(data, "val", "w", info)) == expected
    assert list(_samples_of(data, "val", "w", dataclasses.replace(info, members=None))) == expected


def test_a_shard_of_another_size_than_its_index_yields_nothing_and_says_why(caplog):
    _, info, data = _shard()
    with caplog.at_level(logging.WARNING, logger="workbench.layouts.shards"):
        assert list(_samples_of(data[:-512], "val", "st/val/s.tar", info)) == []
    assert caplog.messages == [f"shard st/val/s.tar: {len(data) - 512} bytes, the index says {len(data)}"]


def test_a_sample_without_a_valid_id_is_skipped_and_named(caplog):
    samples, info, data = _shard()
    uid = info.members[1].by_ext["uid"]
    damaged = bytearray(data)
    damaged[uid.offset : uid.offset + uid.size] = b"n" * uid.size
    with caplog.at_level(logging.WARNING, logger="workbench.layouts.shards"):
        got = list(_samples_of(bytes(damaged), "val", "w.tar", info))
    assert [s.id for s in got] == [s.id for s in samples if s is not samples[1]]
    assert caplog.messages == [f"sample {span_key(data, info.members[1])} in w.tar has no valid 'id' entry: skipped"]


def _tar(members: list[tuple[str, bytes]]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, payload in members:
            entry = tarfile.TarInfo(name)
            entry.size = len(payload)
            tar.addfile(entry, io.BytesIO(payload))
    return out.getvalue()


def test_a_sample_read_as_pieces_is_named_by_its_tar_key_when_it_has_no_id(tmp_path):
    """Samples without a 'uid' entry are off the common case: their entries come from the pieces, the key from
    the name field of their first header (NUL-padded to 100 bytes), and the error names that key."""
    data = _tar([("img-7.jpg", b"\xff\xd8one"), ("img-7.cls", b"3"), ("img-8.jpg", b"\xff\xd8two"),
                 ("img-8.cls", b"4")])
    store = DirStore(tmp_path)
    store.put("train/shard-000000.tar", data)
    info = ShardInfo("shard-000000.tar", 2, len(data), "img-7", "img-8", spans_from_tar(data))
    [info] = read_index(write_index([info]))  # as a reader has it: a SpanTable, read as pieces
    assert isinstance(info.members, SpanTable)
    with pytest.raises(WorkbenchError) as error:
        fetch_items(store, "train", info, "int")
    assert str(error.value).startswith(f"sample img-7 in {store.where}/train/shard-000000.tar has no 'uid' entry")


# --------------------------------------------------------------------- the common case sliced or read as pieces

J = b"\xff\xd8"
COMMON = {  # two samples of like entries per label type, and the items they give
    "int": ([("a.jpg", J + b"A"), ("a.cls", b"3"), ("a.uid", b"id-a"), ("b.jpg", J + b"B"), ("b.cls", b"12"),
             ("b.uid", b"id-b")], [Item("id-a", 3, J + b"A"), Item("id-b", 12, J + b"B")]),
    "blob": ([("a.jpg", J + b"A"), ("a.png", b"maskA"), ("a.uid", b"id-a"), ("b.jpg", J + b"B"),
              ("b.png", b"maskB"), ("b.uid", b"id-b")],
             [Item("id-a", b"maskA", J + b"A"), Item("id-b", b"maskB", J + b"B")]),
    "none": ([("a.jpg", J + b"A"), ("a.uid", b"id-a"), ("b.jpg", J + b"B"), ("b.uid", b"id-b")],
             [Item("id-a", None, J + b"A"), Item("id-b", None, J + b"B")]),
}


@pytest.fixture
def fast_path_only(monkeypatch):
    """The common case must not build entries dicts (the slow path `sample_item` takes): why it is sliced."""
    def refuse(*args, **kwargs):
        raise AssertionError("the common case went through the entries of the slow path")
    monkeypatch.setattr(shards, "_entries", refuse)
    monkeypatch.setattr(shards, "_piece_entries", refuse)


@pytest.mark.parametrize("label_type", sorted(COMMON))
def test_the_common_case_is_sliced_from_the_spans_at_any_base(fast_path_only, label_type):
    members, expected = COMMON[label_type]
    data = _tar(members)
    spans = spans_from_tar(data)
    assert shard_items(data, "w", label_type, spans) == expected
    base = spans[1].start  # a ranged read from the second sample on
    assert shard_items(data[base:], "w", label_type, spans[1:], base=base) == expected[1:]


@pytest.mark.parametrize("label_type", sorted(COMMON))
def test_the_common_case_is_read_from_pieces_without_entries(tmp_path, fast_path_only, label_type):
    members, expected = COMMON[label_type]
    store, info = _indexed(tmp_path, _tar(members))
    assert fetch_items(store, "train", info, label_type) == expected


def _indexed(tmp_path, data: bytes):
    store = DirStore(tmp_path)
    store.put("train/shard-000000.tar", data)
    info = ShardInfo("shard-000000.tar", 2, len(data), "a", "b", spans_from_tar(data))
    [info] = read_index(write_index([info]))
    assert isinstance(info.members, SpanTable)
    return store, info


def test_a_missing_or_resized_shard_read_as_pieces_or_whole_is_named(tmp_path):
    data = _tar(COMMON["int"][0])
    store, info = _indexed(tmp_path, data)
    where = f"{store.where}/train/shard-000000.tar"
    for members in (info.members, None):  # as pieces, or one GET of the whole shard
        shard = dataclasses.replace(info, members=members)
        store.put("train/shard-000000.tar", data[:-512])
        with pytest.raises(WorkbenchError) as error:
            fetch_items(store, "train", shard, "int")
        assert str(error.value) == str(_wrong_size(where, len(data) - 512, info))
        store.delete(["train/shard-000000.tar"])
        with pytest.raises(WorkbenchError) as error:
            fetch_items(store, "train", shard, "int")
        assert str(error.value) == str(_missing(where))


OFF = [("a.jpg", J + b"A"), ("a.cls", b"3"), ("a.uid", b"id-a")]  # one common sample first: read from a base


@pytest.mark.parametrize("second,message", [
    ([("b.jpg", J + b"B"), ("b.cls", b"4")], "sample b in st/w.tar has no 'uid' entry: not a workbench shard"),
    ([("b.uid", b"id-b"), ("b.jpg", J + b"B")], "sample id-b in st/w.tar has no image entry"),
    ([("b.jpg", J + b"B"), ("b.cls", b"4"), ("b.uid", b"\xff\xfe")],
     "sample b in st/w.tar: its 'uid' entry is not UTF-8 text: not a workbench shard"),
])
def test_a_sliced_sample_off_the_common_case_gets_the_slow_paths_error(second, message):
    data = _tar([*OFF, *second])
    spans = spans_from_tar(data)
    with pytest.raises(WorkbenchError) as error:
        shard_items(data[spans[1].start:], "st/w.tar", "int", spans[1:], base=spans[1].start)
    assert str(error.value).startswith(message)


def test_a_sliced_sample_with_a_bad_int_label_is_refused():
    data = _tar([*OFF, ("b.jpg", J + b"B"), ("b.cls", b"x4"), ("b.uid", b"id-b")])
    spans = spans_from_tar(data)
    with pytest.raises(WorkbenchError, match="id-b"):
        shard_items(data[spans[1].start:], "st/w.tar", "int", spans[1:], base=spans[1].start)


def test_the_entries_of_a_sliced_sample_are_cut_from_its_base():
    data = _tar([*OFF, ("b.jpg", J + b"B"), ("b.cls", b"4"), ("b.uid", b"id-b")])
    span = spans_from_tar(data)[1]
    assert _entries(data[span.start:], span, "w", span.start) == {
        "__key__": "b", "__url__": "w", "jpg": J + b"B", "cls": b"4", "uid": b"id-b"}


def test_a_parsed_shards_bad_sample_names_the_shard():
    with pytest.raises(WorkbenchError, match=r"^sample b in st/w\.tar has no 'uid' entry"):
        shard_items(_tar([*OFF, ("b.jpg", J + b"B")]), "st/w.tar", "int")


def test_a_sample_from_no_shard_is_said_to_be_in_a_shard():
    with pytest.raises(WorkbenchError) as error:
        sample_item({"__key__": "k", "uid": b"id-k"}, "int")
    assert str(error.value) == "sample id-k in a shard has no image entry"
