"""Property tests: every parser of outside input ends in a result or one WorkbenchError, never another exception.

Outside input is whatever a user, a file or a server hands us: manifests and shard indexes read from S3, tar
shards, split files, sweep configs, the CLI's source specs and layout options, image bytes at ingest, blob
labels, and Ignite binary objects turned into tensors. Hypothesis generates structured near-misses (valid
documents with one thing wrong, mutated shards and images) as well as plain garbage. The examples per test are
few (``max_examples``) so the whole module stays well under 30 s; `make fuzz` (fuzz/) runs the same parsers
under coverage-guided fuzzing for longer.
"""

from __future__ import annotations

import io
import json
import tarfile
import tempfile
import uuid
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from PIL import Image

from workbench.bench.sweep_config import SweepConfig, load_sweep_config
from workbench.checkpoints.ignite import _parse as parse_checkpoint_manifest
from workbench.cli_options import key_values
from workbench.compat.ignite_dataset import infer_schema, to_python
from workbench.data import (
    Sample,
    ShardInfo,
    SplitFile,
    check_entries,
    decode_multilabel,
    encode_multilabel,
    make_split,
    pack_shards,
    parse_ratios,
    parse_source,
    read_index,
    read_shard,
    sample_id,
    verify_image,
    write_index,
)
from workbench.data.shards import split_name
from workbench.errors import WorkbenchError
from workbench.layouts.objects import JOURNAL, ObjectSet, manifest_key
from workbench.layouts.shards import sample_item as shard_item
from workbench.loaders.fs import FileEntry
from workbench.loaders.fs import read_journal as read_fs_journal
from workbench.loaders.ignite import sample_item
from workbench.loaders.s3_objects import default_manifest_parser
from workbench.storage.local import DirStore

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::SyntaxWarning")  # corrupt inputs on purpose

FAST = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FEW = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

DEEP_JSON = b"[" * 100_000  # json.loads raises RecursionError, which is not a ValueError
HUGE_INT = b"1" * 5000  # json.loads raises a plain ValueError past 4300 digits, not a JSONDecodeError

json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)


def outcome(fn, *args, **kwargs) -> Any:
    """The parser's result, or None when it raised WorkbenchError; any other exception fails the test."""
    try:
        return fn(*args, **kwargs)
    except WorkbenchError as exc:
        assert str(exc) and "\n" not in str(exc).strip(), repr(exc)
        return None


def mutate(data: bytes, edits: list[tuple[int, int, int]]) -> bytes:
    """Apply (kind, position, value) edits: 0 flips a byte, 1 truncates, 2 inserts a byte."""
    buf = bytearray(data)
    for kind, position, value in edits:
        if not buf:
            break
        at = position % len(buf)
        if kind == 0:
            buf[at] ^= value or 1
        elif kind == 1:
            del buf[at:]
        else:
            buf.insert(at, value)
    return bytes(buf)


edits = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 1 << 20), st.integers(0, 255)), min_size=1, max_size=4)


# ---------------------------------------------------------------------------------------- S3 manifest

manifest_text = st.lists(
    st.lists(st.sampled_from(["a", "cls/img.jpg", "/abs", "%20", "%", "%zz", "-", "--5", "7", "-3", "²", "٣",
                              "x y", " ", "\t", "\x0b", "\x1c", "\u2028", "\r", "é", "\udcff"]),
             max_size=6).map("".join),
    max_size=6).map("\n".join)


@FAST
@given(data=st.binary(max_size=200) | manifest_text.map(lambda t: t.encode("utf-8", "surrogatepass")))
@example(data=b"a/b.jpg --5\n")
@example(data="a/b.jpg \u00b2\n".encode())
def test_manifest_parser(data):
    result = outcome(lambda: list(default_manifest_parser(io.BytesIO(data))))
    for key, label in result or []:
        assert isinstance(key, str) and key and not key.startswith("/")
        assert label is None or isinstance(label, int | str)


manifest_keys = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=20).filter(
    lambda k: not k.startswith("/") and k.strip("/"))


@FAST
@given(keys=st.lists(manifest_keys, min_size=1, max_size=5), labels=st.lists(st.integers(-5, 10**6), min_size=5))
def test_manifest_writer_and_parser_agree(keys, labels):
    """Whatever key the layout writes (spaces, '%', newlines, any script), the parser reads it back as written."""
    text = "".join(f"{manifest_key(k)} {label}\n" for k, label in zip(keys, labels, strict=False))
    assert list(default_manifest_parser(io.BytesIO(text.encode()))) == list(zip(keys, labels, strict=False))


# ------------------------------------------------------------------------------- shard index and tar shards

def _tiny_samples(n: int) -> list[Sample]:
    return [Sample(id=sample_id("fuzz", f"c/{i}.jpg"), name=f"c/{i}.jpg", label=i % 3, data=bytes([i]) * (10 + i))
            for i in range(n)]


SHARD = next(iter(pack_shards(_tiny_samples(3), maxcount=10)))[1]
INDEX = write_index([ShardInfo("shard-000000.tar", 3, len(SHARD), "a", "b")])


@FAST
@given(doc=json_values, patch=st.dictionaries(st.sampled_from(["format", "shards", "total_samples", "version"]),
                                              json_values, max_size=3))
def test_shard_index_documents(doc, patch):
    base = json.loads(INDEX)
    if isinstance(doc, dict):
        base.update(doc)
    base.update(patch)
    infos = outcome(read_index, json.dumps(base).encode())
    for info in infos or []:
        assert isinstance(info, ShardInfo) and isinstance(info.samples, int) and isinstance(info.name, str)


@FAST
@given(data=st.binary(max_size=300) | edits.map(lambda e: mutate(INDEX, e)))
@example(data=DEEP_JSON)
@example(data=HUGE_INT)
def test_shard_index_bytes(data):
    outcome(read_index, data)


def test_shard_index_round_trip():
    assert read_index(INDEX) == [ShardInfo("shard-000000.tar", 3, len(SHARD), "a", "b")]


@FAST
@given(data=edits.map(lambda e: mutate(SHARD, e)) | st.binary(max_size=2048))
def test_tar_shard_reader(data):
    samples = outcome(lambda: list(read_shard(data, "fuzz.tar")))
    for entries in samples or []:
        assert isinstance(entries["__key__"], str)
        reason = check_entries(entries)
        assert reason is None or isinstance(reason, str)
        for label_type in ("int", "blob", "none", "any"):  # what every shard reader makes of the entries
            item = outcome(shard_item, {**entries, "__url__": "fuzz.tar"}, label_type)
            assert item is None or isinstance(item.data, bytes)


def _tar(members: list[tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, payload in members:
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    return buf.getvalue()


member_names = st.tuples(st.sampled_from(["k1", "k2", "a/k1", "k\n2", "é"]),
                         st.sampled_from(["jpg", "png", "cls", "uid", "sum", "npy", "seg.png", "lbl", ""])).map(
    lambda t: f"{t[0]}.{t[1]}" if t[1] else t[0])
payloads = (st.sampled_from([b"", b"7", b"-3", b"\xb2", b"x", b"\xff\xfe", b"1" * 5000, b"0e6f1c3a"])
            | st.binary(max_size=8))


@FAST
@given(members=st.lists(st.tuples(member_names, payloads), max_size=6))
def test_shard_entries_from_any_tar(members):
    """Well-formed tars with any member names and payloads: labels, ids and image entries as every reader takes them."""
    for entries in outcome(lambda: list(read_shard(_tar(members), "fuzz.tar"))) or []:
        for label_type in ("int", "blob", "none", "any"):
            item = outcome(shard_item, {**entries, "__url__": "fuzz.tar"}, label_type)
            assert item is None or (isinstance(item.key, str) and isinstance(item.data, bytes))


def test_tar_shard_round_trip():
    samples = list(read_shard(SHARD))
    assert [check_entries(s) for s in samples] == [None, None, None]


@FAST
@given(name=st.text(max_size=30))
def test_member_names(name):
    parts = outcome(split_name, name)
    if parts:
        assert parts[0] and "." not in parts[0].rsplit("/", 1)[-1]


# --------------------------------------------------------------------------- journals and checkpoint manifests

journal_lines = (json_values.map(json.dumps) | st.text(max_size=30)
                 | st.fixed_dictionaries({"key": json_values}, optional={"id": json_values}).map(json.dumps))


@FAST
@given(lines=st.lists(journal_lines, max_size=5))
@example(lines=["[" * 100_000])
@example(lines=['{"key": "a/b.jpg", "id": 1}', '{"key": ["x"]}', "1" * 5000])
def test_object_and_fs_journals(lines):
    """The JSON-lines journals of the object and fs layouts: a bad line is skipped (and logged), never a crash."""
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        (root / JOURNAL).mkdir()
        (root / JOURNAL / "0001.jsonl").write_text("\n".join(lines) + "\n", errors="surrogateescape")
        records = ObjectSet(DirStore(root), 1, "int")._journal()[0]
        assert all(isinstance(r, dict) and k == r["key"] for k, r in records.items())
        entries = read_fs_journal(root)
        assert all(e is None or (isinstance(e, FileEntry) and k == e.rel) for k, e in entries.items())


@FAST
@given(raw=st.binary(max_size=200) | json_values.map(lambda v: json.dumps(v).encode()))
@example(raw=DEEP_JSON)
@example(raw=HUGE_INT)
def test_ignite_checkpoint_manifests(raw):
    doc = outcome(parse_checkpoint_manifest, raw, "ckpt", "cache")
    assert doc is None or isinstance(doc, dict)


# ---------------------------------------------------------------------------------------------- split files

SPLIT = make_split([(sample_id("fuzz", str(i)), i % 3) for i in range(12)], ratios=(2, 1), dataset="fuzz")


def _load_split(data: bytes) -> SplitFile | None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "split.json"
        path.write_bytes(data)
        return outcome(SplitFile.load, path)


@FAST
@given(patch=st.dictionaries(st.sampled_from(["format", "dataset", "seed", "ratios", "balance", "splits"]),
                             json_values, max_size=3))
@example(patch={"ratios": [10**400]})
@example(patch={"balance": [10**400]})
def test_split_file_documents(patch):
    doc = {**SPLIT.to_json(), **patch}
    split = _load_split(json.dumps(doc).encode())
    if split is not None:
        assert all(isinstance(i, uuid.UUID) for ids in split.splits.values() for i in ids)
        assert all(isinstance(r, float) for r in split.ratios)


@FAST
@given(data=st.binary(max_size=300) | edits.map(lambda e: mutate(json.dumps(SPLIT.to_json()).encode(), e)))
@example(data=DEEP_JSON)
@example(data=HUGE_INT)
@example(data=b"\xff\xfe")
def test_split_file_bytes(data):
    _load_split(data)


def test_split_file_round_trip(tmp_path):
    SPLIT.save(tmp_path / "s.json")
    assert SplitFile.load(tmp_path / "s.json") == SPLIT


@FAST
@given(text=st.text(max_size=30))
def test_ratios(text):
    ratios = outcome(parse_ratios, text)
    assert ratios is None or all(r > 0 for r in ratios)


# --------------------------------------------------------------------------------------------- sweep configs

SWEEP = {"name": "fuzz", "loaders": ["fs"], "data": {"count": 100}, "network": {"rtt_ms": [0]}}
SECTIONS = ["name", "loaders", "data", "network", "layout", "loader", "compute", "epochs", "repetitions",
            "warmup_batches", "max_seconds_per_epoch", "extra"]
FIELDS = ["count", "mean_kb", "seed", "rtt_ms", "bandwidth_mbps", "jitter_ms", "shard_maxcount", "shard_maxsize",
          "concurrency", "prefetch_buffers", "batch_size", "workers", "decode", "ms_per_batch", "distribution", "x"]


@FEW
@given(patch=st.dictionaries(st.sampled_from(SECTIONS), json_values
                             | st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=3), max_size=3))
@example(patch={"loader": {"batch_size": []}})
def test_sweep_config_documents(patch):
    config = outcome(load_sweep_config, {**SWEEP, **patch})
    if config is not None:
        assert isinstance(config, SweepConfig) and isinstance(config.points(), list)


def _load_sweep(data: bytes) -> SweepConfig | None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "sweep.yaml"
        path.write_bytes(data)
        return outcome(load_sweep_config, path)


@FEW
@given(data=st.binary(max_size=200) | json_values.map(lambda v: json.dumps(v).encode())
       | edits.map(lambda e: mutate(json.dumps(SWEEP).encode(), e)))
@example(data=b"- a\n- b\n")
@example(data=b"42")
@example(data=b"{1: 2}")
@example(data=b"\xff\xfe")
@example(data=b"[" * 600)  # RecursionError inside PyYAML (deeper only costs seconds)
@example(data=b'name: x\nloaders: ["fs\\n\\nx"]\n')  # atheris: a loader name with newlines, echoed over 3 lines
def test_sweep_config_files(data):
    _load_sweep(data)


# ------------------------------------------------------------------------------------ CLI specs and options

@FAST
@given(spec=st.sampled_from(["", "synthetic:", "imagefolder:/nonexistent-", "synthetic:10:", "digits:", "x:"]).flatmap(
    lambda prefix: st.text(max_size=20).map(lambda rest: prefix + rest)))
@example(spec="synthetic:" + "1" * 5000)
def test_source_specs(spec):
    outcome(parse_source, spec)  # imagefolder: only under a missing root, never a walk of "/" or the checkout


@FAST
@given(pairs=st.lists(st.text(max_size=12), max_size=4))
def test_layout_options(pairs):
    outcome(key_values, pairs, "layout option", "-o maxcount=1000")


# ----------------------------------------------------------------------------------- image bytes and labels

def _encoded(fmt: str) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (24, 32, 3), dtype=np.uint8)).save(buf, fmt)
    return buf.getvalue()


IMAGES = [_encoded(fmt) for fmt in ("JPEG", "PNG", "GIF", "BMP", "WEBP", "TIFF")]


@FAST
@given(data=st.binary(max_size=300) | st.tuples(st.sampled_from(IMAGES), edits).map(lambda t: mutate(*t)))
def test_image_check(data):
    reason = verify_image(data)
    assert reason is None or (reason and "\n" not in reason and " at 0x" not in reason), reason


LABEL = encode_multilabel(np.array([0, 1, 1, 0], dtype=np.uint8))


@FAST
@given(data=st.binary(max_size=200) | edits.map(lambda e: mutate(LABEL, e)))
def test_multilabel_blobs(data):
    label = outcome(decode_multilabel, data)
    assert label is None or isinstance(label, np.ndarray)


# ------------------------------------------------------------------------------ Ignite objects -> tensors

LEAF_TYPES = ["String", "ByteArrayObject", "IntObject", "LongObject", "ShortObject", "ByteObject", "FloatObject",
              "DoubleObject", "BoolObject", "UUIDObject", "IntArrayObject", "LongArrayObject", "DoubleArrayObject",
              "BoolArrayObject", "StringArrayObject", "CharObject", "DecimalObject", "DateObject", "MapObject",
              "CollectionObject", "BinaryObject", "ObjectArrayObject"]
ignite_scalars = (st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10)
                  | st.binary(max_size=10) | st.uuids() | st.decimals() | st.datetimes())
ignite_values = st.recursive(ignite_scalars, lambda inner: st.lists(inner, max_size=3)
                             | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=6)


def _type(name: str) -> type:
    return type(name, (), {})  # infer_schema reads only a declared type's __name__


@st.composite
def ignite_objects(draw, depth: int = 2) -> Any:
    """A stand-in for a pyignite binary object: a class with a `_schema` and attributes of any type."""
    names = draw(st.lists(st.sampled_from(["id", "split", "label", "data", "width", "x", "nested"]), unique=True,
                          max_size=4))
    schema = OrderedDict((n, _type(draw(st.sampled_from(LEAF_TYPES)))) for n in names)
    cls = type("Obj", (), {"_schema": schema})
    obj = cls()
    for name in names:
        nested = depth > 0 and draw(st.booleans())
        setattr(obj, name, draw(ignite_objects(depth - 1)) if nested else draw(ignite_values))
    return obj


@FEW
@given(first=ignite_objects() | ignite_values, others=st.lists(ignite_objects() | ignite_values, max_size=3))
def test_ignite_objects_to_tensors(first, others):
    node = outcome(infer_schema, first, "Ignite cache c: first entry")
    if node is None:
        return
    for value in [first, *others]:
        tree = outcome(node.convert, value, "Ignite cache c: entry")
        if tree is not None:
            node.arrays(tree)
        to_python(value)


@FEW
@given(value=ignite_objects() | ignite_values, label_type=st.sampled_from(["int", "blob", "none"]))
def test_ignite_sample_items(value, label_type):
    item = outcome(sample_item, "k", value, "c", label_type)
    if item is not None:
        assert isinstance(item.data, bytes)


@pytest.mark.parametrize("value", [2**31, -(2**31) - 1])
def test_ignite_int32_out_of_range_is_one_error(value):
    schema = OrderedDict(x=_type("IntObject"))
    obj = type("Obj", (), {"_schema": schema})()
    obj.x = value
    with pytest.raises(WorkbenchError, match="int32"):
        infer_schema(obj, "first").convert(obj, "entry")
