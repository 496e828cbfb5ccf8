"""``ignite://CACHE/path`` (fsspec over Ignite, the role IGFS played) against the real server: multi-MB round
trips read in ranges, listings, directories, removal, atomic replacement, checkpoints written by the training
pipeline with its TensorBoard event file, read back by torch and TensorFlow."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import fsspec
import pytest
import torch

from workbench.checkpoints.ignite import IgniteCheckpoint
from workbench.clients import ignite_client
from workbench.errors import WorkbenchError
from workbench.storage.ignite_chunks import chunk_cache_of
from workbench.storage.ignite_fs import IgniteFileSystem

pytestmark = pytest.mark.services

ROOT = Path(__file__).resolve().parents[2]
CHUNK = 256 * 1024  # small chunks: a few MB make many of them


@pytest.fixture
def fs(stack):
    return IgniteFileSystem(stack, chunk_bytes=CHUNK)


@pytest.fixture
def cache(stack, unique):
    name = unique.upper()
    yield name
    with ignite_client(stack) as client:
        for c in (name, chunk_cache_of(name)):
            if c in client.get_cache_names():
                client.get_cache(c).destroy()


def test_multi_mb_round_trip_ranged_reads_and_atomic_replacement(stack, fs, cache):
    data = os.urandom(5 * 2**20 + 12345)  # 21 chunks, the last one short
    path = f"ignite://{cache}/run1/model.pt"
    with fs.open(path, "wb") as f:
        for i in range(0, len(data), 1_000_000):  # writes that do not line up with chunks
            f.write(data[i:i + 1_000_000])
    info = fs.info(path)
    assert (info["type"], info["size"], info["sha256"]) == ("file", len(data), hashlib.sha256(data).hexdigest())
    assert fs.cat_file(path) == data
    with fs.open(path, "rb", block_size=CHUNK) as f:
        f.seek(3 * CHUNK - 10)
        assert f.read(20) == data[3 * CHUNK - 10:3 * CHUNK + 10]  # across a chunk boundary
        f.seek(-5, 2)
        assert f.read() == data[-5:]
    assert fs.cat_file(path, start=CHUNK * 20, end=len(data)) == data[CHUNK * 20:]

    with fs.open(path, "rb") as reader:
        fs.pipe_file(path, b"replaced")  # committed while a reader holds the old version
        with pytest.raises(WorkbenchError, match="was replaced or removed while being read: open it again"):
            reader.read()
    assert fs.cat_file(path) == b"replaced"
    with pytest.raises(RuntimeError, match="half-way"), fs.open(path, "wb") as f:
        f.write(b"partial")
        raise RuntimeError("half-way")
    assert fs.cat_file(path) == b"replaced"  # the failed write left the old file
    with ignite_client(stack) as client:
        assert client.get_cache(chunk_cache_of(cache)).get_size() == 1  # no orphan chunks


def test_listing_directories_and_removal_follow_fsspec(stack, fs, cache):
    root = f"ignite://{cache}"
    fs.pipe({f"{root}/a/x.bin": b"1", f"{root}/a/b/y.bin": b"22", f"{root}/top.txt": b"333"})
    fs.makedirs(f"{root}/empty/inner")
    assert fs.ls(root, detail=False) == [f"{cache}/a", f"{cache}/empty", f"{cache}/top.txt"]
    assert {e["name"]: (e["type"], e["size"]) for e in fs.ls(f"{root}/a")} == {
        f"{cache}/a/b": ("directory", 0), f"{cache}/a/x.bin": ("file", 1)}
    assert fs.find(root) == [f"{cache}/a/b/y.bin", f"{cache}/a/x.bin", f"{cache}/top.txt"]
    assert f"{cache}/empty/inner" in fs.find(root, withdirs=True)
    assert fs.isdir(f"{root}/a/b") and fs.isfile(f"{root}/a/b/y.bin") and fs.exists(f"{root}/empty/inner")
    assert not fs.exists(f"{root}/nothing") and not fs.exists("ignite://NO_SUCH_CACHE_H3/x")
    assert fs.du(root) == 6 and fs.modified(f"{root}/top.txt").year >= 2024
    with pytest.raises(FileExistsError):
        fs.makedirs(f"{root}/empty")
    fs.makedirs(f"{root}/empty", exist_ok=True)
    with pytest.raises(FileExistsError):
        fs.makedirs(f"{root}/top.txt", exist_ok=True)
    with pytest.raises(OSError, match="not empty"):
        fs.rmdir(f"{root}/empty")
    fs.rmdir(f"{root}/empty/inner")
    with pytest.raises(FileNotFoundError):
        fs.cat_file(f"{root}/a/missing")
    with pytest.raises(FileNotFoundError):
        fs.ls(f"{root}/missing")
    with pytest.raises(FileExistsError):
        fs.open(f"{root}/top.txt", "xb")
    with pytest.raises(WorkbenchError, match="no append"):
        fs.open(f"{root}/top.txt", "ab")

    fs.cp_file(f"{root}/a/b/y.bin", f"{root}/copy/y.bin")
    fs.mv(f"{root}/top.txt", f"{root}/moved.txt")
    assert fs.cat(f"{root}/copy/y.bin") == b"22" and fs.cat(f"{root}/moved.txt") == b"333"
    assert not fs.exists(f"{root}/top.txt")
    fs.rm(f"{root}/a", recursive=True)
    assert not fs.exists(f"{root}/a") and fs.ls(root, detail=False) == [
        f"{cache}/copy", f"{cache}/empty", f"{cache}/moved.txt"]
    with fsspec.open(f"ignite://{cache}/text/notes.txt", "w", settings=stack) as f:  # by URL, text mode
        f.write("hello, world\n")
    assert fs.cat(f"{root}/text/notes.txt") == b"hello, world\n"


def test_torch_checkpoints_through_fsspec_are_ignite_checkpoints(stack, fs, cache):
    state = {"weight": torch.randn(600_000), "step": torch.tensor(7)}  # ~2.4 MB: many chunks
    with fs.open(f"ignite://{cache}/run/last.pt", "wb") as f:
        torch.save(state, f)
    with fs.open(f"ignite://{cache}/run/last.pt", "rb") as f:
        back = torch.load(f)
    assert torch.equal(back["weight"], state["weight"]) and int(back["step"]) == 7
    again = torch.load(IgniteCheckpoint(stack, cache_name=cache).reader("run/last.pt"))  # one layout, two APIs
    assert torch.equal(again["weight"], state["weight"])


def test_the_training_pipeline_writes_its_checkpoint_and_event_file_to_ignite(stack, fs, cache, unique, tmp_path,
                                                                              tf):
    """A short CPU run from the fs loader (no network needed for the data), outputs to ignite://."""
    from workbench.backends.registry import make_backend
    from workbench.data import SyntheticSource
    from workbench.ingest import ingest

    source = SyntheticSource(48, num_classes=4, mean_kb=3, name=unique)
    backend = make_backend("fs", stack, unique)
    ingest(source, backend, progress=False)
    checkpoint, events = f"ignite://{cache}/{unique}/model.pt", f"ignite://{cache}/{unique}/events"
    try:
        run = subprocess.run(
            [sys.executable, "-m", "pipelines.train_torch", "--loader", "fs", "--dataset", unique, "--steps", "4",
             "--batch-size", "8", "--model", "tiny", "--size", "32", "--num-classes", "4", "--workers", "0",
             "--device", "cpu", "--checkpoint-url", checkpoint, "--events-url", events],
            cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
        state = torch.load(fs.open(checkpoint, "rb"))
        from pipelines.common import build_classifier

        model = build_classifier("tiny", 4)
        model.load_state_dict(state)  # the trained classifier's exact keys and shapes
        assert set(state) == set(model.state_dict())
        (event_file,) = fs.ls(events, detail=False)
        assert event_file.rsplit("/", 1)[1].startswith("events.out.tfevents.")
        local = tmp_path / "events.out.tfevents.local"
        fs.get_file(event_file, str(local))
        from tensorflow.core.util import event_pb2

        parsed = [event_pb2.Event.FromString(r.numpy()) for r in tf.data.TFRecordDataset(str(local))]
        scalars = [(e.step, v.tag, v.simple_value) for e in parsed[1:] for v in e.summary.value]
        assert parsed[0].file_version == "brain.Event:2"
        assert [s for s, tag, _ in scalars if tag == "train/loss"] == [1, 2, 3, 4]
        assert [tag for _, tag, _ in scalars][-1] == "train/images_per_s"
    finally:
        backend.drop()
