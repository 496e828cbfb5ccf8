"""Shards without parsing: the offset rule, the version-2 index, slicing == tar parsing, ranged reads, damage."""

from __future__ import annotations

import io
import itertools
import json
import tarfile
import uuid
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbench.data import Sample, ShardInfo, SyntheticSource, encode_multilabel, pack_shards, read_index, read_shard
from workbench.data.sample import JPEG_MAGIC, PNG_MAGIC
from workbench.data.shard_spans import (
    BLOCK,
    Member,
    SampleSpan,
    SpanTable,
    member_layout,
    padded,
    row_to_span,
    rows_to_spans,
)
from workbench.data.shards import SHARD_FIELDS, slice_shard, write_index
from workbench.errors import WorkbenchError
from workbench.layouts.shards import fetch_items, sample_item, sample_runs, shard_items
from workbench.storage import DirStore

# ------------------------------------------------------------------------------------ the offset rule


def test_padded_and_member_layout_by_hand() -> None:
    assert [padded(n) for n in (0, 1, 511, 512, 513, 1024)] == [0, 512, 512, 512, 1024, 1024]
    # jpg of 1000 bytes, cls of 1, uid of 36, sum of 32, from byte 10240
    offsets, end = member_layout(10240, [1000, 1, 36, 32])
    assert offsets == [10752, 12288, 13312, 14336]
    assert end == 14848
    assert member_layout(0, []) == ([], 0)
    assert member_layout(0, [0]) == ([512], 512)  # an empty member: a header and no data block


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 3000), min_size=1, max_size=6), st.integers(0, 5))
def test_member_layout_is_where_tarfile_puts_the_data(sizes: list[int], skip: int) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for i in range(skip):  # members before this sample
            info = tarfile.TarInfo(f"pre{i}.bin")
            info.size = i * 100
            tar.addfile(info, io.BytesIO(bytes(info.size)))
        start = tar.offset
        for i, size in enumerate(sizes):
            info = tarfile.TarInfo(f"k.e{i}")
            info.size = size
            tar.addfile(info, io.BytesIO(bytes([i % 256]) * size))
        end = tar.offset
    offsets, computed_end = member_layout(start, sizes)
    assert computed_end == end
    with tarfile.open(fileobj=io.BytesIO(buf.getvalue())) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith("k.")]
    assert [m.offset_data for m in members] == offsets


def test_span_derived_fields() -> None:
    span = SampleSpan(0, 7, (Member("jpg", 512, 1000), Member("cls", 2048, 1), Member("uid", 3072, 36)))
    assert span.end == 3584
    assert span.regions == ((0, 512), (1512, 2048), (2049, 3072), (3108, 3584))
    assert span.by_ext["cls"] == Member("cls", 2048, 1)


@pytest.mark.parametrize("row", [
    [0, 1], [0, 1, "jpg", 512], "x", [0, 1, "jpg", 100, 10],  # no room for the header
    [0, 1, "jpg", 512, 10, "jpg", 1536, 1],  # the same entry twice
    [0, 1, "jpg", 512, 10, "cls", 600, 1],  # overlaps the previous member
    [0, 1, "jpg", 512, 10**6], [-1, 1, "jpg", 512, 1], [0, 2**32, "jpg", 512, 1], [0, 1, "", 512, 1],
    [0, 1, "jpg", 512.0, 1], [0, 1, "jpg", True, 1], [0, 1, 3, 512, 1],
])
def test_bad_rows_are_rejected(row) -> None:
    with pytest.raises((ValueError, TypeError)):
        row_to_span(row, 10240)


def test_rows_must_match_the_shard() -> None:
    row = [0, 1, "jpg", 512, 10]
    assert len(rows_to_spans([row, [1024, 1, "jpg", 1536, 10]], 2, 10240)) == 2
    for rows, samples in (([row], 2), ([row, row], 2), ({}, 1)):
        with pytest.raises(ValueError):
            rows_to_spans(rows, samples, 10240)


def _rows(samples: int, exts: tuple[str, ...] = ("jpg", "cls", "uid")) -> list[list]:
    rows, pos = [], 0
    for i in range(samples):
        sizes = [1000 + i, 1, 36][: len(exts)]
        offsets, end = member_layout(pos, sizes)
        rows.append([pos, 7 * i, *(x for e, o, z in zip(exts, offsets, sizes, strict=True) for x in (e, o, z))])
        pos = end
    return rows


def test_a_shard_of_like_samples_is_held_as_integers_and_gives_the_same_spans() -> None:
    rows = _rows(50)
    spans = rows_to_spans(rows, 50, 10**6)
    assert isinstance(spans, SpanTable) and len(spans) == 50
    assert list(spans) == [row_to_span(r, 10**6) for r in rows] and spans == tuple(spans)
    assert spans[-1] == spans[49] and spans[10:12] == [spans[10], spans[11]]
    with pytest.raises(IndexError):
        spans[50]
    (jpg, uid), _ = member_layout(10**6, [1000, 36])  # one more sample, with other entries: objects, not a table
    mixed = rows_to_spans([*rows, [10**6, 1, "jpg", jpg, 1000, "uid", uid, 36]], 51, 2 * 10**6)
    assert not isinstance(mixed, SpanTable) and list(mixed[:50]) == list(spans)


def test_an_index_of_20000_samples_stays_small_in_memory() -> None:
    import tracemalloc

    rows = _rows(20_000)
    tracemalloc.start()
    try:
        spans = rows_to_spans(rows, 20_000, 10**10)
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(spans) == 20_000 and held / 20_000 < 100  # bytes a sample (as SampleSpan objects: about 1,200)


# ---------------------------------------------------------------------------------------- the index


@pytest.fixture(scope="module", params=["packed", "indexed"])
def shards(request) -> list[tuple[ShardInfo, bytes]]:
    """Shards with their spans as the packer made them (SampleSpans), or as a reader has them from the index
    (a SpanTable of flat integers): every test below holds for both."""
    packed = list(pack_shards(SyntheticSource(20, seed=3, mean_kb=4), maxcount=6))
    if request.param == "packed":
        return packed
    indexed = [(read_index(write_index([info]))[0], data) for info, data in packed]
    assert all(isinstance(info.members, SpanTable) for info, _ in indexed)
    return indexed


def test_index_v2_round_trip_and_readable_by_version_1_readers(shards) -> None:
    infos = [info for info, _ in shards]
    assert all(info.members is not None and len(info.members) == info.samples for info in infos)
    data = write_index(infos)
    assert read_index(data) == infos
    doc = json.loads(data)
    assert doc["version"] == 2 and set(doc["members"]) == {i.name for i in infos}
    # A version-1 reader builds ShardInfo(**entry) from "shards" and ignores the rest.
    assert all(set(entry) == set(SHARD_FIELDS) for entry in doc["shards"])
    assert [ShardInfo(**entry).fields() for entry in doc["shards"]] == [i.fields() for i in infos]


def test_index_v1_loads_without_spans_and_readers_parse(shards) -> None:
    infos = [info for info, _ in shards]
    v1 = {"format": "workbench-shards", "version": 1, "total_samples": sum(i.samples for i in infos),
          "total_bytes": sum(i.bytes for i in infos), "shards": [i.fields() for i in infos]}
    loaded = read_index(json.dumps(v1).encode())
    assert [i.members for i in loaded] == [None] * len(infos)
    info, data = shards[0]
    assert shard_items(data, "x.tar", "int", loaded[0].members) == shard_items(data, "x.tar", "int", info.members)


def test_index_with_bad_rows_is_one_clear_error(shards) -> None:
    info, _ = shards[0]
    doc = json.loads(write_index([info]))
    for members in ([], {"shard-000000.tar": [[0, 1, "jpg", 512, 10**9]] * info.samples}, {"shard-000000.tar": 3}):
        doc["members"] = members
        with pytest.raises(WorkbenchError, match="invalid shard index"):
            read_index(json.dumps(doc).encode())


def test_pieces_are_the_spans_and_their_headers_are_what_the_crc_covers(shards) -> None:
    [info] = read_index(write_index([shards[0][0]]))  # as a reader has it: a SpanTable
    table = info.members
    assert isinstance(table, SpanTable)
    pieces, width = [(int(a), int(n)) for a, n in table.pieces()], 2 * len(table.exts) + 1
    assert len(pieces) == width * len(table)
    for i, span in enumerate(table):
        mine = pieces[i * width : (i + 1) * width]
        assert mine[0][0] == span.start and sum(length for _, length in mine) == span.end - span.start
        assert all(a + n == b for (a, n), (b, _) in itertools.pairwise(mine))  # back to back
        assert mine[1::2] == [(m.offset, m.size) for m in span.members] and mine[0::2] == [
            (a, b - a) for a, b in span.regions]
    starts, crcs = table.checks()
    assert (list(starts), list(crcs)) == ([s.start for s in table], [s.header_crc for s in table])


# ------------------------------------------------------------------------------- slicing == parsing

IDS = st.uuids().map(lambda u: uuid.UUID(int=u.int))
PAYLOAD = st.binary(min_size=0, max_size=1500)
IMAGE = st.one_of(PAYLOAD.map(lambda b: (JPEG_MAGIC + b, "x.jpg")), PAYLOAD.map(lambda b: (PNG_MAGIC + b, "x.png")))
LABEL = st.one_of(
    st.none(), st.integers(-5, 10**6),
    PAYLOAD.map(lambda b: PNG_MAGIC + b),  # a mask ('png', or 'seg.png' beside a png image)
    st.lists(st.integers(0, 1), min_size=1, max_size=8).map(lambda v: encode_multilabel(np.array(v, np.uint8))),
    PAYLOAD.filter(lambda b: not b.startswith((PNG_MAGIC, b"\x93NUMPY"))),  # 'lbl'
)
SAMPLES = st.lists(st.tuples(IDS, IMAGE, LABEL), min_size=1, max_size=12, unique_by=lambda t: t[0])


def _outcome(fn, *args):
    """What `fn(*args)` gives, or the WorkbenchError text it raises (the two readers must agree on either)."""
    try:
        return fn(*args)
    except WorkbenchError as exc:
        return ("error", str(exc))


def _parsed_items(data: bytes, label_type: str) -> list:
    return [sample_item({**entries, "__url__": "u"}, label_type) for entries in read_shard(data)]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(SAMPLES, st.integers(1, 5))
def test_slicing_by_the_index_is_tar_parsing(samples, maxcount) -> None:
    source = [Sample(id=i, name=f"c/{name}", label=label, data=data) for i, (data, name), label in samples]
    for info, data in pack_shards(source, maxcount=maxcount):
        [info] = read_index(write_index([info]))  # what a reader has: the index as stored
        assert list(slice_shard(data, info.members, info.name)) == list(read_shard(data, info.name))
        for label_type in ("int", "blob", "none", "any"):
            parsed = _outcome(_parsed_items, data, label_type)
            assert _outcome(shard_items, data, "u", label_type, info.members) == parsed


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(SAMPLES, st.integers(1, 5), st.integers(0, 2**16))
def test_reading_by_pieces_is_slicing_also_when_damaged(tmp_path, samples, maxcount, damage_at) -> None:
    """`fetch_items` of a whole shard (pieces through `Store.get_ranges`) gives what `shard_items` gives of its
    bytes, Items or the same one-line error, for every label type, intact or with one byte changed."""
    store = DirStore(tmp_path / uuid.uuid4().hex)
    source = [Sample(id=i, name=f"c/{name}", label=label, data=data) for i, (data, name), label in samples]
    for info, data in pack_shards(source, maxcount=maxcount):
        [info] = read_index(write_index([info]))
        damaged = bytearray(data)
        damaged[damage_at % len(data)] ^= 0x5A
        for body in (data, bytes(damaged)):
            store.put(f"train/{info.name}", body)
            where = f"{store.where}/train/{info.name}"
            for label_type in ("int", "blob", "none", "any"):
                assert _outcome(fetch_items, store, "train", info, label_type) == \
                    _outcome(shard_items, body, where, label_type, info.members)


# --------------------------------------------------------------------------- damage and ranged reads


def test_damaged_headers_name_the_shard_payload_damage_is_not_a_tar_error(shards) -> None:
    info, data = shards[0]
    span = info.members[2]
    for at in (span.start + 100, span.members[1].offset - 1, span.end - 1):  # header, padding, last padding
        damaged = bytearray(data)
        damaged[at] ^= 0xFF
        with pytest.raises(WorkbenchError, match=rf"shard shard-000000\.tar: corrupt.*byte {span.start}"):
            shard_items(bytes(damaged), "shard-000000.tar", "int", info.members)
        with pytest.raises(WorkbenchError, match=r"shard-000000\.tar"):
            list(slice_shard(bytes(damaged), info.members, "shard-000000.tar"))
    damaged = bytearray(data)
    damaged[span.members[0].offset] ^= 0xFF  # image bytes: tar has no checksum of data, neither do we
    items = shard_items(bytes(damaged), "s", "int", info.members)
    assert items[2].data != shard_items(data, "s", "int", info.members)[2].data
    with pytest.raises(WorkbenchError, match=r"shard s: truncated"):
        shard_items(data[: span.end - 1], "s", "int", info.members)


def test_sample_runs_coalesce_near_samples() -> None:
    spans = [SampleSpan(s, 0, (Member("jpg", s + BLOCK, 10),)) for s in (0, 1024, 2048, 10 * 1024, 40 * 1024)]
    assert [[s.start for s in r] for r in sample_runs(spans, gap=8 * 1024)] == [[0, 1024, 2048, 10240], [40960]]
    assert [[s.start for s in r] for r in sample_runs(spans[::-1], gap=8 * 1024)] == [[40960], [10240], [2048],
                                                                                     [1024], [0]]
    assert [[s.start for s in r] for r in sample_runs(spans, gap=0)] == [[0, 1024, 2048], [10240], [40960]]


class CountingStore(DirStore):
    """A directory store that counts its reads (to show a subset costs ranges, not the whole shard)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.gets: list[tuple] = []

    def get(self, key):
        self.gets.append(("get", key))
        return super().get(key)

    def get_range(self, key, start, end, etag=None):
        self.gets.append(("range", start, end))
        return super().get_range(key, start, end, etag)


def test_fetch_items_whole_shard_or_ranges(shards, tmp_path) -> None:
    store = CountingStore(tmp_path)
    info, data = shards[1]
    store.put(f"train/{info.name}", data)
    everything = fetch_items(store, "train", info, "int")
    assert store.gets == [("get", f"train/{info.name}")]
    assert everything == shard_items(data, "x", "int", info.members)
    store.gets.clear()
    picked = fetch_items(store, "train", info, "int", which=[4, 0, 1])
    assert picked == [everything[4], everything[0], everything[1]]
    assert [g[0] for g in store.gets] == ["range", "range"]  # [4], then [0, 1] in one range
    assert sum(g[2] - g[1] for g in store.gets) < len(data)
    # A shard whose size is not the index's: the same message as a whole-shard read.
    store.put(f"train/{info.name}", data[:-BLOCK])
    for which in (None, [0]):
        with pytest.raises(WorkbenchError, match=r"shard .*shard-000001\.tar: corrupt or truncated .*index says"):
            fetch_items(store, "train", info, "int", which=which)
    store.delete([f"train/{info.name}"])
    with pytest.raises(WorkbenchError, match="missing"):
        fetch_items(store, "train", info, "int", which=[0])


# ------------------------------------------------------------------------------------ outside input

JSON = st.recursive(st.none() | st.booleans() | st.integers(-3, 2**33) | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
                    max_leaves=30)


@settings(max_examples=150, deadline=None)
@given(rows=st.one_of(JSON, st.lists(st.lists(st.one_of(st.integers(-1, 70000), st.sampled_from(["jpg", "cls", "uid"])),
                                              max_size=11), max_size=4)))
def test_any_members_document_is_rows_or_one_clear_error(rows) -> None:
    info = ShardInfo("shard-000000.tar", 2, 20480, "a", "b")
    doc = json.loads(write_index([info]))
    doc["members"] = {"shard-000000.tar": rows}
    try:
        [got] = read_index(json.dumps(doc).encode())
    except WorkbenchError as exc:
        assert str(exc).startswith("invalid shard index")
        return
    assert got.members is None or (len(got.members) == 2 and all(s.end <= 20480 for s in got.members))


@settings(max_examples=150, deadline=None)
@given(cuts=st.lists(st.tuples(st.integers(0, 60_000), st.integers(0, 255)), min_size=1, max_size=4),
       label_type=st.sampled_from(["int", "blob", "none", "any"]))
def test_damaged_shard_bytes_give_items_or_one_clear_error(shards, cuts, label_type) -> None:
    info, data = shards[0]
    damaged = bytearray(data)
    for at, value in cuts:
        damaged[at % len(damaged)] = value
    try:
        items = shard_items(bytes(damaged), "shard-000000.tar", label_type, info.members)
    except WorkbenchError as exc:
        assert "shard-000000.tar" in str(exc)
        return
    assert len(items) == info.samples  # payload damage (an image, a uid) is not a tar error: tar has no data sums


# ------------------------------------------------------------------------------ version-1 shard sets


def test_a_version_1_set_is_read_by_parsing_and_gains_rows_on_re_ingest(tmp_path) -> None:
    from workbench.backends.registry import make_backend
    from workbench.config import Settings
    from workbench.ingest import ingest
    from workbench.layouts.shards import INDEX, read_split_index

    settings = Settings(state_dir=tmp_path / "state", s3_access_key=None, s3_secret_key=None)
    source = SyntheticSource(15, seed=9, mean_kb=3, name=f"v1-{uuid.uuid4().hex[:6]}")
    root = tmp_path / "data"
    backend = make_backend("fs", settings, source.name, layout="shards", root=root, maxcount=4)
    ingest(source, backend, progress=False)
    store, train = DirStore(root), root / "train"
    fresh_index = (train / INDEX).read_bytes()
    v2 = read_split_index(store, "train", "d")
    expected = [fetch_items(store, "train", info, "int") for info in v2]
    # What an ingest before version 2 left: records and index without rows.
    for record in (train / "ids").iterdir():
        doc = json.loads(record.read_text())
        del doc["members"]
        record.write_text(json.dumps({**doc, "version": 1}))
    (train / INDEX).write_bytes(write_index([ShardInfo(**info.fields()) for info in v2]))
    assert json.loads((train / INDEX).read_bytes()).get("members") is None
    loaded = read_split_index(store, "train", "d")
    assert all(info.members is None for info in loaded)
    assert [fetch_items(store, "train", info, "int") for info in loaded] == expected  # parsed
    assert [fetch_items(store, "train", info, "int", which=[1]) for info in loaded] == [[e[1]] for e in expected]
    # A re-ingest of the same samples adds the rows (the shards themselves are not rewritten).
    tars = {p: p.stat().st_mtime_ns for p in train.glob("*.tar")}
    ingest(source, backend, progress=False)
    assert (train / INDEX).read_bytes() == fresh_index
    assert read_split_index(store, "train", "d") == v2
    assert all("members" in json.loads(r.read_text()) for r in (train / "ids").iterdir())
    assert {p: p.stat().st_mtime_ns for p in train.glob("*.tar")} == tars
    before = {p: p.stat().st_mtime_ns for p in train.rglob("*")}
    ingest(source, backend, progress=False)  # now a no-op
    assert {p: p.stat().st_mtime_ns for p in train.rglob("*")} == before
