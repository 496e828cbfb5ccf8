"""TensorBoard event files written by `workbench.checkpoints.events`, read back by TensorFlow's own record reader
(which checks both CRCs) and its ``Event`` protocol buffer; and the ``ignite://`` path rules."""

from __future__ import annotations

import io

import pytest

from workbench.checkpoints.events import EventWriter, crc32c, event_file_name, record
from workbench.errors import WorkbenchError
from workbench.storage.ignite_chunks import parse_manifest
from workbench.storage.ignite_fs import IgniteFileSystem


def test_crc32c_check_value():
    assert crc32c(b"123456789") == 0xE3069283  # the Castagnoli polynomial's published check value
    assert crc32c(b"") == 0


def test_event_file_is_read_by_tensorflow(tmp_path, tf):
    from tensorflow.core.util import event_pb2

    buffer = io.BytesIO()
    buffer.close = lambda: None  # keep the bytes readable after the writer closes its file
    with EventWriter(buffer) as events:
        events.scalars(1, {"train/loss": 2.5}, wall_time=1000.0)
        events.scalars(2, {"train/loss": 1.25, "train/images_per_s": 300.0}, wall_time=1001.0)
        events.scalars(2**40, {"big/step": -1.0})
    path = tmp_path / event_file_name()
    path.write_bytes(buffer.getvalue())
    assert path.name.startswith("events.out.tfevents.")
    parsed = [event_pb2.Event.FromString(r.numpy()) for r in tf.data.TFRecordDataset(str(path))]
    assert parsed[0].file_version == "brain.Event:2"
    scalars = [(e.step, e.wall_time, {v.tag: v.simple_value for v in e.summary.value}) for e in parsed[1:]]
    assert scalars[:2] == [(1, 1000.0, {"train/loss": 2.5}), (2, 1001.0, {"train/loss": 1.25,
                                                                         "train/images_per_s": 300.0})]
    assert scalars[2][0] == 2**40 and scalars[2][2] == {"big/step": -1.0}


def test_a_damaged_record_is_refused_by_tensorflow(tmp_path, tf):
    data = bytearray(record(b"payload"))
    data[12] ^= 1
    (tmp_path / "bad").write_bytes(bytes(data))
    with pytest.raises(tf.errors.DataLossError):
        list(tf.data.TFRecordDataset(str(tmp_path / "bad")))


@pytest.mark.parametrize(("path", "split"), [
    ("ignite://RUNS/a/b.pt", ("RUNS", "a/b.pt")), ("RUNS/a/", ("RUNS", "a")), ("ignite://RUNS", ("RUNS", "")),
    ("/RUNS/x", ("RUNS", "x"))])
def test_ignite_paths_name_the_cache_first(path, split):
    assert IgniteFileSystem.split(path) == split


@pytest.mark.parametrize(("path", "match"), [
    ("ignite://", "names a cache first"), ("ignite://bad name/x", "invalid Ignite cache name"),
    ("ignite://RUNS_CHUNKS/x", "not ending in _CHUNKS"), ("ignite://RUNS/a//b", "empty path component")])
def test_bad_ignite_paths_are_one_line(path, match):
    with pytest.raises(WorkbenchError, match=match):
        IgniteFileSystem.split(path)


@pytest.mark.parametrize("raw", [
    '{"format": "workbench-checkpoint", "version": "v", "chunks": 1, "bytes": -3, "sha256": "x"}',
    '{"format": "workbench-checkpoint", "version": "v", "chunks": true, "bytes": 3, "sha256": "x"}',
    '{"format": "workbench-checkpoint", "version": "v", "chunks": 1, "bytes": 3, "sha256": "x", "chunk_bytes": 0}',
    '{"format": "workbench-checkpoint", "chunks": 1, "bytes": 3, "sha256": "x"}', "[]", "not json"])
def test_malformed_manifests_are_one_line(raw):
    with pytest.raises(WorkbenchError, match=r"key 'file:x' is not a chunked-file manifest"):
        parse_manifest(raw, "file:x", "C")
    assert parse_manifest(raw, "file:x", "C", strict=False) is None
