"""Cassandra, laid out as cassandra-dali-plugin expects: blobs in ``data_<split>``, the rest in ``metadata_<split>``.

One keyspace per dataset (default: its storage name). Per split two tables keyed by the sample's uuid:

* ``data_<split>(id uuid PRIMARY KEY, label int|blob, data blob)``, uncompressed (JPEGs do not shrink,
  and DALI reads these rows during training: decompression would only cost CPU);
* ``metadata_<split>(id uuid PRIMARY KEY, label, original_name, original_split, dataset, checksum,
  size, width, height)``, used to select samples and to write split files.

Resume: each sample's data row is written before its metadata row, and `stored_ids` reads the metadata
tables, so a sample counts as stored only once both rows are in; a rewrite is a harmless upsert.

Drivers: rows are inserted through the C++ driver (acsylla, `_NativeWriter`): its I/O and framing run
outside the GIL; measured in the same runs on 1,000 x 110 KB samples, 1.3-1.6x the rows per second at
0.4-0.6x the client CPU per row of the Python driver (issue 13). Schema, scans and drops stay on the
Python driver (few requests).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import re
import uuid
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from pydantic import Field

from workbench.backends.base import Backend, LayoutOptions, Progress, StoredSample, storage_name
from workbench.clients import cassandra_session
from workbench.clients.cassandra import (
    acsylla_driver,
    open_native_session,
    settings_login,
    stack_tls,
)
from workbench.clients.endpoints import cassandra_hosts, where
from workbench.concurrency import EventLoopThread
from workbench.config import Settings
from workbench.data import Sample
from workbench.errors import WorkbenchError, first_line

if TYPE_CHECKING:
    from cassandra.cluster import Session

# Keyspace and table names: Cassandra allows letters, digits and '_' up to 48 characters. We also require
# lower case so that the quoted names we use mean the same as the unquoted names users type in cqlsh.
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,47}$")
_COLUMN = re.compile(r"^[a-z][a-z0-9_]{0,47}$")
_SPLIT = re.compile(r"^[a-z0-9_]+$")
_MAX_TABLE = 48
_LABEL_CQL = {"int": "int", "blob": "blob"}
_INT32 = (-(2**31), 2**31 - 1)
# Metadata columns besides id and label (fixed names, as in the plugin's examples).
_META_COLUMNS = {
    "original_name": "text", "original_split": "text", "dataset": "text", "checksum": "text",
    "size": "int", "width": "int", "height": "int",
}
ID_FETCH_SIZE = 5000  # ids are 16 bytes: big pages, few round trips
SCAN_FETCH_SIZE = 64  # data rows are ~110 KB (ImageNet-like): ~7 MB pages


class CassandraOptions(LayoutOptions):
    workers: int = Field(32, ge=1, le=256, description="asynchronous insert requests in flight")
    keyspace: str | None = Field(None, description="keyspace (default: the dataset's storage name)")
    replication_factor: int | None = Field(
        None, ge=1, description="SimpleStrategy replication factor of a new keyspace (default: "
                                "settings.cassandra_replication_factor)")
    id_col: str = Field("id", description="uuid primary key column")
    label_col: str = Field("label", description="label column (int or blob; absent with label_type none)")
    data_col: str = Field("data", description="encoded image column (blob)")


def _q(identifier: str) -> str:
    """A validated lower-case identifier, quoted so reserved words (e.g. 'size') are column names too."""
    return f'"{identifier}"'


class CassandraBackend(Backend):
    name = "cassandra"
    native_ceiling = "gocql"
    proxy = "cassandra"
    restartable_service = "cassandra"
    Options = CassandraOptions
    options: CassandraOptions

    def __init__(self, settings, dataset: str, options: CassandraOptions | None = None) -> None:
        super().__init__(settings, dataset, options)
        self.keyspace = self.options.keyspace or storage_name(dataset)
        self._check_names()
        self._splits: list[str] | None = None

    # ----------------------------------------------------------------------------------- names

    def _check_names(self) -> None:
        o = self.options
        if not _NAME.match(self.keyspace):
            raise WorkbenchError(
                f"invalid Cassandra keyspace '{self.keyspace}': use 1-48 lower-case letters, digits and '_', "
                "starting with a letter (set --keyspace)"
            )
        columns = {"id_col": o.id_col, "data_col": o.data_col}
        if o.label_type != "none":
            columns["label_col"] = o.label_col
        for option, column in columns.items():
            if not _COLUMN.match(column):
                raise WorkbenchError(
                    f"invalid Cassandra column name '{column}' ({option}): use lower-case letters, digits and '_', "
                    "starting with a letter"
                )
        names = list(columns.values())
        if len(set(names)) != len(names):
            raise WorkbenchError(f"Cassandra columns must differ: {', '.join(f'{k}={v}' for k, v in columns.items())}")
        for option in ("id_col", "label_col"):
            if option in columns and columns[option] in _META_COLUMNS:
                raise WorkbenchError(
                    f"Cassandra column name '{columns[option]}' ({option}) clashes with a metadata column: "
                    f"avoid {', '.join(_META_COLUMNS)}"
                )

    @staticmethod
    def _check_split(split: str) -> str:
        if not _SPLIT.match(split) or len("metadata_") + len(split) > _MAX_TABLE:
            raise WorkbenchError(
                f"invalid split name '{split}' for Cassandra tables: use at most {_MAX_TABLE - len('metadata_')} "
                "lower-case letters, digits and '_'"
            )
        return split

    def data_table(self, split: str) -> str:
        return f"{self.keyspace}.data_{split}"

    def metadata_table(self, split: str) -> str:
        return f"{self.keyspace}.metadata_{split}"

    def _table(self, kind: str, split: str) -> str:
        return f"{_q(self.keyspace)}.{_q(f'{kind}_{split}')}"

    def _label_cql(self) -> str | None:
        return _LABEL_CQL.get(self.options.label_type)

    def _session(self):
        return cassandra_session(self.settings, self.options.via_proxy)

    # ------------------------------------------------------------------------------------ schema

    def prepare(self, splits: Iterable[str]) -> None:
        splits = [self._check_split(s) for s in dict.fromkeys(splits)]
        o = self.options
        label = self._label_cql()
        with self._session() as session:
            session.execute(
                f"CREATE KEYSPACE IF NOT EXISTS {_q(self.keyspace)} WITH replication = "
                f"{{'class': 'SimpleStrategy', 'replication_factor': "
                f"{o.replication_factor or self.settings.cassandra_replication_factor}}}"
            )
            for split in splits:
                label_def = f"{_q(o.label_col)} {label}, " if label else ""
                session.execute(
                    f"CREATE TABLE IF NOT EXISTS {self._table('data', split)} ({_q(o.id_col)} uuid PRIMARY KEY, "
                    f"{label_def}{_q(o.data_col)} blob) WITH compression = {{'enabled': 'false'}}"
                )
                meta = ", ".join(f"{_q(c)} {t}" for c, t in _META_COLUMNS.items())
                session.execute(
                    f"CREATE TABLE IF NOT EXISTS {self._table('metadata', split)} "
                    f"({_q(o.id_col)} uuid PRIMARY KEY, {label_def}{meta})"
                )
                self._check_columns(session, split)
        self._splits = splits

    def _check_columns(self, session: Session, split: str) -> None:
        """Tables that already existed must have our columns with our types (else inserts fail obscurely)."""
        o = self.options
        label = self._label_cql()
        wanted = {
            "data": {o.id_col: "uuid", o.data_col: "blob", **({o.label_col: label} if label else {})},
            "metadata": {o.id_col: "uuid", **({o.label_col: label} if label else {}), **_META_COLUMNS},
        }
        for kind, columns in wanted.items():
            table = f"{kind}_{split}"
            rows = session.execute(
                "SELECT column_name, type FROM system_schema.columns WHERE keyspace_name = %s AND table_name = %s",
                (self.keyspace, table),
            )
            have = {r[0]: r[1] for r in rows}
            for column, cql_type in columns.items():
                if have.get(column) != cql_type:
                    found = f"has type {have[column]}" if column in have else "is missing"
                    raise WorkbenchError(
                        f"existing table {self.keyspace}.{table}: column '{column}' {found}, expected {cql_type} "
                        f"(label_type={o.label_type}): drop the keyspace or choose another --keyspace"
                    )

    def _existing_splits(self, session: Session) -> list[str]:
        """Splits with both tables in the keyspace; a clear error when the keyspace does not exist."""
        found = session.execute(
            "SELECT keyspace_name FROM system_schema.keyspaces WHERE keyspace_name = %s", (self.keyspace,)
        ).one()
        if found is None:
            raise WorkbenchError(
                f"Cassandra keyspace '{self.keyspace}' does not exist: ingest dataset '{self.dataset}' first "
                "(or pass the right --keyspace)"
            )
        tables = {r[0] for r in session.execute(
            "SELECT table_name FROM system_schema.tables WHERE keyspace_name = %s", (self.keyspace,)
        )}
        return sorted(t[len("data_"):] for t in tables if t.startswith("data_") and f"metadata_{t[5:]}" in tables)

    # ------------------------------------------------------------------------------------ reading

    def stored_ids(self) -> set[uuid.UUID]:
        from cassandra.query import SimpleStatement

        ids: set[uuid.UUID] = set()
        with self._session() as session:
            for split in self._existing_splits(session):
                query = SimpleStatement(
                    f"SELECT {_q(self.options.id_col)} FROM {self._table('metadata', split)}", fetch_size=ID_FETCH_SIZE
                )
                ids.update(row[0] for row in session.execute(query))
        return ids

    def scan(self) -> Iterator[StoredSample]:
        from cassandra.query import SimpleStatement

        o = self.options
        columns = [o.id_col, o.data_col] + ([o.label_col] if o.label_type != "none" else [])
        with self._session() as session:
            for split in self._existing_splits(session):
                query = SimpleStatement(
                    f"SELECT {', '.join(map(_q, columns))} FROM {self._table('data', split)}",
                    fetch_size=SCAN_FETCH_SIZE,
                )
                for row in session.execute(query):
                    data = row[1] if row[1] is not None else b""
                    yield StoredSample(row[0], split, row[2] if len(row) > 2 else None, data)

    # ------------------------------------------------------------------------------------ writing

    def _statements(self, writer: _NativeWriter, split: str) -> tuple[Any, Any]:
        """The prepared data and metadata INSERTs of `split` (on the writer's session)."""
        o = self.options
        label = [o.label_col] if o.label_type != "none" else []
        data_cols = [o.id_col, *label, o.data_col]
        meta_cols = [o.id_col, *label, *_META_COLUMNS]
        try:
            return tuple(  # type: ignore[return-value]
                writer.prepare(
                    f"INSERT INTO {self._table(kind, split)} ({', '.join(map(_q, cols))}) "
                    f"VALUES ({', '.join('?' * len(cols))})"
                )
                for kind, cols in (("data", data_cols), ("metadata", meta_cols))
            )
        except writer.refusals as exc:
            raise WorkbenchError(
                f"cannot write split '{split}' to keyspace {self.keyspace}: {first_line(exc)} "
                "(was it prepared? the source's splits must be known before writing)"
            ) from exc

    def _label(self, sample: Sample) -> list:
        kind = self.options.label_type
        if kind == "none":
            return []
        value = sample.label
        if kind == "int":
            if not isinstance(value, int) or isinstance(value, bool):
                raise WorkbenchError(
                    f"sample {sample.name} has a {type(value).__name__} label but label_type is int: "
                    "use --label-type blob (masks, multilabel vectors) or none"
                )
            if not _INT32[0] <= value <= _INT32[1]:
                raise WorkbenchError(f"sample {sample.name} has label {value}, outside Cassandra's 32-bit int")
        elif not isinstance(value, bytes | bytearray):
            raise WorkbenchError(
                f"sample {sample.name} has a {type(value).__name__} label but label_type is blob: "
                "use --label-type int (class indices) or none"
            )
        else:
            value = bytes(value)  # the C++ driver binds bytes only
        return [value]

    def write(self, samples: Iterable[Sample], progress: Progress) -> None:
        with _NativeWriter(self.settings, self.options.via_proxy, self.options.workers, progress) as writer:
            statements: dict[str, tuple] = {}
            failed = True
            try:
                for sample in samples:
                    split = sample.split
                    if split not in statements:
                        statements[split] = self._statements(writer, self._check_split(split))
                    data_stmt, meta_stmt = statements[split]
                    label = self._label(sample)
                    data = data_stmt.bind()
                    data.bind_list([sample.id, *label, sample.data])
                    meta = meta_stmt.bind()
                    meta.bind_list([sample.id, *label, sample.name, split, self.dataset, sample.checksum,
                                    len(sample.data), sample.width, sample.height])
                    writer.submit(sample, data, meta)
                failed = False
            finally:
                error = writer.drain()  # what was written completely is reported, also when the source failed
            if error is not None and not failed:
                raise error

    def drop_layout(self) -> None:
        """Drop the dataset: its own keyspace (the default), or only its tables in a keyspace given by name.

        A keyspace given with --keyspace may hold other tables: it is dropped only once it is empty.
        Idempotent: dropping what does not exist is not an error.
        """
        with self._session() as session:
            try:
                splits = self._existing_splits(session)
            except WorkbenchError:  # no keyspace: nothing to drop
                return
            if self.keyspace != storage_name(self.dataset):
                for split in splits:
                    for kind in ("data", "metadata"):
                        session.execute(f"DROP TABLE IF EXISTS {self._table(kind, split)}")
                left = session.execute(
                    "SELECT table_name FROM system_schema.tables WHERE keyspace_name = %s", (self.keyspace,)
                ).one()
                if left is not None:
                    return
            session.execute(f"DROP KEYSPACE IF EXISTS {_q(self.keyspace)}")
        self._splits = None

    def describe(self) -> dict:
        splits = self._splits
        if splits is None:
            try:
                with self._session() as session:
                    splits = self._existing_splits(session)
            except WorkbenchError:
                splits = []
        o = self.options
        return {
            **super().describe(),
            "keyspace": self.keyspace,
            "tables": {s: self.data_table(s) for s in splits},
            "metadata_tables": {s: self.metadata_table(s) for s in splits},
            "columns": {"id": o.id_col, "label": o.label_col if o.label_type != "none" else None, "data": o.data_col},
            "label_type": o.label_type,
        }


class _NativeWriter:
    """At most `limit` samples in flight on an acsylla session: data insert, then (on success) metadata insert.

    The session lives on an asyncio loop in a thread of its own (a loop in the writing thread measured no
    faster: here the loop overlaps with the hashing, which releases the GIL); finished samples come back
    through a queue and are handled in the writing thread (progress bars and journals are not thread-safe). After
    a failure no sample is accepted; those in flight still finish and are reported, and `submit` or
    `drain` hand the first error to the writing thread, so no failed request is silently lost.
    """

    def __init__(self, settings: Settings, via_proxy: bool, limit: int, progress: Progress) -> None:
        self.driver = acsylla_driver("Cassandra ingest")
        errors = self.driver.errors
        self.refusals = (errors.CassErrorServerInvalidQuery, errors.CassErrorServerSyntaxError,
                         errors.CassErrorServerUnauthorized)
        self.settings, self.limit, self.progress = settings, limit, progress
        hosts, port = cassandra_hosts(settings, via_proxy)
        self.where = where([(host, port) for host in hosts])
        # Each sample is two requests, each bounded by the driver's request timeout: this is a safety net.
        self.patience_s = 4 * settings.timeout_s + 1
        self.done: queue.SimpleQueue[tuple[Sample, BaseException | None]] = queue.SimpleQueue()
        self.pending = 0
        self.error: BaseException | None = None
        self.tasks: set[asyncio.Task] = set()  # referenced until done (the loop keeps only weak references)
        login = settings_login(settings)
        self.io = EventLoopThread("cassandra-writer", "the Cassandra driver")
        try:
            self.session = self.io.call(
                open_native_session(settings, hosts, port, login, stack_tls(settings)), self.patience_s)
        except BaseException:
            self.io.stop(self.patience_s)
            raise

    def __enter__(self) -> _NativeWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        with contextlib.suppress(Exception):  # a session whose server is gone: nothing left to release
            self.io.call(self.session.close(), self.patience_s)
        self.io.stop(self.patience_s)

    def prepare(self, text: str) -> Any:
        return self.io.call(self.session.create_prepared(text, timeout=self.settings.timeout_s), self.patience_s)

    def submit(self, sample: Sample, data: Any, meta: Any) -> None:
        """Start writing `sample` (two bound statements); waits while `limit` samples are in flight."""
        while self._handle(block=False):
            pass
        while self.pending >= self.limit and self.error is None:
            self._handle(block=True)
        if self.error is not None:
            raise self.error
        self.pending += 1
        self.io.loop.call_soon_threadsafe(self._start, sample, data, meta)

    def drain(self) -> BaseException | None:
        """Wait for every sample in flight and handle it; returns the first error (the caller decides to raise)."""
        while self.pending:
            self._handle(block=True)
        return self.error

    def _handle(self, block: bool) -> bool:
        """Report one finished sample, or keep its error; False when none was ready (block=False)."""
        try:
            sample, error = self.done.get(timeout=self.patience_s) if block else self.done.get_nowait()
        except queue.Empty:
            if not block:
                return False
            raise WorkbenchError(
                f"no insert finished at Cassandra at {self.where} within {self.patience_s:.0f} s although each has "
                "a timeout: a driver fault; re-run the ingest (it resumes), and report it if it recurs") from None
        self.pending -= 1
        try:
            if error is not None:
                raise error
            self.progress(1, len(sample.data))
        except BaseException as exc:  # kept, and raised in the writing thread
            if self.error is None:
                self.error = exc
        return True

    # ------------------------------------------------------------------------- on the loop thread

    def _start(self, sample: Sample, data: Any, meta: Any) -> None:
        task = self.io.loop.create_task(self._write(sample, data, meta))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _write(self, sample: Sample, data: Any, meta: Any) -> None:
        what = "data"
        try:
            await self.session.execute(data)
            what = "metadata"  # only after the data row is in: that is what makes the sample "stored"
            await self.session.execute(meta)
        except asyncio.CancelledError as exc:
            self.done.put((sample, self._failure(sample, what, exc)))
            raise
        except Exception as exc:
            self.done.put((sample, self._failure(sample, what, exc)))
        else:
            self.done.put((sample, None))

    @staticmethod
    def _failure(sample: Sample, what: str, exc: BaseException) -> WorkbenchError:
        error = WorkbenchError(
            f"writing sample {sample.name} ({what} row) to Cassandra failed: {type(exc).__name__}: "
            f"{first_line(exc) or 'cancelled'} (re-run the ingest: it resumes)"
        )
        error.__cause__ = exc
        return error
