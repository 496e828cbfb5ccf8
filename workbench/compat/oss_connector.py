"""PyTorch datasets over S3 with the OSS connector's API: map and iterable datasets over any bucket.

The connector's own names take its ``oss://bucket/key`` URIs (`endpoint`: any S3-compatible server)::

    ds = OssMapDataset.from_prefix("oss://bucket/prefix/", endpoint=url, cred_path=creds, config_path=config)
    ds = OssIterableDataset.from_objects(["oss://bucket/a.png", ...], endpoint=url, cred_path=creds)
    ds = OssIterableDataset.from_manifest_file("manifest", parser, "oss://bucket/base/", endpoint=url)

They are the classes below with ``oss://`` for ``s3://`` and ``''`` as the label of an object without one
(the connector's labels are strings, so a DataLoader can collate them); `OssCheckpoint` is
`workbench.checkpoints.s3`'s (the checkpoints layer, which this one may not import).

OSS connector style with ``s3://`` URIs (any bucket, any keys; no workbench layout needed)::

    ds = ObjectMapDataset.from_prefix("s3://bucket/imagenet/train/", settings, transform=fn)
    ds = ObjectIterableDataset.from_objects(["s3://bucket/a.jpg", ...], settings)
    ds = ObjectMapDataset.from_manifest_file("manifest.txt" or "s3://...", default_manifest_parser,
                                             "s3://bucket/imagenet/train/", settings)
    with ds[5] as item:
        item.key, item.size, item.label, item.read()

* The object list is made once, in the constructor (in the main process): one paginated LIST, or the
  manifest, or the given URIs. DataLoader workers receive it pickled and never list again.
* Items are `ObjectItem` (``.key .size .label .read() .close()``, context manager); ``transform(item)``
  is applied when given (the item is closed afterwards unless the transform returned it).
* `ObjectMapDataset`: ``__len__``, ``__getitem__`` (one GET), and ``__getitems__(indices)``, which
  torch's DataLoader calls with a whole batch of indices: those GETs go out `prefetch_concurrency` at a
  time. Works with ``DataLoader(shuffle=True)`` (collate the items yourself or transform them to tensors).
* `ObjectIterableDataset`: keeps `prefetch_concurrency` GETs in flight; splits its objects across
  DataLoader workers (and ranks: ``shard_id``/``num_shards``), optionally shuffled per epoch.

OSS connector options (keyword arguments of every constructor): ``endpoint`` (an S3 endpoint URL used
instead of the settings'), ``cred_path`` (the connector's JSON credential file: its keys replace the
settings'), ``config_path`` (the connector's JSON config: ``datasetConfig.prefetchConcurrency`` is the
default `prefetch_concurrency`, ``datasetConfig.prefetchWorker`` the default `prefetch_worker`: that many
prefetch threads share the GETs in flight, each keeping its part of them going (`oss_prefetch`), ``logLevel``/
``logPath`` a log file for this module's logger, ``auditPath`` an audit log with one line per GET). Without a
config file both take the connector's defaults (24 GETs, 2 workers). Parsing: `workbench.storage.oss_config`;
applying: `workbench.storage.oss_access`.

Connections are per process: each DataLoader worker makes its own client on first use (a forked copy
of the parent's connection pool is never reused). Errors: a missing object raises WorkbenchError naming
its URI, a missing bucket one naming the bucket.
"""

from __future__ import annotations

import hashlib
import io
import logging
import operator
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from torch.utils.data import Dataset, IterableDataset

from workbench.compat.oss_prefetch import PrefetchWorkers
from workbench.compat.resumable import ListReader, Order, Resumable, worker
from workbench.config import Settings
from workbench.errors import WorkbenchError
from workbench.loaders.order import effective_shard, epoch_order, take_shard
from workbench.loaders.s3_objects import default_manifest_parser
from workbench.storage import Store
from workbench.storage.oss_access import OssAccess
from workbench.storage.oss_config import DatasetConfig
from workbench.storage.s3 import parse_object_uri, parse_s3_uri

__all__ = ["ObjectItem", "ObjectIterableDataset", "ObjectMapDataset", "OssIterableDataset", "OssMapDataset",
           "default_manifest_parser", "parse_s3_uri"]

ManifestParser = Callable[[io.IOBase], Iterable[tuple[str, Any]]]
log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """One object of a dataset's list: made in the main process, pickled to the workers."""

    bucket: str
    key: str
    size: int | None = None
    label: Any = None
    scheme: str = "s3"  # of the URIs its dataset takes, for messages

    @property
    def uri(self) -> str:
        return f"{self.scheme}://{self.bucket}/{self.key}"


class ObjectItem:
    """One fetched object: ``key`` (object key in its bucket), ``size`` (bytes), ``label``, ``read()``.

    The body is already in memory (fetched in parallel by the dataset); `read` works like a file's
    (``read()`` all that is left, ``read(n)`` the next n bytes). Use as a context manager or `close` it.
    """

    __slots__ = ("_buffer", "bucket", "key", "label", "metadata", "scheme", "size")

    def __init__(self, bucket: str, key: str, data: bytes, label: Any = None,
                 metadata: dict[str, str] | None = None, scheme: str = "s3") -> None:
        self.bucket = bucket
        self.key = key
        self.size = len(data)
        self.label = label
        self.metadata = metadata or {}
        self.scheme = scheme
        self._buffer: io.BytesIO | None = io.BytesIO(data)

    @property
    def uri(self) -> str:
        return f"{self.scheme}://{self.bucket}/{self.key}"

    @property
    def id(self) -> str | None:
        """The workbench sample id (x-amz-meta-id), for objects written by `workbench ingest`."""
        return self.metadata.get("id")

    @property
    def closed(self) -> bool:
        return self._buffer is None

    def read(self, size: int = -1) -> bytes:
        if self._buffer is None:
            raise ValueError(f"read of closed item {self.uri}")
        return self._buffer.read(size)

    def close(self) -> None:
        self._buffer = None

    def __enter__(self) -> ObjectItem:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ObjectItem({self.uri!r}, size={self.size}, label={self.label!r})"


def _identity(item: ObjectItem) -> ObjectItem:
    return item


class _Objects:
    """What both OSS-style datasets share: the object list, per-process clients and the prefetch workers."""

    scheme: ClassVar[str] = "s3"  # of the URIs the constructors take
    missing_label: ClassVar[Any] = None  # the label of an object listed or named without one

    def __init__(self, refs: Sequence[ObjectRef], settings: Settings | None = None,
                 transform: Callable[[ObjectItem], Any] | None = None, prefetch_concurrency: int | None = None,
                 via_proxy: bool = False, *, endpoint: str | None = None, cred_path: str | os.PathLike | None = None,
                 config_path: str | os.PathLike | None = None, access: OssAccess | None = None,
                 prefetch_worker: int | None = None) -> None:
        self.settings = settings if settings is not None else Settings()
        self.access = access or OssAccess(self.settings, endpoint, cred_path, config_path, via_proxy)
        defaults = self.access.config.dataset if self.access.config is not None else DatasetConfig()
        if prefetch_concurrency is None:
            prefetch_concurrency = defaults.prefetch_concurrency
        if prefetch_worker is None:
            prefetch_worker = defaults.prefetch_worker
        for name, value in (("prefetch_concurrency", prefetch_concurrency), ("prefetch_worker", prefetch_worker)):
            if value < 1:
                raise WorkbenchError(f"{name} must be >= 1, got {value}")
        self.refs: list[ObjectRef] = list(refs)
        self.transform = transform or _identity
        self.prefetch_concurrency = prefetch_concurrency
        self.prefetch_worker = prefetch_worker  # as asked; at most prefetch_concurrency of them are used
        self.via_proxy = via_proxy
        self._reset()
        log.info("%s of %d objects at %s, %d GETs in flight over %d prefetch workers", type(self).__name__,
                 len(self.refs), self.access.url, prefetch_concurrency, self._prefetch.workers)

    # -------------------------------------------------------------------------------- construction

    @classmethod
    def from_prefix(cls, uri: str, settings: Settings | None = None, transform: Callable | None = None,
                    prefetch_concurrency: int | None = None, *, via_proxy: bool = False,
                    key_filter: Callable[[str], bool] | None = None, endpoint: str | None = None,
                    cred_path: str | os.PathLike | None = None, config_path: str | os.PathLike | None = None,
                    **options: Any):
        """Every object whose key starts with the URI's key (a raw S3 prefix: end it with '/' for a folder).

        One paginated LIST, here in the constructor. `key_filter(key)` keeps only matching keys (it is
        used while listing and not kept, so a lambda is fine with spawned workers). Labels: `missing_label`.
        """
        settings = settings if settings is not None else Settings()
        access = OssAccess(settings, endpoint, cred_path, config_path, via_proxy)
        access.attach_logs(log)
        bucket, prefix = parse_s3_uri(uri, cls.scheme)
        store = access.store(bucket, 8)
        refs = []
        with store.errors(f"listing {uri}"):
            for page in store.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
                for obj in page.get("Contents", []):
                    key = obj["Key"]
                    if key.endswith("/") or (key_filter is not None and not key_filter(key)):
                        continue
                    refs.append(ObjectRef(bucket, key, obj["Size"], cls.missing_label, cls.scheme))
        refs.sort(key=lambda r: r.key)
        return cls(refs, settings, transform, prefetch_concurrency, via_proxy=via_proxy, access=access, **options)

    @classmethod
    def from_objects(cls, uris: Iterable[str], settings: Settings | None = None, transform: Callable | None = None,
                     prefetch_concurrency: int | None = None, *, via_proxy: bool = False, **options: Any):
        """Exactly these ``s3://bucket/key`` objects (``oss://`` for the Oss names), in this order (no request is
        made here)."""
        refs = []
        for uri in uris:
            bucket, key = parse_object_uri(uri, cls.scheme)
            refs.append(ObjectRef(bucket, key, None, cls.missing_label, cls.scheme))
        return cls(refs, settings, transform, prefetch_concurrency, via_proxy=via_proxy, **options)

    @classmethod
    def from_manifest_file(cls, manifest_file: str | os.PathLike, manifest_parser: ManifestParser | None,
                           base_uri: str, settings: Settings | None = None, transform: Callable | None = None,
                           prefetch_concurrency: int | None = None, *, via_proxy: bool = False,
                           endpoint: str | None = None, cred_path: str | os.PathLike | None = None,
                           config_path: str | os.PathLike | None = None, **options: Any):
        """Objects ``base_uri/key`` for each (key, label) the parser yields from the manifest.

        `manifest_file` is a local path or an ``s3://`` URI (read once, here); `manifest_parser(reader)`
        gets a binary reader and yields (key, label), as in the OSS connector (None:
        `default_manifest_parser`, for ``key [label]`` lines as workbench ingest writes them).
        """
        settings = settings if settings is not None else Settings()
        access = OssAccess(settings, endpoint, cred_path, config_path, via_proxy)
        access.attach_logs(log)
        parser = manifest_parser or default_manifest_parser
        base_bucket, base_key = parse_s3_uri(base_uri, cls.scheme)
        base = base_key.rstrip("/")
        name = str(manifest_file)
        if "://" in name:  # a URI: of this dataset's scheme, or a one-line error saying which it wants
            bucket, key = parse_object_uri(name, cls.scheme)
            store = access.store(bucket, 4)
            try:
                data, _ = store.get(key)
            except KeyError:
                raise WorkbenchError(f"manifest {name} does not exist") from None
            access.audit("GET", bucket, key, len(data))
            reader: io.IOBase = _NamedBytesIO(data, name)
        else:
            path = Path(manifest_file)
            if not path.is_file():
                raise WorkbenchError(f"manifest {path} does not exist (or is not a file)")
            reader = _NamedBytesIO(path.read_bytes(), name)
        refs = []
        try:
            for key, label in parser(reader):
                refs.append(ObjectRef(base_bucket, f"{base}/{key}" if base else key, None, label, cls.scheme))
        except WorkbenchError:
            raise
        except (ValueError, TypeError, UnicodeDecodeError) as exc:
            raise WorkbenchError(f"manifest {name}: {exc}") from exc
        return cls(refs, settings, transform, prefetch_concurrency, via_proxy=via_proxy, access=access, **options)

    # ------------------------------------------------------------------------------------ fetching

    def _reset(self) -> None:
        self._pid = os.getpid()
        self.access.attach_logs(log)  # again in each spawned DataLoader worker
        self._stores: dict[str, Store] = {}
        self._prefetch: PrefetchWorkers[ObjectRef, ObjectItem] = PrefetchWorkers(
            self.prefetch_worker, self.prefetch_concurrency, f"{self.scheme}-dataset-get")
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        for transient in ("_stores", "_prefetch", "_lock", "_pid"):
            state.pop(transient, None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._reset()

    def _check_process(self) -> None:
        if self._pid != os.getpid():  # a forked DataLoader worker: own connections and threads
            self._reset()

    def _store_for(self, bucket: str) -> Store:
        self._check_process()
        with self._lock:
            store = self._stores.get(bucket)
            if store is None:
                store = self._stores[bucket] = self.access.store(bucket, self.prefetch_concurrency + 4)
            return store

    def fetch(self, ref: ObjectRef) -> ObjectItem:
        """One GET: the object as an ObjectItem (missing object or bucket: WorkbenchError naming it)."""
        store = self._store_for(ref.bucket)
        try:
            data, meta = store.get(ref.key)
        except KeyError:
            log.error("object %s does not exist", ref.uri)
            raise WorkbenchError(f"object {ref.uri} does not exist") from None
        self.access.audit("GET", ref.bucket, ref.key, len(data))
        log.debug("GET %s: %d bytes", ref.uri, len(data))
        return ObjectItem(ref.bucket, ref.key, data, ref.label, meta, ref.scheme)

    def _apply(self, item: ObjectItem) -> Any:
        result = self.transform(item)
        if result is not item:
            item.close()
        return result

    def _fetch_many(self, refs: Sequence[ObjectRef]) -> Iterator[ObjectItem]:
        """`fetch` of each ref, in order, by the prefetch workers (`oss_prefetch`)."""
        self._check_process()
        yield from self._prefetch.map(refs, self.fetch)

    def close(self) -> None:
        self._prefetch.close()


class ObjectMapDataset(_Objects, Dataset):
    """Map-style: ``len(ds)``, ``ds[i]`` (one GET), ``ds.__getitems__(indices)`` (GETs in parallel)."""

    def __len__(self) -> int:
        return len(self.refs)

    def __getitem__(self, index: int) -> Any:
        return self._apply(self.fetch(self.refs[operator.index(index)]))

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        """The batch torch's DataLoader asks for, fetched with `prefetch_concurrency` GETs in flight."""
        refs = [self.refs[i] for i in indices]
        return [self._apply(item) for item in self._fetch_many(refs)]

    def __iter__(self) -> Iterator[Any]:
        for item in self._fetch_many(self.refs):
            yield self._apply(item)


class ObjectIterableDataset(Resumable, _Objects, IterableDataset):
    """Iterable: `prefetch_concurrency` GETs in flight, objects split across ranks and DataLoader workers.

    Options (keyword arguments of every constructor): ``shuffle`` (a seeded order per epoch, see
    `set_epoch`), ``seed``, ``shard_id``/``num_shards`` (ranks). Without shuffle, a single worker yields
    the objects in list order; several workers interleave (each takes every n-th object).

    Resumable (torchdata's Stateful convention): `state_dict()` after k elements, given to a fresh dataset's
    `load_state_dict()`, makes its next iteration GET only the rest of that epoch (per DataLoader worker, as
    `StatefulDataLoader` keeps it). Map-style `ObjectMapDataset` needs none: its sampler is what resumes.
    """

    _state_name = "oss-objects"

    def __init__(self, refs: Sequence[ObjectRef], settings: Settings | None = None,
                 transform: Callable[[ObjectItem], Any] | None = None, prefetch_concurrency: int | None = None,
                 via_proxy: bool = False, *, shuffle: bool = False, seed: int = 0, shard_id: int = 0,
                 num_shards: int = 1, **access: Any) -> None:
        super().__init__(refs, settings, transform, prefetch_concurrency, via_proxy, **access)
        effective_shard(shard_id, num_shards)  # rejects bad ranks now
        self.shuffle, self.seed, self.shard_id, self.num_shards = shuffle, seed, shard_id, num_shards
        self._start_epochs()
        self._digest: str | None = None

    def __len__(self) -> int:
        """Objects of this rank (all DataLoader workers together)."""
        return len(take_shard(range(len(self.refs)), self.shard_id, self.num_shards))

    # resuming (torchdata's Stateful convention: `workbench.compat.resumable`): the state is the loaders' format,
    # the epoch and how many objects of this reader's order it delivered; a resumed epoch GETs only the rest.

    def _order(self) -> Order:
        if self._digest is None:
            digest = hashlib.sha256()
            for ref in self.refs:
                digest.update(ref.uri.encode() + b"\n")
            self._digest = f"{len(self.refs)} objects {digest.hexdigest()[:16]}"
        return Order(self._digest, self.seed, self.shuffle, self.shard_id, self.num_shards)

    def __getstate__(self) -> dict:
        return {**super().__getstate__(), "_live": None}

    def __iter__(self) -> Iterator[Any]:
        # Not a generator: the loaded state is taken now, so a state_dict() asked before the first element
        # (StatefulDataLoader asks at once) describes this iteration.
        saved = self._begin()
        worker_id, num_workers = worker()
        order = epoch_order(self.refs, self.seed, self.epoch, self.shuffle)
        mine = take_shard(order, *effective_shard(self.shard_id, self.num_shards, worker_id, num_workers))
        reader = ListReader(self, mine, self.epoch, self.check(saved) if saved is not None else None)
        self._live = reader
        return self._read(reader)

    def _read(self, reader: ListReader) -> Iterator[Any]:
        try:
            for item in reader.count(self._fetch_many(reader.rest)):
                yield self._apply(item)
        finally:
            self._end(reader)


class _NamedBytesIO(io.BytesIO):
    """A manifest's bytes with the file's name, so parsers can say where a bad line is."""

    def __init__(self, data: bytes, name: str) -> None:
        super().__init__(data)
        self.name = name



class OssMapDataset(ObjectMapDataset):
    """The OSS connector's OssMapDataset: `ObjectMapDataset` over ``oss://bucket/key`` URIs, labels '' if none."""

    scheme = "oss"
    missing_label = ""


class OssIterableDataset(ObjectIterableDataset):
    """The OSS connector's OssIterableDataset: `ObjectIterableDataset` over ``oss://`` URIs, labels '' if none."""

    scheme = "oss"
    missing_label = ""
