"""Keras training writes checkpoints and TensorBoard events to ``ignite://`` (the article's IGFS scenarios).

* While `pipelines.train_keras` trains, a reader in ANOTHER process (our follower mirroring the run's
  ``ignite://`` event directory into a local one, read by TensorFlow's ``summary_iterator``) sees step N's
  loss: the training blocks at step N until the reader says so (or gives up), so the test fails when events
  appear only when the writer closes.
* A checkpoint written to ``ignite://`` reads back as what was trained (weights allclose, optimizer step),
  and ``resume_from`` continues from its step: the resumed run starts from those weights and trains only the
  remaining steps, whose events carry the continued step numbers.
* Bad input (an ignite:// URL without a cache or file, a resume URL without a checkpoint, nothing left to
  train) is one line.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # pipelines/ is a folder of scripts beside the package
    sys.path.insert(0, str(ROOT))

from workbench.backends import make_backend  # noqa: E402
from workbench.clients import ignite_client  # noqa: E402
from workbench.data import parse_source  # noqa: E402
from workbench.errors import WorkbenchError  # noqa: E402
from workbench.ingest import ingest  # noqa: E402
from workbench.storage.ignite_chunks import chunk_cache_of  # noqa: E402

pytestmark = [pytest.mark.services, pytest.mark.timeout(900)]

RECIPE = {"model": "tiny", "size": 32, "num_classes": 10, "batch_size": 8, "lr": 0.01, "ceiling": False,
          "threads": 2}
SEEN_AT = 3  # the step the other process must see while the run goes on
READER_TIMEOUT_S = 300  # the reader imports TensorFlow on a loaded 2-core machine first

READER = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    from workbench.checkpoints.follow import EventFollower
    from workbench.tf_import import tensorflow
    tf = tensorflow()
    source, target, step, marker = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
    follower = EventFollower(source, target)
    while True:
        follower.poll()
        for path in sorted(target.rglob("*tfevents*")):
            for e in tf.compat.v1.train.summary_iterator(str(path)):
                for v in e.summary.value:
                    if v.tag == "train/loss" and e.step == step:
                        marker.write_text(json.dumps({"step": e.step, "loss": v.simple_value, "file": path.name}))
                        sys.exit(0)
        time.sleep(0.2)
""")


@pytest.fixture(scope="module")
def dataset(stack):
    """40 synthetic images in the stack's Ignite (IgniteDataset's cache); dropped afterwards."""
    import uuid

    name = f"kio_{uuid.uuid4().hex[:8]}"
    backend = make_backend("ignite", stack, name)
    ingest(parse_source("synthetic:40"), backend, progress=False)
    yield name
    backend.drop()


@pytest.fixture
def runs(stack, unique):
    """A cache of the test's own for the run's files (ignite://RUNS...), destroyed afterwards."""
    name = f"RUNS_{unique.upper()}"
    yield name
    with ignite_client(stack) as client:
        for cache in (name, chunk_cache_of(name)):
            if cache in client.get_cache_names():
                client.get_cache(cache).destroy()


def _train(stack, dataset: str, **options):
    from pipelines.train_keras import train

    return train("ignite-dataset", dataset, stack, **{**RECIPE, **options})


def _events(stack, url: str) -> list[tuple[int, str, float]]:
    """(step, tag, value) of an ignite:// event file, parsed by TensorFlow's own Event reader."""
    from tensorflow.core.util import event_pb2

    from workbench.checkpoints.files import open_url

    with open_url(url, "rb", stack) as f:
        data = f.read()
    path = Path(f"/tmp/{url.rsplit('/', 1)[-1]}.{time.monotonic_ns()}")
    path.write_bytes(data)
    try:
        from workbench.tf_import import tensorflow
        tf = tensorflow()

        events = [event_pb2.Event.FromString(r.numpy()) for r in tf.data.TFRecordDataset(str(path))]
    finally:
        path.unlink()
    return [(e.step, v.tag, v.simple_value) for e in events for v in e.summary.value]


def _callback(on_batch=None, on_begin=None, on_end=None):
    import keras

    class Hook(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            if on_begin:
                on_begin(self.model)

        def on_train_batch_end(self, batch, logs=None):
            if on_batch:
                on_batch(self.model, batch)

        def on_train_end(self, logs=None):
            if on_end:
                on_end(self.model)

    return Hook()


@pytest.mark.slow
def test_another_process_follows_the_events_while_training(stack, dataset, runs, tmp_path, tf):
    from workbench.checkpoints.follow import EventFollower

    events_url = f"ignite://{runs}/run1/events"
    assert EventFollower(events_url, tmp_path / "early", stack).poll() == 0  # no cache yet: nothing to mirror
    marker = tmp_path / "seen.json"
    reader = subprocess.Popen([sys.executable, "-c", READER, events_url, str(tmp_path / "tb"), str(SEEN_AT),
                               str(marker)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    waited: dict[str, float | bool] = {}

    def block_until_seen(model, batch):
        if batch + 1 != SEEN_AT:
            return
        started = time.monotonic()
        while not marker.exists() and reader.poll() is None and time.monotonic() - started < READER_TIMEOUT_S:
            time.sleep(0.2)
        waited.update(seen=marker.exists(), seconds=time.monotonic() - started)

    try:
        row = _train(stack, dataset, steps=6, events_url=events_url, events_flush_steps=1, events_flush_seconds=0,
                     callbacks=[_callback(on_batch=block_until_seen)])
    finally:
        if reader.poll() is None:
            reader.kill()
        _, stderr = reader.communicate(timeout=60)
    assert waited.get("seen"), f"the reader saw no step {SEEN_AT} while training ({waited}): {stderr[-2000:]}"
    seen = json.loads(marker.read_text())
    [url] = row["events_files"]
    final = _events(stack, url)
    losses = {step: value for step, tag, value in final if tag == "train/loss"}
    assert sorted(losses) == list(range(1, 7))
    assert seen["file"] == url.rsplit("/", 1)[-1] and seen["loss"] == pytest.approx(losses[SEEN_AT])
    assert [(s, t) for s, t, _ in final if t == "train/images_per_s"] == [(6, "train/images_per_s")]


@pytest.mark.slow
def test_checkpoint_reads_back_and_resuming_continues_from_its_step(stack, dataset, runs, tf):
    from workbench.checkpoints.keras_archive import load_checkpoint

    first_url, second_url = f"ignite://{runs}/run2/first.keras", f"ignite://{runs}/run2/second.keras"
    trained: dict = {}
    _train(stack, dataset, steps=4, checkpoint_url=first_url,
           callbacks=[_callback(on_end=lambda m: trained.update(weights=m.get_weights()))])
    model, progress = load_checkpoint(first_url, stack)
    assert (progress["step"], progress["epoch"], progress["model"], progress["batch_size"]) == (4, 1, "tiny", 8)
    assert int(model.optimizer.iterations.numpy()) == 4
    saved = model.get_weights()
    assert len(saved) == len(trained["weights"]) > 0
    assert all(np.allclose(a, b) for a, b in zip(saved, trained["weights"], strict=True))

    with pytest.raises(WorkbenchError, match=r"is at step 4, so --steps 4 leaves nothing to train: pass --steps "
                                             r"greater than 4"):
        _train(stack, dataset, steps=4, resume_from=first_url)

    resumed: dict = {"batches": 0}

    def begin(m):
        resumed.update(weights=m.get_weights(), iterations=int(m.optimizer.iterations.numpy()))

    def batch(m, b):
        resumed["batches"] += 1

    row = _train(stack, dataset, steps=7, resume_from=first_url, checkpoint_url=second_url,
                 events_url=f"ignite://{runs}/run2/events", model=None, size=None, batch_size=None, num_classes=None,
                 callbacks=[_callback(on_begin=begin, on_batch=batch)])
    assert all(np.allclose(a, b) for a, b in zip(resumed["weights"], saved, strict=True))
    assert (resumed["iterations"], resumed["batches"], row["start_step"]) == (4, 3, 4)
    assert sorted({s for s, t, _ in _events(stack, row["events_files"][0]) if t == "train/loss"}) == [5, 6, 7]
    model, progress = load_checkpoint(second_url, stack)
    assert progress["step"] == 7 and int(model.optimizer.iterations.numpy()) == 7
    assert not all(np.allclose(a, b) for a, b in zip(model.get_weights(), saved, strict=True))  # it trained on


@pytest.mark.parametrize(("options", "match"), [
    ({"checkpoint_url": "ignite://"}, r"--checkpoint-url ignite://: an ignite:// path names a cache first"),
    ({"checkpoint_url": "ignite://RUNS"}, r"--checkpoint-url ignite://RUNS names Ignite cache RUNS but no file"),
    ({"resume_from": "ignite:///model.keras"}, r"--resume-from ignite:///model.keras names Ignite cache model.keras "
                                               r"but no file in it: use ignite://model.keras/path/to/file"),
    ({"events_url": "ignite://"}, r"--events-url ignite://: an ignite:// path names a cache first"),
])
def test_bad_urls_are_one_line_before_training(stack, options, match):
    with pytest.raises(WorkbenchError, match=match):
        _train(stack, "no-such-dataset", steps=2, **options)


def test_resume_without_a_checkpoint_is_one_line(stack, dataset, runs, tf):
    from workbench.checkpoints.files import open_url

    missing = f"ignite://{runs}/nothing/model.keras"
    with pytest.raises(WorkbenchError, match=rf"no checkpoint at {missing}: resume from a URL that --checkpoint-url"):
        _train(stack, dataset, steps=2, resume_from=missing)
    other = f"ignite://{runs}/other/notes.txt"
    with open_url(other, "wb", stack) as f:
        f.write(b"not a checkpoint")
    with pytest.raises(WorkbenchError, match=rf"{other} is not a Keras checkpoint written by --checkpoint-url"):
        _train(stack, dataset, steps=2, resume_from=other)
