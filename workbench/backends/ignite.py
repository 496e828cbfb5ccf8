"""Apache Ignite through the thin-client protocol, in the two layouts of the TensorFlow IgniteDataset article.

* ``binary`` (default): a PARTITIONED cache ``<CACHE>`` whose keys are sample ids (uuid strings) and whose
  values are binary objects ``WorkbenchImage`` {id, split, label, data, width, height, name, checksum}
  (``WorkbenchImageBlob`` when labels are blobs: Ignite's binary metadata is cluster-wide, so one type
  name cannot have an int label in one cache and a byte[] label in another). This is what
  ``IgniteDataset(cache_name=...)`` reads: homogeneous structured objects, no UUID fields.
  A small companion cache ``<CACHE>_IDS`` (id -> split) records samples whose object is stored.
* ``sql``: ``CREATE TABLE <name> (id VARCHAR PRIMARY KEY, split, label, name, width, height, checksum,
  data BINARY)`` filled with parameterised multi-row ``MERGE INTO`` (idempotent); the table is queryable
  with SQL and is also a cache (``SQL_PUBLIC_<TABLE>``, as in the article, unless --cache-name is given).

Partitions (``--option partitions=N``, the Ignite article's partition study): Ignite's thin-client protocol
carries no affinity function in a cache configuration (neither does SQL's ``CREATE TABLE ... WITH``), so
a cache made with an explicit configuration gets the server default, ``RendezvousAffinityFunction`` with
1024 partitions. Any other count comes from the cache templates of the node's configuration
(`workbench.stack.ignite`): N a power of two from 1 to 32768, the cache created by name with the
template's prefix, ``WB_P<N>_B<backups>_<TABLE>`` (binary mode; an explicit --cache-name must start with
that prefix) or ``CREATE TABLE ... WITH "template=WB_P<N>_B0_"`` (sql mode, any cache name). `prepare`
reads the real count from ``SYS.CACHES`` and refuses a mismatch with a clear error (a node started
without the templates, a cache that exists with another count).
"""

from __future__ import annotations

import re
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack
from functools import cache
from threading import Lock, local
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from workbench.backends.base import Backend, LayoutOptions, Progress, StoredSample, storage_name
from workbench.clients import ignite_client
from workbench.clients.endpoints import ignite_points
from workbench.clients.endpoints import where as where_of
from workbench.clients.ignite import DEFAULT_PARTITIONS, PARTITION_TEMPLATES, partition_template, scan_whole
from workbench.concurrency import InFlight, finish
from workbench.data import Sample
from workbench.errors import WorkbenchError, first_line

if TYPE_CHECKING:
    from pyignite import Client

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,199}$")
_PARTS = re.compile(r"parts=(\d+)")
MAX_PARTITIONS = 65000  # CacheConfiguration.MAX_PARTITIONS_COUNT
BATCH_BYTES = 32 * 2**20  # a batch is also cut at this many payload bytes (memory bound with big samples)
ID_PAGE_SIZE = 5000
INT32 = (-(2**31), 2**31 - 1)
FIELDS = ("id", "split", "label", "data", "width", "height", "name", "checksum")


class IgniteOptions(LayoutOptions):
    cache_name: str | None = Field(
        None, description="cache name (default: the dataset's storage name upper-cased; "
        "sql mode: SQL_PUBLIC_<TABLE>)"
    )
    partitions: int = Field(DEFAULT_PARTITIONS, ge=1, le=MAX_PARTITIONS,
                            description="cache partitions: 1024 (the server default) or a power of two from 1 to "
                                        "32768 (the node's cache templates)")
    backups: int = Field(0, ge=0, description="backup copies of each partition (default: WORKBENCH_IGNITE_BACKUPS)")
    mode: Literal["binary", "sql"] = Field("binary", description="binary objects in a cache, or an SQL table")
    batch_size: int = Field(64, ge=1, le=100_000, description="samples per put_all / MERGE")
    page_size: int = Field(
        64, ge=1, le=100_000, description="samples per page when reading back (the article used ~20 MB pages)"
    )


@cache
def value_class(label_type: str) -> type:
    """The binary type of binary-mode values (created once per process: pyignite registers it by name)."""
    from pyignite import GenericObjectMeta
    from pyignite.datatypes import ByteArrayObject, IntObject, String

    label = ByteArrayObject if label_type == "blob" else IntObject
    schema = OrderedDict([
        ("id", String), ("split", String), ("label", label), ("data", ByteArrayObject),
        ("width", IntObject), ("height", IntObject), ("name", String), ("checksum", String),
    ])
    type_name = "WorkbenchImageBlob" if label_type == "blob" else "WorkbenchImage"
    return GenericObjectMeta(type_name, (), {}, type_name=type_name, schema=schema)


class IgniteBackend(Backend):
    name = "ignite"
    native_ceiling = "ignite-thin-client"
    proxy = "ignite"  # not restartable: caches live in memory, a restart empties them
    Options = IgniteOptions
    options: IgniteOptions

    def __init__(self, settings, dataset: str, options: IgniteOptions | None = None) -> None:
        super().__init__(settings, dataset, options)
        if "backups" not in self.options.model_fields_set:  # the cluster's choice unless the caller made one
            self.options = self.options.model_copy(update={"backups": settings.ignite_backups})
        o = self.options
        self.table = storage_name(dataset).upper()
        self.template = self._template()
        if o.cache_name is not None:
            self.cache_name = o.cache_name
        elif o.mode == "sql":
            self.cache_name = f"SQL_PUBLIC_{self.table}"
        else:
            self.cache_name = f"{self.template or ''}{self.table}"
        if self.template and o.mode == "binary" and not self.cache_name.startswith(self.template):
            raise WorkbenchError(
                f"Ignite cache {self.cache_name} cannot get {o.partitions} partitions: a cache takes them from the "
                f"node's cache template by its name, so it must start with {self.template} (omit the cache name "
                "to get one)")
        if not _NAME.match(self.cache_name):
            raise WorkbenchError(
                f"invalid Ignite cache name '{self.cache_name}': use letters, digits and '_', starting with a letter"
            )
        self.ids_cache_name = f"{self.cache_name}_IDS"
        self.partitions_found: int | None = None

    def _template(self) -> str | None:
        """The prefix of the node's cache template for the asked partitions (None: the server default)."""
        o = self.options
        if o.partitions == DEFAULT_PARTITIONS:
            return None
        if o.partitions not in PARTITION_TEMPLATES:
            raise WorkbenchError(
                f"Ignite caches get {DEFAULT_PARTITIONS} partitions or a count of the node's cache templates "
                f"({', '.join(map(str, PARTITION_TEMPLATES))}), not {o.partitions}: pick one of those")
        return partition_template(o.partitions, o.backups if o.mode == "binary" else 0)

    def _client(self):
        return ignite_client(self.settings, self.options.via_proxy)

    def _label_sql(self) -> str:
        return "VARBINARY" if self.options.label_type == "blob" else "INT"

    def _value_type(self) -> str:
        if self.options.mode == "sql":
            return "WorkbenchRowBlob" if self.options.label_type == "blob" else "WorkbenchRow"
        return value_class(self.options.label_type).__name__

    # ------------------------------------------------------------------------------------ schema

    def prepare(self, splits: Iterable[str]) -> None:
        from pyignite.datatypes.cache_config import CacheMode
        from pyignite.datatypes.prop_codes import PROP_BACKUPS_NUMBER, PROP_CACHE_MODE, PROP_NAME
        from pyignite.exceptions import CacheError, SQLError

        o = self.options
        with self._client() as client:
            existed = self.cache_name in client.get_cache_names()
            try:
                if o.mode == "sql":
                    _sql(client,
                         f"CREATE TABLE IF NOT EXISTS {self.table} (id VARCHAR PRIMARY KEY, split VARCHAR, "
                         f"label {self._label_sql()}, name VARCHAR, width INT, height INT, checksum VARCHAR, "
                         f"data BINARY) WITH \"template={self.template or 'partitioned'},backups={o.backups},"
                         f"cache_name={self.cache_name},value_type={self._value_type()}\"")
                    if self.cache_name not in client.get_cache_names():
                        raise WorkbenchError(
                            f"SQL table {self.table} already exists with another cache than {self.cache_name}: "
                            "drop it, or pass its cache name / another dataset name"
                        )
                else:
                    config = {PROP_CACHE_MODE: CacheMode.PARTITIONED, PROP_BACKUPS_NUMBER: o.backups}
                    if self.template:  # by name: the node's template gives partitions and backups
                        client.get_or_create_cache(self.cache_name)
                    else:
                        client.get_or_create_cache({PROP_NAME: self.cache_name, **config})
                    if not existed and self.ids_cache_name in client.get_cache_names():
                        client.get_cache(self.ids_cache_name).destroy()  # ids of an earlier, destroyed cache
                    client.get_or_create_cache({PROP_NAME: self.ids_cache_name, **config})
            except (CacheError, SQLError) as exc:
                raise WorkbenchError(f"cannot create Ignite cache {self.cache_name}: {first_line(exc)}") from exc
            self._check_layout(client, created=not existed)

    def _check_layout(self, client: Client, created: bool) -> None:
        """The cache really has the partitions and backups asked for (see the module docstring)."""
        from pyignite.exceptions import SQLError

        try:
            rows = _sql(client, "SELECT AFFINITY, BACKUPS FROM SYS.CACHES WHERE CACHE_NAME = ?",
                        args=[self.cache_name])
        except SQLError:  # server without SQL (no ignite-indexing): cannot check
            return
        if not rows:
            return
        affinity, backups = rows[0]
        match = _PARTS.search(str(affinity))
        self.partitions_found = int(match.group(1)) if match else None
        o = self.options
        problems = []
        if self.partitions_found is not None and self.partitions_found != o.partitions:
            problems.append(f"{self.partitions_found} partitions, not {o.partitions}")
        if backups is not None and int(backups) != o.backups:
            problems.append(f"{backups} backups, not {o.backups}")
        if not problems:
            return
        if created:
            self._destroy(client)
            if self.template:
                why = (f"the node has no cache template {self.template}* (a node started before partition templates "
                       "existed, or another cluster): restart it (`workbench stack down ignite && workbench stack up "
                       "ignite`) or pre-create the cache server-side")
            else:
                why = (f"a thin client cannot set the affinity function, so new caches get the server default "
                       f"({DEFAULT_PARTITIONS} partitions)")
            raise WorkbenchError(f"Ignite cache {self.cache_name} would have {' and '.join(problems)}: {why}")
        raise WorkbenchError(
            f"existing Ignite cache {self.cache_name} has {' and '.join(problems)}: "
            "match its layout or destroy it first"
        )

    def drop_layout(self) -> None:
        """Destroy the cache (sql mode: drop the table and so its cache) and the ids cache; idempotent."""
        with self._client() as client:
            self._destroy(client)

    def _destroy(self, client: Client) -> None:
        names = set(client.get_cache_names())
        if self.options.mode == "sql":
            _sql(client, f"DROP TABLE IF EXISTS {self.table}")
        elif self.cache_name in names:
            client.get_cache(self.cache_name).destroy()
        if self.ids_cache_name in names:
            client.get_cache(self.ids_cache_name).destroy()

    def _require_cache(self, client: Client) -> None:
        if self.cache_name not in client.get_cache_names():
            raise WorkbenchError(
                f"Ignite cache {self.cache_name} does not exist: ingest dataset '{self.dataset}' first "
                f"(with --mode {self.options.mode}, or pass the right --cache-name)"
            )

    # ------------------------------------------------------------------------------------ reading

    def stored_ids(self) -> set[uuid.UUID]:
        """Ids of samples stored completely.

        binary mode reads the small ``<CACHE>_IDS`` cache (written after each batch's objects), because a
        thin-client scan can neither project nor filter: scanning the data cache for its keys would move
        every image over the network (the whole dataset, to learn a few MB of ids). sql mode asks
        ``SELECT id`` and the server sends only the keys. Both read in pages of 5000; a scan that saw fewer
        ids than the cache holds is taken again (`scan_whole`).
        """
        with self._client() as client:
            self._require_cache(client)
            if self.options.mode == "sql":
                return {_uuid(row[0], self.cache_name)
                        for row in _sql_iter(client, f"SELECT id FROM {self.table}", ID_PAGE_SIZE)}
            ids: set[uuid.UUID] = set()
            if self.ids_cache_name not in client.get_cache_names():
                return ids  # a data cache made by something else: everything is (re)written, harmless upserts

            def listing() -> int:
                ids.clear()
                entries = _scan(client.get_cache(self.ids_cache_name), ID_PAGE_SIZE)
                ids.update(_uuid(key, self.cache_name) for key, _ in entries)
                return len(ids)

            scan_whole(client, self.ids_cache_name, where_of(ignite_points(self.settings, self.options.via_proxy)),
                       listing)
            return ids

    def scan(self) -> Iterator[StoredSample]:
        page = self.options.page_size
        with self._client() as client:
            self._require_cache(client)
            if self.options.mode == "sql":
                query = f"SELECT id, split, label, data FROM {self.table}"
                for key, split, label, data in _sql_iter(client, query, page):
                    yield StoredSample(_uuid(key, self.cache_name), split or "train", label,
                                       bytes(data) if data is not None else b"")
                return
            for key, value in _scan(client.get_cache(self.cache_name), page):
                data = getattr(value, "data", None)
                if not isinstance(data, bytes | bytearray):
                    raise WorkbenchError(
                        f"Ignite cache {self.cache_name}: key {key!r} holds {type(value).__name__}, not an object with "
                        f"a byte[] 'data' field (fields {', '.join(FIELDS)}): not written by workbench"
                    )
                yield StoredSample(_uuid(key, self.cache_name), getattr(value, "split", None) or "train",
                                   getattr(value, "label", None), bytes(data))

    # ------------------------------------------------------------------------------------ writing

    def _label(self, sample: Sample) -> int | bytes | None:
        kind = self.options.label_type
        value = sample.label
        if kind == "none":
            return None
        if kind == "int":
            if not isinstance(value, int) or isinstance(value, bool):
                raise WorkbenchError(
                    f"sample {sample.name} has a {type(value).__name__} label but label_type is int: "
                    "use --label-type blob (masks, multilabel vectors) or none"
                )
            if not INT32[0] <= value <= INT32[1]:
                raise WorkbenchError(f"sample {sample.name} has label {value}, outside Ignite's 32-bit int")
            return value
        if not isinstance(value, bytes | bytearray):
            raise WorkbenchError(
                f"sample {sample.name} has a {type(value).__name__} label but label_type is blob: "
                "use --label-type int (class indices) or none"
            )
        return bytes(value)

    def write(self, samples: Iterable[Sample], progress: Progress) -> None:
        o = self.options
        put = self._put_sql if o.mode == "sql" else self._put_binary
        rows = ((s, self._label(s)) for s in samples)
        with _Clients(self.settings, o.via_proxy) as clients:
            # At most `workers` batches in flight (+1 being filled); progress and errors handled in this thread.
            flight = InFlight(o.workers, o.workers, "ignite-writer")
            failed = True
            try:
                for batch in _batches(rows, o.batch_size, BATCH_BYTES):
                    flight.submit(_write_batch, put, clients.get, batch,
                                  then=lambda b: progress(len(b), sum(len(s.data) for s, _ in b)))
                failed = False
            finally:
                finish(flight, failed)  # a source that failed: what was written is reported before its error

    def _put_binary(self, client: Client, batch: list[tuple[Sample, Any]]) -> None:
        cls = value_class(self.options.label_type)
        objects = {
            str(s.id): cls(id=str(s.id), split=s.split, label=label, data=s.data, width=s.width, height=s.height,
                           name=s.name, checksum=s.checksum)
            for s, label in batch
        }
        client.get_cache(self.cache_name).put_all(objects)
        client.get_cache(self.ids_cache_name).put_all({str(s.id): s.split for s, _ in batch})  # after the data

    def _put_sql(self, client: Client, batch: list[tuple[Sample, Any]]) -> None:
        row = "(" + ", ".join("?" * len(FIELDS)) + ")"
        args: list = []
        for s, label in batch:
            args += [str(s.id), s.split, label, s.data, s.width, s.height, s.name, s.checksum]
        _sql(client, f"MERGE INTO {self.table} ({', '.join(FIELDS)}) VALUES {', '.join([row] * len(batch))}",
             args=args)

    def describe(self) -> dict:
        o = self.options
        fields = {"id": "String", "split": "String",
                  "label": {"blob": "byte[]", "int": "Integer", "none": "Integer (null)"}[o.label_type],
                  "data": "byte[]", "width": "Integer", "height": "Integer", "name": "String", "checksum": "String"}
        info = {
            **super().describe(),
            "cache": self.cache_name,
            "mode": o.mode,
            "partitions": self.partitions_found or o.partitions,
            "backups": o.backups,
            "value_type": self._value_type(),
            "key": "sample id as a uuid string",
            "fields": fields,
        }
        if o.mode == "sql":
            info["table"] = f"PUBLIC.{self.table}"
        else:
            info["ids_cache"] = self.ids_cache_name
        return info


# ---------------------------------------------------------------------------------------- helpers


def _uuid(key: Any, cache: str) -> uuid.UUID:
    try:
        return uuid.UUID(str(key))
    except ValueError:
        raise WorkbenchError(
            f"Ignite cache {cache}: key {key!r} is not a sample id (uuid): not written by workbench"
        ) from None


def _sql(client: Client, query: str, args: list | None = None) -> list:
    with client.sql(query, query_args=args) as cursor:
        return list(cursor)


def _sql_iter(client: Client, query: str, page_size: int) -> Iterator[list]:
    with client.sql(query, page_size=page_size) as cursor:
        yield from cursor


def _scan(cache, page_size: int) -> Iterator[tuple[Any, Any]]:
    with cache.scan(page_size=page_size) as cursor:
        yield from cursor


def _batches(rows: Iterable[tuple[Sample, Any]], size: int, max_bytes: int) -> Iterator[list]:
    batch: list = []
    nbytes = 0
    for row in rows:
        batch.append(row)
        nbytes += len(row[0].data)
        if len(batch) >= size or nbytes >= max_bytes:
            yield batch
            batch, nbytes = [], 0
    if batch:
        yield batch


def _write_batch(put: Callable[[Client, list], None], client: Callable[[], Client], batch: list) -> list:
    """One batch through `put` on this thread's client; a failed write names the batch and says what to do."""
    from pyignite.exceptions import CacheError, SQLError

    try:
        put(client(), batch)
    except (CacheError, SQLError, OSError) as exc:
        raise WorkbenchError(
            f"writing {len(batch)} samples (from {batch[0][0].name}) to Ignite failed: {type(exc).__name__}: "
            f"{first_line(exc)} (re-run the ingest: it resumes)"
        ) from exc
    return batch


class _Clients:
    """One connected pyignite client per writer thread (a client is not thread-safe); all closed at exit."""

    def __init__(self, settings, via_proxy: bool) -> None:
        self.settings, self.via_proxy = settings, via_proxy
        self.local = local()
        self.lock = Lock()
        self.stack = ExitStack()

    def get(self) -> Client:
        client = getattr(self.local, "client", None)
        if client is None:
            client = ignite_client(self.settings, self.via_proxy)
            with self.lock:
                client = self.local.client = self.stack.enter_context(client)
        return client

    def __enter__(self) -> _Clients:
        return self

    def __exit__(self, *exc) -> None:
        self.stack.close()


