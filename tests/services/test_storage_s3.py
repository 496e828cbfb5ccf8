"""The `Store` contract of the S3 store (obstore data path, boto3 for buckets) against the stack's real MinIO.

Every test works in a bucket of this module (emptied and deleted at the end). Bad input: wrong
credentials, a closed port and a missing bucket each end in one line naming what to fix, within the timeout.
"""

from __future__ import annotations

import time
import uuid

import pytest
from pydantic import SecretStr

from workbench.errors import WorkbenchError
from workbench.storage import BotoS3Store, S3Store
from workbench.storage.s3 import MULTIPART_THRESHOLD
from workbench.storage.s3_native import NativeS3Store

pytestmark = pytest.mark.services


@pytest.fixture(scope="module")
def bucket(scratch_bucket):
    return scratch_bucket


@pytest.fixture
def store(stack, bucket):
    return S3Store(stack, bucket, f"t-{uuid.uuid4().hex[:8]}")


def test_the_s3_store_is_the_native_one(store):
    """S3Store's data path is obstore's: its put makes the obstore client, and obstore reads what it wrote."""
    import obstore

    assert isinstance(store, NativeS3Store) and store._native is None  # made on first use
    store.put("native.bin", b"through obstore")
    assert store._native is not None and store.native_reads
    assert bytes(obstore.get(store.native, store.full("native.bin")).bytes()) == b"through obstore"


def test_put_get_head_with_metadata_and_odd_key_names(stack, store):
    key = "a dir/img 0+1%é.jpg"
    store.put(key, b"hello world", {"label": "7"})
    assert store.get(key) == (b"hello world", {"label": "7"})
    info = store.head(key)
    assert info.size == 11 and info.etag
    # boto3 sees the same object under the same key: both clients name keys alike
    assert BotoS3Store(stack, store.bucket, store.prefix).get(key) == (b"hello world", {"label": "7"})
    store.put(key, b"replaced")
    assert store.get(key) == (b"replaced", {})


def test_get_range_and_the_etag_check(store):
    store.put("r", bytes(range(200)))
    info = store.head("r")
    assert store.get_range("r", 10, 20) == bytes(range(10, 20))
    assert store.get_range("r", 150, 200, info.etag) == bytes(range(150, 200))
    store.put("r", bytes(200))  # replaced: the old etag must be refused
    with pytest.raises(WorkbenchError, match="changed"):
        store.get_range("r", 0, 10, info.etag)
    with pytest.raises(WorkbenchError, match="shorter than expected"):
        store.get_range("r", 100, 300)


def test_list_under_a_folder_and_delete(store):
    for key in ("x/1", "x/2", "xy/3", "z"):
        store.put(key, key.encode())
    assert sorted(store.list()) == [("x/1", 3), ("x/2", 3), ("xy/3", 4), ("z", 1)]
    assert sorted(store.list("x")) == [("x/1", 3), ("x/2", 3)]  # a folder, not a string prefix
    store.delete(["x/1", "z", "never-there"])
    assert sorted(k for k, _ in store.list()) == ["x/2", "xy/3"]
    store.delete([])


def test_a_missing_key_is_a_keyerror(store):
    for call in (lambda: store.get("nope"), lambda: store.head("nope"), lambda: store.get_range("nope", 0, 1)):
        with pytest.raises(KeyError):
            call()
    assert store.get_or_none("nope") is None


def test_a_large_put_goes_in_parts_and_reads_back(store):
    data = bytes(range(256)) * ((MULTIPART_THRESHOLD * 2 + 12345) // 256)
    store.put("big", data, {"k": "v"})
    info = store.head("big")
    assert info.size == len(data) and "-" in (info.etag or "")  # a multipart etag ends in -<parts>
    assert store.get("big") == (data, {"k": "v"})
    assert store.get_range("big", MULTIPART_THRESHOLD - 5, MULTIPART_THRESHOLD + 5, info.etag) == \
        data[MULTIPART_THRESHOLD - 5:MULTIPART_THRESHOLD + 5]


def test_multipart_complete_joins_parts_in_order(store):
    part = 5 * 2**20
    upload = store.multipart("mp")
    tags = [(2, upload.put_part(2, b"b" * 10)), (1, upload.put_part(1, b"a" * part))]  # out of order
    with pytest.raises(KeyError):
        store.head("mp")  # nothing visible before complete
    upload.complete(tags)
    assert store.get("mp")[0] == b"a" * part + b"b" * 10


def test_multipart_abort_leaves_the_old_object(store):
    store.put("keep", b"old")
    upload = store.multipart("keep")
    upload.put_part(1, b"new" * 10)
    upload.abort()
    assert store.get("keep")[0] == b"old"
    assert not list(store.client.list_multipart_uploads(Bucket=store.bucket, Prefix=store.full("keep"))
                    .get("Uploads", []))


def _fails_in_one_line(call, pattern: str, within_s: float) -> WorkbenchError:
    start = time.monotonic()
    with pytest.raises(WorkbenchError, match=pattern) as caught:
        call()
    assert time.monotonic() - start < within_s
    assert "\n" not in str(caught.value)
    return caught.value


@pytest.mark.parametrize("what", ["secret", "access"])
def test_wrong_credentials_say_which_variables_to_check(stack, bucket, what):
    field = "s3_secret_key" if what == "secret" else "s3_access_key"
    wrong = S3Store(stack.model_copy(update={field: SecretStr("not-the-key-0123456789")}), bucket)
    for call in (lambda: wrong.get("x"), lambda: wrong.put("x", b"1"), lambda: list(wrong.list())):
        _fails_in_one_line(call, r"access denied .*WORKBENCH_S3_ACCESS_KEY/WORKBENCH_S3_SECRET_KEY",
                           stack.timeout_s)


def test_an_unreachable_port_says_is_the_stack_up_within_the_timeout(stack, bucket):
    closed = S3Store(stack.model_copy(update={"s3_port": 1, "timeout_s": 3.0}), bucket)
    error = _fails_in_one_line(lambda: closed.get("x"), r"cannot reach S3 at http://127\.0\.0\.1:1 .*stack up",
                               3.0 * 2)
    from workbench.loaders.retry import is_transient
    assert is_transient(error)  # a dead path is retried by the loaders' policies; a wrong key is not


def test_a_missing_bucket_says_ingest_first(stack):
    missing = S3Store(stack, f"wbt-none-{uuid.uuid4().hex[:8]}")
    for call in (lambda: missing.get("x"), lambda: list(missing.list())):
        _fails_in_one_line(call, r"does not exist .*ingest first", stack.timeout_s)


def test_a_store_over_a_users_boto3_client_uses_that_client(stack, bucket):
    from workbench.storage import s3_client

    store = S3Store.from_client(s3_client(stack), bucket, "from-client")
    store.put("k", b"v")
    assert store.get("k")[0] == b"v" and list(store.list()) == [("k", 1)]
    assert store._native is None  # the native client was never built
    store.delete(["k"])


def test_a_process_forked_after_obstore_ran_reads_through_boto3(store):
    """obstore's runtime does not survive fork (a request would hang): the child must not use it."""
    import multiprocessing

    store.put("f", b"forked")
    assert store.get("f")[0] == b"forked"  # the parent's client exists before the fork
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe()
    process = ctx.Process(target=lambda: child.send(store.get("f")[0]))  # fork: nothing is pickled
    process.start()
    assert parent.poll(30), "the forked child hung on obstore's runtime"
    assert parent.recv() == b"forked"
    process.join(10)
    assert store.get("f")[0] == b"forked" and not store._on_boto  # the parent keeps the native client
