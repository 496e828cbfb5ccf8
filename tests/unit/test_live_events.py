"""Event files readers can follow while they are written (`workbench.checkpoints.live_events`), the follower that
mirrors them (`workbench.checkpoints.follow`), the output URL checks and the Keras checkpoint's progress record.

``memory://`` stands for an object store (a file is replaced whole, as on ``ignite://``); a local directory is
appended to. TensorFlow's own record reader parses what the follower mirrored."""

from __future__ import annotations

import io
import json
import zipfile

import fsspec
import pytest

from workbench.checkpoints.events import record
from workbench.checkpoints.files import check_url
from workbench.checkpoints.follow import EventFollower
from workbench.checkpoints.keras_archive import FORMAT, PROGRESS_MEMBER, read_progress
from workbench.checkpoints.live_events import LiveEventWriter
from workbench.errors import WorkbenchError


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def memory():
    fs = fsspec.filesystem("memory")
    root = f"/live-{id(fs)}-{len(fs.store)}"
    yield fs, root
    if fs.exists(root):
        fs.rm(root, recursive=True)


def _size(fs, url: str) -> int:
    return fs.size(url) if fs.exists(url) else 0


def test_events_become_visible_every_n_steps_not_only_at_close(memory):
    fs, root = memory
    writer = LiveEventWriter(f"memory://{root}/events", flush_steps=2, flush_seconds=0)
    url = writer.url
    assert not fs.exists(url)
    writer.scalars(1, {"loss": 1.0})
    assert not fs.exists(url)  # one step: not due yet
    writer.scalars(2, {"loss": 0.5})
    after_two = _size(fs, url)
    assert after_two > 0 and writer.flushes == 1
    writer.scalars(3, {"loss": 0.25})
    assert _size(fs, url) == after_two
    writer.close()
    assert _size(fs, url) > after_two and writer.flushes == 2
    with pytest.raises(WorkbenchError, match="is closed"):
        writer.scalars(4, {"loss": 0.1})


def test_events_flush_after_the_seconds_pass(memory):
    fs, root = memory
    clock = Clock()
    writer = LiveEventWriter(f"memory://{root}/events", flush_steps=0, flush_seconds=5, clock=clock)
    writer.scalars(1, {"loss": 1.0})
    clock.now = 4.9
    writer.scalars(2, {"loss": 1.0})
    assert not fs.exists(writer.url)
    clock.now = 5.0
    writer.scalars(3, {"loss": 1.0})
    assert fs.exists(writer.url)


def test_each_flush_rewrites_a_longer_prefix_of_the_final_file(memory):
    fs, root = memory
    writer = LiveEventWriter(f"memory://{root}/events", flush_steps=1, flush_seconds=0)
    versions = []
    for step in range(1, 5):
        writer.scalars(step, {"loss": float(step)}, wall_time=1.0)
        versions.append(fs.cat_file(writer.url))
    writer.close()
    final = fs.cat_file(writer.url)
    assert all(final.startswith(v) for v in versions) and len(set(map(len, versions))) == 4


def test_rotation_starts_a_new_file_and_loses_no_event(memory, tmp_path, tf):
    _, root = memory
    writer = LiveEventWriter(f"memory://{root}/events", flush_steps=0, flush_seconds=0, rotate_bytes=200)
    for step in range(1, 21):
        writer.scalars(step, {"train/loss": float(step)})
    writer.close()
    assert len(writer.files) > 2 and writer.files == sorted(writer.files)
    follower = EventFollower(f"memory://{root}/events", tmp_path / "tb")
    assert follower.poll() > 0
    steps = []
    for path in sorted((tmp_path / "tb").iterdir()):
        steps += [e.step for e in tf.compat.v1.train.summary_iterator(str(path)) if e.summary.value]
    assert steps == list(range(1, 21))


def test_a_local_directory_is_appended_to(tmp_path, tf):
    writer = LiveEventWriter(str(tmp_path / "events"), flush_steps=1, flush_seconds=0)
    assert writer.append
    sizes = []
    for step in (1, 2, 3):
        writer.scalars(step, {"train/loss": 0.5})
        sizes.append((tmp_path / "events" / writer.url.rsplit("/", 1)[-1]).stat().st_size)
    writer.close()
    assert sizes == sorted(sizes) and len(set(sizes)) == 3
    assert [e.step for e in tf.compat.v1.train.summary_iterator(writer.url) if e.summary.value] == [1, 2, 3]


def test_the_follower_appends_only_what_is_new_and_rewrites_a_replaced_file(memory, tmp_path):
    fs, root = memory
    follower = EventFollower(f"memory://{root}/run", tmp_path / "tb")
    assert follower.poll() == 0  # nothing written yet
    name = "events.out.tfevents.1.host.1"
    fs.pipe_file(f"{root}/run/sub/{name}", record(b"a"))
    fs.pipe_file(f"{root}/run/notes.txt", b"not an event file")
    assert follower.poll() == len(record(b"a"))
    local = tmp_path / "tb" / "sub" / name
    fs.pipe_file(f"{root}/run/sub/{name}", record(b"a") + record(b"bb"))
    assert follower.poll() == len(record(b"bb"))  # only the new bytes travel
    assert local.read_bytes() == record(b"a") + record(b"bb")
    assert follower.poll() == 0
    fs.pipe_file(f"{root}/run/sub/{name}", record(b"c"))  # shorter: a different file now
    follower.poll()
    assert local.read_bytes() == record(b"c")
    assert not (tmp_path / "tb" / "notes.txt").exists()


@pytest.mark.parametrize(("url", "file", "match"), [
    ("", True, "--x is empty"),
    ("ignite://", True, r"--x ignite://: an ignite:// path names a cache first"),
    ("ignite://RUNS", True, r"--x ignite://RUNS names Ignite cache RUNS but no file in it: use ignite://RUNS/"),
    ("ignite://bad name/x", False, r"--x ignite://bad name/x: invalid Ignite cache name"),
])
def test_bad_output_urls_are_one_line(url, file, match):
    with pytest.raises(WorkbenchError, match=match):
        check_url(url, "--x", file)


def test_good_output_urls_pass():
    assert check_url("ignite://RUNS", "--x", file=False) == "ignite://RUNS"
    assert check_url("ignite://RUNS/a/model.keras", "--x") == "ignite://RUNS/a/model.keras"
    assert check_url("/tmp/a", "--x") == "/tmp/a"


def _archive(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def test_checkpoint_progress_is_read_and_bad_archives_are_one_line():
    good = _archive({PROGRESS_MEMBER: json.dumps({"format": FORMAT, "step": 7, "epoch": 0}).encode()})
    assert read_progress(good, "u")["step"] == 7
    for data, match in [(b"not a zip", "u is not a Keras checkpoint"),
                        (_archive({"config.json": b"{}"}), "u is not a Keras checkpoint"),
                        (_archive({PROGRESS_MEMBER: b"[1]"}), "u holds no workbench progress record"),
                        (_archive({PROGRESS_MEMBER: json.dumps({"format": FORMAT, "step": "7"}).encode()}),
                         "u holds no workbench progress record")]:
        with pytest.raises(WorkbenchError, match=match):
            read_progress(data, "u")
