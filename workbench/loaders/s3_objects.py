"""S3, one object per sample (the OSS-connector / "bucket of JPEGs" way): many small GETs kept in flight.

Layout: `workbench.backends.s3_objects` (``<prefix>/<split>/<class>/<basename>``, metadata ``id`` and
``label``/``label-object``, ``.label`` sidecars for blob labels, ``<split>/manifest.txt``).

The key list comes from the split's manifest, written at ingest: one GET per loader (cached), never a
LIST per worker or per epoch. Order = `epoch_order` of the manifest lines, then this reader's share
(`take_shard` of rank x DataLoader worker), so objects are the unit of splitting. Each item is one
GET (two for blob labels: object, then its sidecar); its key is the sample id from the object's
``x-amz-meta-id``, its int label the manifest's (the metadata's when the line has none).

* `S3ObjectsLoader` ("s3-objects") keeps `concurrency` GETs in flight (`in_flight` over a thread pool
  and a client with as many pooled connections), in order or in completion order (``ordered=False``);
  "auto" widens the window while the rate rises, and `window` says which depth it used.
* Resuming mid-epoch (a loaded `state_dict`) skips the objects already delivered without a GET; out of
  order (``ordered=False``) the ids are only known from the objects, so all are read again and the
  delivered ones dropped.
* `S3NaiveLoader` ("s3-naive") does the same GETs one at a time: the "before" picture, one round trip
  per sample.

The OSS connector's API over any bucket (`ObjectMapDataset` / `ObjectIterableDataset`: from_prefix,
from_objects, from_manifest_file) is `workbench.compat.oss_connector`.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar
from urllib.parse import unquote

from workbench.concurrency import (
    HasWindow,
    LazyPool,
    fixed_depth,
    in_flight_collected,
    make_window,
    map_in_flight,
    pool_size,
)
from workbench.config import Settings
from workbench.data.sample import int_label
from workbench.errors import WorkbenchError
from workbench.layouts.objects import MANIFEST
from workbench.loaders.base import Item, LoaderConfig, RequestModel
from workbench.loaders.order import effective_shard, epoch_order, take_shard
from workbench.loaders.retry import RetryConfig, policy_of
from workbench.loaders.s3_location import S3Location
from workbench.loaders.s3_shards import S3StoreLoader, s3_store
from workbench.storage import S3Store
from workbench.storage.s3_batch import GetFailed, LazyS3Batch

Entry = tuple[str, str | None]  # (key relative to <prefix>/<split>/, manifest label field or None)


class S3ObjectsConfig(LoaderConfig, S3Location, RetryConfig):
    """A LoaderConfig that reads S3 objects: where they are, and how often a failed GET is re-tried."""


# ------------------------------------------------------------------------------------------- manifest


def manifest_lines(reader: io.IOBase, name: str | None = None) -> Iterator[tuple[int, str, str | None]]:
    """(line number, key, label field or None) of every non-blank line of a ``key [label]`` manifest.

    Keys (and label fields) are percent-decoded (the layout encodes '%' and whitespace). A line with
    more than two fields, an empty or absolute key, or bytes that are not UTF-8 raises WorkbenchError
    naming the file and the line.
    """
    name = name or str(getattr(reader, "name", "<manifest>"))
    data = reader.read()
    if not isinstance(data, bytes | str):
        raise WorkbenchError(f"manifest {name}: the reader returned {type(data).__name__}, not bytes or text")
    for number, raw in enumerate(data.splitlines(), start=1):
        try:
            line = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        except UnicodeDecodeError:
            raise WorkbenchError(f"manifest {name} line {number}: not UTF-8 text") from None
        fields = line.split()
        if not fields:
            continue
        if len(fields) > 2:
            raise WorkbenchError(
                f"manifest {name} line {number}: expected 'key [label]', got {len(fields)} fields "
                f"({line.strip()[:80]!r}); percent-encode whitespace in keys as %20"
            )
        key = unquote(fields[0])
        if key.startswith("/") or not key.strip("/"):
            raise WorkbenchError(f"manifest {name} line {number}: bad key {fields[0]!r} (want a relative key)")
        yield number, key, unquote(fields[1]) if len(fields) == 2 else None


_INT_LABEL = re.compile(r"-?[0-9]+")


def default_manifest_parser(reader: io.IOBase) -> Iterator[tuple[str, Any]]:
    """The OSS-connector manifest parser for this project's manifests: (key, label) per ``key [label]`` line.

    Labels: an int for decimal labels, the string otherwise (a blob label's sidecar key), None when the
    line has no label. A malformed line raises WorkbenchError naming the file and the line number.
    """
    for _, key, label in manifest_lines(reader):
        if label is not None and _INT_LABEL.fullmatch(label):  # ASCII digits only: int() refuses '²' and '--5'
            yield key, int(label)
        else:
            yield key, label


# ------------------------------------------------------------------------------------------- loaders


class S3ObjectsLoader(HasWindow, S3StoreLoader):
    """One GET per sample, `concurrency` of them in flight."""

    name = "s3-objects"
    request_model = RequestModel("one GET of one object (one sample)")
    chaos_window: ClassVar[dict[str, Any] | None] = {"concurrency": 4}
    backend = "s3-objects"
    Config = S3ObjectsConfig
    config: S3ObjectsConfig

    @classmethod
    def raw_ceiling(cls, settings: Settings, config: LoaderConfig) -> tuple[int, int]:
        """What plain boto3 GETs deliver: every object of the split's manifest on a ThreadPoolExecutor(concurrency).

        Returns (samples, bytes): bytes = the objects' bodies (the encoded images; label sidecars are not
        read). The manifest GET is included. Reads all ranks' objects. Time the call to get the rates.
        """
        depth = fixed_depth(config.concurrency)
        store = s3_store(settings, "s3-objects", config, depth + 4)
        entries = read_manifest(store, config.split, config.dataset)
        client = store.client

        def get(entry: Entry) -> int:
            key = store.full(f"{config.split}/{entry[0]}")
            with store.errors(f"reading {key}"):
                return len(client.get_object(Bucket=store.bucket, Key=key)["Body"].read())

        with ThreadPoolExecutor(depth, thread_name_prefix="s3-ceiling") as pool:
            total = sum(pool.map(get, entries))
        return len(entries), total

    def __init__(self, settings: Settings, config: LoaderConfig, worker_id: int = 0, num_workers: int = 1,
                 *, store: S3Store | None = None) -> None:
        super().__init__(settings, config, worker_id, num_workers, store=store)
        self._entries: list[Entry] | None = None
        self._pool = LazyPool(self.config.concurrency, "s3-object-get")
        self._window = make_window(self.config.concurrency)  # kept across epochs: a settled "auto" stays
        # GETs from one thread through workbench_native where obstore serves the store (not a user's boto3 client)
        store = self.store
        self._batch = (LazyS3Batch(store.settings, store.bucket, store.via_proxy, self.requests_in_flight() + 4)
                       if store.native_reads else None)

    def requests_in_flight(self) -> int:
        return pool_size(self.config.concurrency)

    def entries(self) -> list[Entry]:
        """The split's manifest lines (one GET, cached for the loader's life), in manifest order."""
        if self._entries is None:
            self._entries = policy_of(self.config).call(
                lambda: read_manifest(self.store, self.config.split, self.config.dataset),
                f"reading the manifest of {self.store.where}/{self.config.split}")
        return self._entries

    def my_entries(self, epoch: int) -> list[Entry]:
        c = self.config
        order = epoch_order(self.entries(), c.seed, epoch, c.shuffle)
        return take_shard(order, *effective_shard(c.shard_id, c.num_shards, self.worker_id, self.num_workers))

    def fetch_retrying(self, entry: Entry) -> Item:
        """`fetch`, re-tried on transient failures (same object, so each sample is still delivered once)."""
        return policy_of(self.config).call(lambda: self.fetch(entry),
                                           f"GET {self.store.where}/{self.config.split}/{entry[0]}")

    def fetch(self, entry: Entry) -> Item:
        """GET one object (and its label sidecar for blob labels) as an Item keyed by its sample id."""
        key = f"{self.config.split}/{entry[0]}"
        try:
            data, meta = self.store.get(key)
        except KeyError:
            raise WorkbenchError(
                f"object {self.store.where}/{key} is listed in the manifest but missing: re-run the ingest"
            ) from None
        return self.item(entry, data, meta)

    def item(self, entry: Entry, data: bytes, meta: dict[str, str]) -> Item:
        """The Item of the object `entry` names, from its body and user metadata (`id`, `label`/`label-object`)."""
        rel, label_field = entry
        split = self.config.split
        key = f"{split}/{rel}"
        sample_id = meta.get("id")
        if not sample_id:
            raise WorkbenchError(f"object {self.store.where}/{key} has no x-amz-meta-id: not ingested by workbench")
        label: int | bytes | None = None
        label_type = self.config.label_type
        if label_type == "int":
            label = int_label(label_field if label_field is not None else meta.get("label"),
                              f"object {self.store.where}/{key} (sample {sample_id})",
                              f"manifest {label_field!r}, metadata {meta.get('label')!r}")
        elif label_type == "blob":
            folder = rel.rpartition("/")[0]
            sidecar = label_field or (f"{folder}/{meta['label-object']}" if meta.get("label-object") else None)
            if sidecar is None:
                raise WorkbenchError(
                    f"object {self.store.where}/{key} (sample {sample_id}) has no label sidecar: "
                    "use label_type int or none"
                )
            try:
                label, _ = self.store.get(f"{split}/{sidecar}")
            except KeyError:
                raise WorkbenchError(
                    f"label sidecar {self.store.where}/{split}/{sidecar} of sample {sample_id} is missing"
                ) from None
        return Item(sample_id, label, data)

    def iter_epoch(self, epoch: int) -> Iterator[Item]:
        mine = self.unread(epoch, self.my_entries(epoch))  # ids come with the objects: no key before the GET
        if not mine:
            return
        batch = self._batch.get() if self._batch is not None else None
        if batch is None:  # no extension, or a store on the user's boto3 client: a thread per GET in flight
            yield from map_in_flight(mine, self.fetch_retrying, self._pool.get(), self._window, self.config.ordered)
            return
        split, full = self.config.split, self.store.full
        results = in_flight_collected(mine, batch, self._window, self.config.ordered, self.collect_timeout_s(),
                                      request=lambda entry: full(f"{split}/{entry[0]}"))
        try:
            for entry, got in results:
                # a failed GET is read again through the store: its retry policy, its one-line errors
                yield self.fetch_retrying(entry) if isinstance(got, GetFailed) else self.item(entry, *got)
        finally:
            results.close()

    def collect_timeout_s(self) -> float:
        """How long a window may go without any GET finishing: every try of one GET with its timeouts, and then
        some (the client's own connect/read timeouts end a stalled GET before this)."""
        return 4 * self.settings.timeout_s + 5

    def close(self) -> None:
        self._pool.close()
        if self._batch is not None:
            self._batch.close()


class S3NaiveLoader(S3ObjectsLoader):
    """The same GETs, one at a time and in order, nothing prefetched: one round trip per sample."""

    name = "s3-naive"
    request_model = RequestModel("one GET of one object, one at a time", window=1)
    chaos_window: ClassVar[dict[str, Any] | None] = {}

    def __init__(self, settings: Settings, config: LoaderConfig, worker_id: int = 0, num_workers: int = 1,
                 *, store: S3Store | None = None) -> None:
        super().__init__(settings, config, worker_id, num_workers, store=store)
        self._window = make_window(1)  # one GET at a time, whatever `concurrency` says

    def iter_epoch(self, epoch: int) -> Iterator[Item]:
        for entry in self.unread(epoch, self.my_entries(epoch)):
            yield self.fetch_retrying(entry)


def read_manifest(store: S3Store, split: str, dataset: str = "") -> list[Entry]:
    """Entries of ``<split>/manifest.txt`` in `store` (one GET)."""
    key = f"{split}/{MANIFEST}"
    try:
        data, _ = store.get(key)
    except KeyError:
        raise WorkbenchError(
            f"no manifest at {store.where}/{key}: dataset '{dataset}' split '{split}' was not ingested into "
            "s3-objects there (`workbench ingest --backend s3-objects`), or pass bucket/prefix"
        ) from None
    return [(k, label) for _, k, label in manifest_lines(io.BytesIO(data), f"{store.where}/{key}")]


raw_ceiling = S3ObjectsLoader.raw_ceiling  # the same loop as a function

__all__ = ["S3NaiveLoader", "S3ObjectsConfig", "S3ObjectsLoader", "default_manifest_parser", "manifest_lines",
           "raw_ceiling", "read_manifest"]
