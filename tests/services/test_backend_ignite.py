"""The Ignite backend against the real server: binary objects and SQL tables, resume, verify and errors."""

from __future__ import annotations

import uuid
from collections import OrderedDict

import pytest
from backend_checks import DiesAfter as FailingAfter
from backend_checks import SourceDied as Interrupted

from workbench.backends.ignite import value_class
from workbench.backends.registry import make_backend
from workbench.clients import ignite_client
from workbench.data import SyntheticSource
from workbench.errors import WorkbenchError
from workbench.ingest import ingest, verify

pytestmark = pytest.mark.services

N = 40


@pytest.fixture
def cleanup(stack):
    """Backends a test creates: their caches (and SQL tables) are destroyed afterwards whatever happens."""
    made: list = []
    yield made
    for b in made:
        b.drop()


def backend(stack, cleanup, dataset: str, **options):
    b = make_backend("ignite", stack, dataset, **options)
    cleanup.append(b)
    return b


def source(unique: str, n: int = N, **kw) -> SyntheticSource:
    return SyntheticSource(n, mean_kb=20, name=unique, **kw)


def check_round_trip(src, b) -> None:
    report = verify(src, b)
    assert report.ok and report.found == len(src), report
    expected = {s.id: s for s in src}
    stored = {st.id: st for st in b.scan()}
    assert stored.keys() == expected.keys()
    for sid, st in stored.items():
        assert (st.split, st.label, st.data) == (expected[sid].split, expected[sid].label, expected[sid].data)


def test_binary_round_trip_byte_for_byte(stack, unique, cleanup):
    src = source(unique)
    b = backend(stack, cleanup, unique, batch_size=16, workers=3)
    summary = ingest(src, b, progress=False)
    assert summary.samples == N and summary.bytes == sum(len(s.data) for s in src)
    check_round_trip(src, b)
    assert b.stored_ids() == {s.id for s in src}

    one = next(iter(src))
    with ignite_client(stack) as client:
        names = client.get_cache_names()
        assert unique.upper() in names and f"{unique.upper()}_IDS" in names
        cache = client.get_cache(unique.upper())
        assert cache.get_size() == N
        obj = cache.get(str(one.id))
        assert type(obj).__name__ == "WorkbenchImage"
        assert (obj.id, obj.split, obj.label, obj.name, obj.checksum) == (
            str(one.id), "train", one.label, one.name, one.checksum)
        assert (obj.width, obj.height, obj.data) == (one.width, one.height, one.data)
        assert client.get_binary_type("WorkbenchImage")["type_exists"]

    info = b.describe()
    assert (info["cache"], info["mode"], info["partitions"], info["backups"]) == (unique.upper(), "binary", 1024, 0)
    assert set(info["fields"]) == {"id", "split", "label", "data", "width", "height", "name", "checksum"}


def test_reingest_writes_nothing(stack, unique, cleanup):
    src = source(unique)
    b = backend(stack, cleanup, unique)
    ingest(src, b, progress=False)
    again = ingest(src, b, progress=False)
    assert (again.samples, again.bytes, again.already_stored) == (0, 0, N)
    assert sum(1 for _ in b.scan()) == N


def test_resume_after_interrupted_ingest(stack, unique, cleanup):
    src = source(unique)
    b = backend(stack, cleanup, unique, batch_size=5, workers=2)
    with pytest.raises(Interrupted):
        ingest(FailingAfter(src, 17), b, progress=False)
    assert len(b.stored_ids()) == 15  # the 3 full batches; the 2 samples of the open batch were never sent

    resumed = ingest(src, b, progress=False)
    assert (resumed.already_stored, resumed.samples) == (15, N - 15)
    report = verify(src, b)
    assert report.ok and report.found == N


def test_verify_catches_changed_and_deleted_samples(stack, unique, cleanup):
    src = source(unique)
    b = backend(stack, cleanup, unique)
    ingest(src, b, progress=False)
    changed, deleted = list(src)[3], list(src)[7]
    with ignite_client(stack) as client:
        cache = client.get_cache(b.cache_name)
        obj = cache.get(str(changed.id))
        obj.data = obj.data[:-1] + bytes([obj.data[-1] ^ 0xFF])
        cache.put(str(changed.id), obj)
        cache.remove_key(str(deleted.id))
    report = verify(src, b)
    assert not report.ok
    assert (report.mismatched, report.missing, report.extra) == ([changed.name], [deleted.name], [])


def test_blob_labels_segmentation_masks(stack, unique, cleanup):
    src = source(unique, 20, kind="segmentation")
    b = backend(stack, cleanup, unique, label_type="blob")
    ingest(src, b, progress=False)
    check_round_trip(src, b)
    with ignite_client(stack) as client:
        obj = client.get_cache(b.cache_name).get(str(next(iter(src)).id))
    assert type(obj).__name__ == "WorkbenchImageBlob" and obj.label.startswith(b"\x89PNG")


def test_no_labels(stack, unique, cleanup):
    src = source(unique, 10)
    b = backend(stack, cleanup, unique, label_type="none", cache_name=f"IMAGES_{unique}")
    ingest(src, b, progress=False)
    assert verify(src, b).ok
    assert {st.label for st in b.scan()} == {None}


def test_sql_mode_is_queryable_and_a_cache(stack, unique, cleanup):
    src = source(unique)
    b = backend(stack, cleanup, unique, mode="sql", batch_size=16)
    summary = ingest(src, b, progress=False)
    assert summary.samples == N
    check_round_trip(src, b)
    again = ingest(src, b, progress=False)
    assert (again.samples, again.already_stored) == (0, N)

    one = next(iter(src))
    table = unique.upper()
    with ignite_client(stack) as client:
        with client.sql(f"SELECT COUNT(*) FROM {table}") as cursor:
            assert list(cursor) == [[N]]
        with client.sql(f"SELECT name, label, width, height, checksum, data FROM {table} WHERE id = ?",
                        query_args=[str(one.id)]) as cursor:
            assert list(cursor) == [[one.name, one.label, one.width, one.height, one.checksum, one.data]]
        assert f"SQL_PUBLIC_{table}" in client.get_cache_names()  # the article's name for an SQL table's cache
        assert client.get_cache(f"SQL_PUBLIC_{table}").get_size() == N
    assert b.describe()["table"] == f"PUBLIC.{table}"


def test_sql_mode_blob_labels_and_cache_name(stack, unique, cleanup):
    src = source(unique, 20, kind="segmentation")
    b = backend(stack, cleanup, unique, mode="sql", label_type="blob", cache_name=f"SEG_{unique}")
    ingest(src, b, progress=False)
    check_round_trip(src, b)
    with ignite_client(stack) as client:
        assert f"SEG_{unique}" in client.get_cache_names()


def test_sql_mode_verify_catches_deleted_and_changed(stack, unique, cleanup):
    src = source(unique, 20)
    b = backend(stack, cleanup, unique, mode="sql")
    ingest(src, b, progress=False)
    changed, deleted = list(src)[2], list(src)[5]
    with ignite_client(stack) as client:
        for query, args in ((f"UPDATE {b.table} SET data = ? WHERE id = ?", [b"not the image", str(changed.id)]),
                            (f"DELETE FROM {b.table} WHERE id = ?", [str(deleted.id)])):
            with client.sql(query, query_args=args):
                pass
    report = verify(src, b)
    assert (report.mismatched, report.missing) == ([changed.name], [deleted.name])
    resumed = ingest(src, b, progress=False)  # the deleted one is written again
    assert resumed.samples == 1


def test_unknown_cache_is_a_clear_error(stack, unique):
    for mode in ("binary", "sql"):
        b = make_backend("ignite", stack, unique, mode=mode)
        with pytest.raises(WorkbenchError, match=f"Ignite cache {b.cache_name} does not exist: ingest"):
            b.stored_ids()
        with pytest.raises(WorkbenchError, match=f"Ignite cache {b.cache_name} does not exist"):
            list(b.scan())


def test_object_without_data_field_names_the_key(stack, unique, cleanup):
    from pyignite import GenericObjectMeta
    from pyignite.datatypes import String

    class Other(metaclass=GenericObjectMeta, type_name="WorkbenchTestOther", schema=OrderedDict([("id", String)])):
        pass

    src = source(unique, 5)
    b = backend(stack, cleanup, unique)
    ingest(src, b, progress=False)
    key = str(uuid.uuid4())
    with ignite_client(stack) as client:
        client.get_cache(b.cache_name).put(key, Other(id=key))
    with pytest.raises(WorkbenchError, match=f"key '{key}' holds .*not an object with a byte\\[\\] 'data' field"):
        list(b.scan())


def test_partition_counts_without_a_template_and_existing_caches_of_another_count_are_refused(stack, unique,
                                                                                                 cleanup):
    with pytest.raises(WorkbenchError, match=r"cache templates \(1, 2, 4, .*32768\), not 1000: pick one"):
        backend(stack, cleanup, unique, partitions=1000)
    b = backend(stack, cleanup, unique, partitions=256)
    assert b.cache_name == f"WB_P256_B0_{unique.upper()}"
    b.prepare(["train"])  # the node's template: 256 partitions
    assert b.partitions_found == 256
    other = backend(stack, cleanup, unique, cache_name=b.cache_name)  # the default count, 1024, asked of it
    with pytest.raises(WorkbenchError, match=r"existing Ignite cache WB_P256_B0_.* has 256 partitions, not 1024"):
        other.prepare(["train"])
    with ignite_client(stack) as client:
        assert b.cache_name in client.get_cache_names()  # an existing cache is left as it was


def test_label_type_mismatch_names_the_sample(stack, unique, cleanup):
    src = source(unique, 5, kind="segmentation")
    b = backend(stack, cleanup, unique)
    first = next(iter(src))
    with pytest.raises(WorkbenchError, match=f"sample {first.name} has a bytes label but label_type is int"):
        ingest(src, b, progress=False)


def test_oversized_sample_names_the_sample(stack, unique, cleanup):
    src = source(unique, 3)
    b = backend(stack, cleanup, unique, max_sample_bytes=1000)
    first = next(iter(src))
    with pytest.raises(WorkbenchError, match=f"sample {first.name} is {len(first.data)} bytes, over the ignite"):
        ingest(src, b, progress=False)


def test_invalid_cache_name_is_refused(stack):
    with pytest.raises(WorkbenchError, match="invalid Ignite cache name 'a,b'"):
        make_backend("ignite", stack, "ds", cache_name="a,b")


def test_value_class_matches_label_type():
    assert value_class("int").type_name == "WorkbenchImage"
    assert value_class("blob").type_name == "WorkbenchImageBlob"


@pytest.mark.parametrize("mode", ["binary", "sql"])
def test_drop_removes_every_cache_and_is_idempotent(stack, unique, cleanup, mode):
    src = source(unique, 5)
    b = backend(stack, cleanup, unique, mode=mode)
    ingest(src, b, progress=False)
    b.drop()
    with ignite_client(stack) as client:
        names = set(client.get_cache_names())
    assert not names & {b.cache_name, b.ids_cache_name}
    with pytest.raises(WorkbenchError, match="does not exist"):
        b.stored_ids()
    b.drop()
