"""`Store.get_ranges` on the stack's MinIO: our extension's `S3RangeReader` (``native/src/ranges.rs``) against the
slices of the whole object, its failures as the store's one-line errors (never a hang), and the s3-shards loader
reading through it.
"""

from __future__ import annotations

import os
import random
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from heap_checks import glibc_only, in_a_thread_heap
from pydantic import SecretStr

from workbench.backends.registry import make_backend
from workbench.data import SyntheticSource
from workbench.errors import WorkbenchError
from workbench.ingest import ingest
from workbench.loaders import make_loader
from workbench.net.toxiproxy import Toxiproxy
from workbench.storage import S3Store, Store, WrongSize
from workbench.storage import s3_native as native_module

pytest.importorskip("workbench_native", reason="the extension is built by `make venv` (needs cargo)")
pytestmark = pytest.mark.services


@pytest.fixture(scope="module")
def objects(stack, scratch_bucket):
    """Objects of 0 B to 3 MB under odd key names (spaces, '%', '+', '#', '?', non-ASCII), with random ranges of
    each: in order, apart, some empty, some at the very start and end."""
    store = S3Store(stack, scratch_bucket, "ranges")
    rng = random.Random(7)
    written = {}
    for i, size in enumerate((0, 1, 511, 4096, 300_000, 3_000_000)):
        key = f"r/{i:02d} x%20+é#?.bin" if i % 2 else f"r/{i:02d}.bin"
        data = os.urandom(size)
        store.put(key, data)
        cuts = sorted(rng.randrange(size + 1) for _ in range(2 * min(size, 40)))
        ranges = [(cuts[j], cuts[j + 1] - cuts[j]) for j in range(0, len(cuts), 2)]
        written[key] = (data, [*ranges, (size, 0)] if ranges else [(0, size)])
    return store, written


@pytest.mark.parametrize("via_proxy", [False, True])
def test_ranges_equal_the_slices_of_the_whole_object(stack, objects, via_proxy):
    store, written = objects
    store = S3Store(stack, store.bucket, store.prefix, via_proxy=via_proxy)
    assert store._range_reader() is not None  # the native path, not the base class's slices
    for key, (data, ranges) in written.items():
        got = store.get_ranges(key, len(data), ranges)
        assert got == [data[a : a + n] for a, n in ranges] == Store.get_ranges(store, key, len(data), ranges)
        assert all(type(piece) is bytes for piece in got)


def test_a_missing_key_a_wrong_size_and_bad_ranges_are_told_apart(objects):
    store, written = objects
    key, (data, _) = next((k, v) for k, v in written.items() if len(v[0]) == 300_000)
    with pytest.raises(KeyError):
        store.get_ranges("r/none.bin", 10, [(0, 10)])
    for wrong in (len(data) - 1, len(data) + 1):
        with pytest.raises(WrongSize) as caught:
            store.get_ranges(key, wrong, [(0, 10)])
        assert caught.value.actual == len(data)
    for bad in ([(10, 5), (12, 1)], [(10, 5), (0, 1)], [(len(data) - 1, 2)]):
        with pytest.raises(ValueError, match="out of order, overlaps the one before or runs past"):
            store.get_ranges(key, len(data), bad)
    assert store.get_ranges(key, len(data), [(0, 3)]) == [data[:3]]  # the pooled connection is still good


def test_wrong_credentials_are_access_denied_in_one_line(stack, objects):
    store, written = objects
    wrong = stack.model_copy(update={"s3_secret_key": SecretStr("not-the-key-0123456789")})
    key, (data, ranges) = next(iter(written.items()))
    start = time.monotonic()
    with pytest.raises(WorkbenchError, match=r"access denied by S3 at .* \(bucket '.*', SignatureDoesNotMatch\)"):
        S3Store(wrong, store.bucket, store.prefix).get_ranges(key, len(data), ranges)
    assert time.monotonic() - start < stack.timeout_s


def test_a_closed_port_is_named_quickly(stack, objects):
    store, written = objects
    closed = stack.model_copy(update={"s3_port": 1, "timeout_s": 2.0})
    key, (data, ranges) = next(iter(written.items()))
    start = time.monotonic()
    with pytest.raises(WorkbenchError, match=r"cannot reach S3 at http://127\.0\.0\.1:1 .*ConnectionRefused") as caught:
        S3Store(closed, store.bucket, store.prefix).get_ranges(key, len(data), ranges)
    assert isinstance(caught.value.__cause__, ConnectionError)  # transient: the retry policy reads it again
    assert time.monotonic() - start < 5


def test_a_stalled_body_ends_at_the_read_timeout(stack, objects):
    store, written = objects
    key, (data, ranges) = next((k, v) for k, v in written.items() if len(v[0]) == 3_000_000)
    proxy = Toxiproxy(stack)
    quick = stack.model_copy(update={"timeout_s": 2.0})
    proxied = S3Store(quick, store.bucket, store.prefix, via_proxy=True)
    name = proxy.add_toxic("s3", "timeout", {"timeout": 0}, "downstream", name=f"stall-{uuid.uuid4().hex[:6]}")
    try:
        start = time.monotonic()
        with pytest.raises(WorkbenchError, match=r"cannot reach S3 at .* while reading .*: TimedOut") as caught:
            proxied.get_ranges(key, len(data), ranges)
        assert isinstance(caught.value.__cause__, TimeoutError)
        assert time.monotonic() - start < 2.0 + 5
    finally:
        proxy.remove_toxic("s3", name)


# ------------------------------------------------------------------------------ the loader on it


@pytest.fixture(scope="module")
def shards(stack, scratch_bucket):
    source = SyntheticSource(60, mean_kb=20, name=f"s3r-{uuid.uuid4().hex[:6]}")
    backend = make_backend("s3-shards", stack, source.name, bucket=scratch_bucket, maxcount=8)
    assert ingest(source, backend, progress=False).samples == len(source)
    return source, {str(s.id): (s.label, s.data) for s in source}


def _no_whole_shard(self, key):
    raise AssertionError(f"{key} was read whole: the loader must read its pieces")


def test_the_shards_loader_reads_every_sample_once_by_ranges(stack, scratch_bucket, shards, monkeypatch):
    source, expected = shards
    monkeypatch.setattr(native_module.NativeS3Store, "get_view", _no_whole_shard)
    loader = make_loader("s3-shards", stack, dataset=source.name, bucket=scratch_bucket, shuffle=True, seed=3)
    items = list(loader)
    assert Counter(item.key for item in items) == Counter(list(expected))
    assert all((item.label, item.data) == expected[item.key] for item in items)
    loader.close()


def test_the_shards_loader_reads_the_same_without_the_extension(stack, scratch_bucket, shards, monkeypatch):
    source, _ = shards
    with_native = make_loader("s3-shards", stack, dataset=source.name, bucket=scratch_bucket, shuffle=False)
    first = [(i.key, i.label, i.data) for i in with_native]
    monkeypatch.setattr(native_module, "load_extension", lambda slower: None)
    without = make_loader("s3-shards", stack, dataset=source.name, bucket=scratch_bucket, shuffle=False)
    assert [(i.key, i.label, i.data) for i in without] == first
    assert without.store._range_reader() is None


def test_a_body_cut_short_is_a_transient_failure_not_a_short_object(stack, objects):
    """A connection that closes mid-body (toxiproxy `limit_data`) is retried by the loaders' policy (a
    ConnectionError cause), never reported as a truncated shard (WrongSize), which only a short object is."""
    store, written = objects
    key, (data, ranges) = next((k, v) for k, v in written.items() if len(v[0]) == 3_000_000)
    proxy = Toxiproxy(stack)
    proxied = S3Store(stack, store.bucket, store.prefix, via_proxy=True)
    name = proxy.add_toxic("s3", "limit_data", {"bytes": 200_000}, "downstream", name=f"cut-{uuid.uuid4().hex[:6]}")
    try:
        with pytest.raises(WorkbenchError, match=r"while reading .*UnexpectedEof") as caught:
            proxied.get_ranges(key, len(data), ranges)
        assert isinstance(caught.value.__cause__, ConnectionError)
    finally:
        proxy.remove_toxic("s3", name)
    assert proxied.get_ranges(key, len(data), ranges) == [data[a : a + n] for a, n in ranges]


# ------------------------------------------------------------------------------ reserved pieces


def test_reserved_pieces_are_filled_once_and_kept_for_a_retry_when_a_read_fails(stack, objects):
    store, written = objects
    key, (data, ranges) = next((k, v) for k, v in written.items() if len(v[0]) == 300_000)
    reserved = store.reserve_ranges(ranges)
    with pytest.raises(KeyError):
        store.get_ranges("r/none.bin", len(data), ranges, reserved)
    with pytest.raises(WrongSize):
        store.get_ranges(key, len(data) + 1, ranges, reserved)
    assert store.get_ranges(key, len(data), ranges, reserved) == [data[a : a + n] for a, n in ranges]
    with pytest.raises(ValueError, match="reserved: was read into already; reserve the ranges' lengths anew"):
        store.get_ranges(key, len(data), ranges, reserved)
    with pytest.raises(ValueError, match="reserved: does not match the ranges"):
        store.get_ranges(key, len(data), ranges[:-1], store.reserve_ranges(ranges))


@glibc_only
def test_the_shards_loader_keeps_its_pieces_in_the_consuming_threads_heap(stack, scratch_bucket, shards):
    """Its shard GETs run on a pool of threads, but each shard's pieces are reserved by the thread that submits
    them (`reserve_items`), here the main one: no piece is in a pool thread's heap (glibc keeps one per thread
    that allocates, each with its own high-water mark)."""
    source, expected = shards
    loader = make_loader("s3-shards", stack, dataset=source.name, bucket=scratch_bucket, parallel_shards=4)
    items = list(loader)
    loader.close()
    assert Counter(item.key for item in items) == Counter(list(expected))
    big = [item.data for item in items if len(item.data) > 512]
    assert len(big) > len(items) // 2 and not any(in_a_thread_heap(data) for data in big)
    reference = S3Store(stack, scratch_bucket, loader.store.prefix)  # the same read on a pool thread, unreserved
    info = loader.shards()[0]
    with ThreadPoolExecutor(1) as pool:
        pieces = pool.submit(reference.get_ranges, f"{loader.config.split}/{info.name}", info.bytes,
                             info.members.pieces()).result()
    assert any(in_a_thread_heap(piece) for piece in pieces if len(piece) > 512)
