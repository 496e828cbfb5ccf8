"""The Cassandra backend against the real server: round trips, resume, verify, label types and errors."""

from __future__ import annotations

import pytest
from backend_checks import cassandra_backend as backend
from backend_checks import (
    check_oversized_sample_names_the_sample,
    check_reingest_writes_nothing,
    check_resume_after_interrupted_ingest,
    check_verify_catches_changed_and_deleted,
)

from workbench.backends.registry import make_backend
from workbench.clients import cassandra_session
from workbench.data import SyntheticSource
from workbench.errors import WorkbenchError
from workbench.ingest import ingest, verify

pytestmark = pytest.mark.services

N = 40


def source(unique: str, n: int = N, **kw) -> SyntheticSource:
    return SyntheticSource(n, mean_kb=20, name=unique, **kw)


def columns(session, keyspace: str, table: str) -> dict[str, str]:
    rows = session.execute("SELECT column_name, type FROM system_schema.columns "
                           "WHERE keyspace_name = %s AND table_name = %s", (keyspace, table))
    return {r.column_name: r.type for r in rows}


def test_round_trip_byte_for_byte_with_metadata(stack, unique, keyspaces):
    src = source(unique)
    b = backend(stack, keyspaces, unique)
    summary = ingest(src, b, progress=False)
    assert summary.samples == N and summary.already_stored == 0
    assert summary.bytes == sum(len(s.data) for s in src)
    assert verify(src, b).ok

    expected = {s.id: s for s in src}
    stored = {st.id: st for st in b.scan()}
    assert stored.keys() == expected.keys()
    for sid, st in stored.items():
        assert (st.split, st.label, st.data) == ("train", expected[sid].label, expected[sid].data)
    assert b.stored_ids() == set(expected)

    with cassandra_session(stack) as session:
        assert columns(session, unique, "data_train") == {"id": "uuid", "label": "int", "data": "blob"}
        options = session.execute("SELECT compression FROM system_schema.tables "
                                  "WHERE keyspace_name = %s AND table_name = 'data_train'", (unique,)).one()
        assert options.compression.get("enabled") == "false"
        one = next(iter(src))
        row = session.execute(f"SELECT * FROM {unique}.metadata_train WHERE id = %s", (one.id,)).one()
    assert (row.label, row.original_name, row.original_split, row.dataset) == (one.label, one.name, "train", unique)
    assert (row.checksum, row.size, row.width, row.height) == (one.checksum, len(one.data), one.width, one.height)

    info = b.describe()
    assert info["keyspace"] == unique and info["tables"] == {"train": f"{unique}.data_train"}
    assert info["columns"] == {"id": "id", "label": "label", "data": "data"} and info["label_type"] == "int"


def test_reingest_writes_nothing(stack, unique, keyspaces):
    check_reingest_writes_nothing(source(unique), backend(stack, keyspaces, unique), N)


def test_resume_after_interrupted_ingest(stack, unique, keyspaces):
    # 15 of 15 stored: everything in flight was finished before the error went up
    check_resume_after_interrupted_ingest(source(unique), backend(stack, keyspaces, unique, workers=4), 15, 15, N)


def test_sample_without_metadata_row_is_rewritten(stack, unique, keyspaces):
    """Data is written before metadata: a sample whose metadata row is missing counts as not stored."""
    src = source(unique)
    b = backend(stack, keyspaces, unique)
    ingest(src, b, progress=False)
    victim = next(iter(src))
    with cassandra_session(stack) as session:
        session.execute(f"DELETE FROM {unique}.metadata_train WHERE id = %s", (victim.id,))
    assert victim.id not in b.stored_ids()
    again = ingest(src, b, progress=False)
    assert (again.samples, again.already_stored) == (1, N - 1)
    assert verify(src, b).ok


def test_verify_catches_changed_and_deleted_samples(stack, unique, keyspaces):
    def corrupt(changed, deleted) -> None:
        with cassandra_session(stack) as session:
            session.execute(f"UPDATE {unique}.data_train SET data = %s WHERE id = %s",
                            (changed.data[:-1] + bytes([changed.data[-1] ^ 0xFF]), changed.id))
            session.execute(f"DELETE FROM {unique}.data_train WHERE id = %s", (deleted.id,))

    check_verify_catches_changed_and_deleted(source(unique), backend(stack, keyspaces, unique), corrupt)


def test_blob_labels_segmentation_masks(stack, unique, keyspaces):
    src = source(unique, 20, kind="segmentation")
    b = backend(stack, keyspaces, unique, label_type="blob")
    ingest(src, b, progress=False)
    assert verify(src, b).ok
    labels = {st.id: st.label for st in b.scan()}
    assert labels == {s.id: s.label for s in src}
    assert all(isinstance(v, bytes) and v.startswith(b"\x89PNG") for v in labels.values())
    with cassandra_session(stack) as session:
        assert columns(session, unique, "data_train")["label"] == "blob"
        assert columns(session, unique, "metadata_train")["label"] == "blob"


def test_no_labels_and_custom_columns(stack, unique, keyspaces):
    src = source(unique, 20)
    b = backend(stack, keyspaces, unique, label_type="none", keyspace=f"{unique}_ks", id_col="img_id",
                data_col="payload", replication_factor=1)
    ingest(src, b, progress=False)
    assert verify(src, b).ok
    assert {st.label for st in b.scan()} == {None}
    with cassandra_session(stack) as session:
        assert columns(session, f"{unique}_ks", "data_train") == {"img_id": "uuid", "payload": "blob"}
    assert b.describe()["columns"] == {"id": "img_id", "label": None, "data": "payload"}


def test_label_type_mismatch_names_the_sample(stack, unique, keyspaces):
    src = source(unique, 5, kind="segmentation")
    b = backend(stack, keyspaces, unique)  # label_type int, but the labels are PNG masks
    first = next(iter(src))
    with pytest.raises(WorkbenchError, match=f"sample {first.name} has a bytes label but label_type is int"):
        ingest(src, b, progress=False)


def test_existing_table_with_other_label_type_is_refused(stack, unique, keyspaces):
    backend(stack, keyspaces, unique).prepare(["train"])
    blob = backend(stack, keyspaces, unique, label_type="blob")
    with pytest.raises(WorkbenchError, match=f"existing table {unique}.data_train: column 'label' has type int"):
        blob.prepare(["train"])


def test_failed_request_surfaces(stack, unique, keyspaces):
    """A request the server rejects mid-stream (table dropped under the writer) raises, naming a sample."""
    src = source(unique)
    b = backend(stack, keyspaces, unique, workers=2)
    b.prepare(["train"])

    def samples():
        for i, sample in enumerate(src):
            if i == 10:
                with cassandra_session(stack) as session:
                    session.execute(f"DROP TABLE {unique}.data_train")
            yield sample

    with pytest.raises(WorkbenchError, match=r"writing sample class_\d+/img_\d+\.jpg \(data row\) to Cassandra failed"):
        b.write(samples(), lambda n, size: None)


def test_unknown_keyspace_is_a_clear_error(stack, unique):
    b = make_backend("cassandra", stack, unique)
    with pytest.raises(WorkbenchError, match=f"keyspace '{unique}' does not exist: ingest"):
        b.stored_ids()
    with pytest.raises(WorkbenchError, match=f"keyspace '{unique}' does not exist"):
        list(b.scan())


@pytest.mark.parametrize(("options", "message"), [
    ({"keyspace": "Bad-Name"}, "invalid Cassandra keyspace 'Bad-Name'"),
    ({"data_col": "x y"}, "invalid Cassandra column name 'x y' \\(data_col\\)"),
    ({"label_col": "data"}, "columns must differ"),
])
def test_invalid_names_are_refused(stack, options, message):
    with pytest.raises(WorkbenchError, match=message):
        make_backend("cassandra", stack, "ds", **options)


def test_invalid_split_name_is_refused(stack, unique, keyspaces):
    with pytest.raises(WorkbenchError, match="invalid split name 'val-1'"):
        backend(stack, keyspaces, unique).prepare(["val-1"])


def test_oversized_sample_names_the_sample(stack, unique, keyspaces):
    check_oversized_sample_names_the_sample(source(unique, 3), backend(stack, keyspaces, unique, max_sample_bytes=1000),
                                            "cassandra")


def test_drop_removes_the_dataset_and_is_idempotent(stack, unique, keyspaces):
    src = source(unique, 5)
    b = backend(stack, keyspaces, unique)
    ingest(src, b, progress=False)
    b.drop()
    with pytest.raises(WorkbenchError, match="does not exist"):
        b.stored_ids()
    b.drop()  # nothing left: no error


def test_drop_in_a_shared_keyspace_keeps_other_tables(stack, unique, keyspaces):
    shared = f"{unique}_shared"
    src = source(unique, 5)
    b = backend(stack, keyspaces, unique, keyspace=shared)
    ingest(src, b, progress=False)
    with cassandra_session(stack) as session:
        session.execute(f"CREATE TABLE {shared}.other (k int PRIMARY KEY)")
        b.drop()
        tables = {r.table_name for r in session.execute(
            "SELECT table_name FROM system_schema.tables WHERE keyspace_name = %s", (shared,))}
    assert tables == {"other"}
