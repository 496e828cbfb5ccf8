"""`workbench_native.S3Fetcher` (storage/s3_batch.py) and the s3-objects loader on it, against the stack's MinIO.

The fetcher's GETs must return exactly what the obstore store reads (bytes and user metadata), its failures
must come back per request (never as a hang), and the loader must read through it: every sample once, byte
for byte, without starting a thread per GET, and with the store's one-line errors when a GET fails.
"""

from __future__ import annotations

import os
import time
import uuid
from collections import Counter

import pytest
from pydantic import SecretStr

from workbench.backends.registry import make_backend
from workbench.concurrency import in_flight_collected
from workbench.data import SyntheticSource
from workbench.errors import WorkbenchError
from workbench.ingest import ingest
from workbench.loaders import make_loader
from workbench.storage import S3Store
from workbench.storage import s3_batch as batch_module
from workbench.storage.s3_batch import GetFailed, S3Batch, s3_batch

pytest.importorskip("workbench_native", reason="the extension is built by `make venv` (needs cargo)")
pytestmark = pytest.mark.services

N = 120


@pytest.fixture(scope="module")
def bucket(scratch_bucket):
    return scratch_bucket


@pytest.fixture(scope="module")
def objects(stack, bucket):
    """40 objects of 0 B to 300 KB with user metadata and odd key names (spaces, '%', '+', non-ASCII: the same
    object for both clients, none percent-encoded twice), written through the obstore store."""
    store = S3Store(stack, bucket, "raw")
    written = {}
    for i in range(40):
        data, metadata = os.urandom((i * 7919) % 300_000), {"id": f"sample-{i}", "label": str(i % 10)}
        key = f"o/{i:03d} x%20+é#?.bin" if i % 2 else f"o/{i:03d}.bin"
        store.put(key, data, metadata)
        written[key] = (data, metadata)
    return store, written


def test_fetched_bodies_and_metadata_equal_what_the_store_reads(stack, objects):
    store, written = objects
    batch = s3_batch(stack, store.bucket, via_proxy=False, connections=8)
    assert isinstance(batch, S3Batch)
    got = dict(in_flight_collected(sorted(written), batch, 8, ordered=False, request=store.full))
    assert got.keys() == written.keys()
    for key, (data, metadata) in written.items():
        assert got[key] == (data, metadata) == store.get(key)


def test_in_order_through_toxiproxy(stack, objects):
    store, written = objects
    batch = s3_batch(stack, store.bucket, via_proxy=True, connections=8)
    keys = sorted(written)
    assert [(key, body) for key, (body, _) in in_flight_collected(keys, batch, 16, request=store.full)] == \
        [(key, written[key][0]) for key in keys]


def test_a_missing_key_fails_alone_as_not_found(stack, objects):
    store, written = objects
    batch = s3_batch(stack, store.bucket, via_proxy=False, connections=4)
    keys = [*sorted(written)[:3], "o/none"]
    got = dict(in_flight_collected(keys, batch, 4, request=store.full))
    assert isinstance(got["o/none"], GetFailed) and got["o/none"].kind == "not_found"
    assert all(got[key][0] == written[key][0] for key in keys[:3])


def test_wrong_credentials_fail_as_denied_within_the_timeout(stack, objects):
    store, written = objects
    wrong = stack.model_copy(update={"s3_secret_key": SecretStr("not-the-key-0123456789")})
    batch = s3_batch(wrong, store.bucket, via_proxy=False, connections=4)
    start = time.monotonic()
    (_, got), = in_flight_collected([sorted(written)[0]], batch, 1, request=store.full)
    assert isinstance(got, GetFailed) and got.kind == "denied" and "403" in got.text
    assert time.monotonic() - start < stack.timeout_s


def test_a_closed_port_fails_per_request_not_by_hanging(stack, objects):
    store, written = objects
    closed = stack.model_copy(update={"s3_port": 1, "timeout_s": 2.0})
    batch = s3_batch(closed, store.bucket, via_proxy=False, connections=4)
    start = time.monotonic()
    got = [result for _, result in in_flight_collected(sorted(written)[:4], batch, 4, request=store.full)]
    assert all(isinstance(r, GetFailed) and r.kind == "other" for r in got)
    assert "Connection refused" in got[0].text or "ConnectionRefused" in got[0].text
    assert time.monotonic() - start < 4 * 2.0 + 5


def test_closing_early_cancels_the_rest(stack, objects):
    store, written = objects
    batch = s3_batch(stack, store.bucket, via_proxy=False, connections=4)
    results = in_flight_collected(sorted(written), batch, 8, request=store.full)
    next(results)
    results.close()
    assert batch._fetcher.outstanding() == 0
    assert dict(in_flight_collected(sorted(written)[:2], batch, 2, request=store.full)).keys() == \
        set(sorted(written)[:2])  # still usable afterwards


# ------------------------------------------------------------------------------ the loader on it


@pytest.fixture(scope="module")
def dataset(stack, bucket):
    source = SyntheticSource(N, mean_kb=20, name=f"s3b-{uuid.uuid4().hex[:6]}")
    backend = make_backend("s3-objects", stack, source.name, bucket=bucket, workers=4)
    assert ingest(source, backend, progress=False).samples == N
    expected = {str(s.id): (s.label, s.data) for s in source}
    return source, expected


@pytest.mark.parametrize("ordered", [True, False])
def test_the_loader_reads_every_sample_once_through_the_fetcher(stack, bucket, dataset, ordered):
    source, expected = dataset
    loader = make_loader("s3-objects", stack, dataset=source.name, bucket=bucket, concurrency=16, ordered=ordered,
                         shuffle=True)
    items = list(loader)
    assert Counter(item.key for item in items) == Counter(list(expected))
    assert all((item.label, item.data) == expected[item.key] for item in items)
    assert isinstance(loader._batch.get(), S3Batch)
    assert loader._pool._executor is None  # no thread per GET was started
    loader.close()


def test_the_loader_reads_the_same_without_the_extension(stack, bucket, dataset, monkeypatch):
    source, _ = dataset
    with_native = make_loader("s3-objects", stack, dataset=source.name, bucket=bucket, concurrency=8)
    first = [(i.key, i.label, i.data) for i in with_native]
    monkeypatch.setattr(batch_module, "load_extension", lambda slower: None)
    without = make_loader("s3-objects", stack, dataset=source.name, bucket=bucket, concurrency=8)
    assert [(i.key, i.label, i.data) for i in without] == first
    assert without._batch.get() is None and without._pool._executor is not None


def test_a_failed_get_is_read_again_through_the_store_with_its_one_line_error(stack, bucket, dataset):
    source, _ = dataset
    loader = make_loader("s3-objects", stack, dataset=source.name, bucket=bucket, concurrency=8, retries=0)
    rel = loader.entries()[5][0]
    store = S3Store(stack, bucket, loader.store.prefix)
    key = f"{loader.config.split}/{rel}"
    saved = store.get(key)
    store.delete([key])
    try:
        with pytest.raises(WorkbenchError, match=rf"{rel.split('/')[-1]} is listed in the manifest but missing: "
                                                 "re-run the ingest"):
            list(loader)
    finally:
        store.put(key, *saved)


def _batch_in_child(lazy, results) -> None:
    try:
        results.put(("ok", lazy.get()))
    except BaseException as exc:  # reported to the parent
        results.put(("failed", repr(exc)))


def test_a_forked_child_never_gets_its_parents_fetcher(stack, objects):
    """A fetcher a fork copied has none of its threads: a GET through it would never finish. A child forked after
    a fetcher ran gets none (its loader reads through boto3, as the obstore store does there); fails when
    `LazyS3Batch` hands the child its parent's."""
    import multiprocessing

    from workbench.storage.s3_batch import LazyS3Batch

    store, written = objects
    key = sorted(written)[3]
    lazy = LazyS3Batch(stack, store.bucket, False, 4)
    assert dict(in_flight_collected([key], lazy.get(), 1, request=store.full))[key][0] == written[key][0]
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    child = context.Process(target=_batch_in_child, args=(lazy, results))
    child.start()
    assert results.get(timeout=30) == ("ok", None)
    child.join(10)

