"""What the S3 and filesystem backends share: a byte store, bounded parallel writers and the shard set.

A `Store` is a flat namespace of keys ("train/shard-000000.tar") holding bytes: `S3Store` (bucket + prefix,
in `workbench.backends.s3_objects`) and `DirStore` (a directory, in `workbench.backends.fs`). The two
layouts, one object per sample (`ObjectSet`, in `s3_objects`) and WebDataset tar shards (`ShardSet`,
here), are written once against that interface, so ``s3-objects``/``fs --layout imagefolder`` and
``s3-shards``/``fs --layout shards`` differ only in how bytes are put, got and listed.

Shard set layout, per split::

    <split>/shard-000000.tar        WebDataset tar (workbench.data.pack_shards), one per maxsize/maxcount
    <split>/ids/shard-000000.json   completion record: the shard's ShardInfo and the ids it holds
    <split>/index.json              workbench.data.write_index of the complete shards, in name order

A shard is complete once its tar is stored AND its record is written after it (and the tar still has
the size the record says). `stored_ids` is the union of the complete records; the index is rebuilt
from them after every uploaded shard, so an interrupted ingest leaves an index of complete shards only.
A resumed ingest numbers its shards after the highest shard or record found, so it never overwrites a
shard (a tar left without a record by a killed writer stays unused: it is in no index).

Samples are packed per run of consecutive samples of one split (sources yield their splits one after
the other); a source that interleaves splits gets a partly filled shard at every switch.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import uuid
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict
from itertools import groupby
from typing import Any

from workbench.backends.base import Progress, StoredSample
from workbench.data import ID_ENTRY, Sample, ShardInfo, pack_shards, read_index, read_shard, write_index
from workbench.errors import WorkbenchError

log = logging.getLogger(__name__)

SHARD_PATTERN = "shard-{:06d}.tar"
_SHARD = re.compile(r"^shard-(\d{6,})\.tar$")
_RECORD = re.compile(r"^shard-(\d{6,})\.json$")
INDEX = "index.json"
IDS_DIR = "ids"
RECORD_FORMAT = "workbench-shard-record"
# Split names become one path component; a leading '_' or '.' is kept for the layouts' own files.
_SPLIT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
# In-flight shards are whole tars in memory: at most this many bytes of them (plus the one being packed).
SHARD_MEMORY_BUDGET = 512 * 2**20
_LABEL_ENTRIES = ("cls", "png", "seg.png", "npy", "lbl")


# ------------------------------------------------------------------------------------------------ store


class Store(ABC):
    """Keys -> bytes, with optional string metadata. Keys are relative, '/'-separated, never empty."""

    where: str  # for messages: "s3://bucket/prefix" or a directory

    @abstractmethod
    def put(self, key: str, data: bytes, metadata: dict[str, str] | None = None) -> None:
        """Store `data` at `key` atomically: a reader sees the old value, the new one, or nothing."""

    @abstractmethod
    def get(self, key: str) -> tuple[bytes, dict[str, str]]:
        """(data, metadata) of `key`; KeyError when there is no such key."""

    @abstractmethod
    def list(self, under: str = "") -> Iterator[tuple[str, int]]:
        """(key, size) of every key starting with `under` (a folder, '' for all), in no particular order."""

    @abstractmethod
    def delete(self, keys: Iterable[str]) -> None:
        """Remove keys (missing ones are ignored)."""

    def get_or_none(self, key: str) -> bytes | None:
        try:
            return self.get(key)[0]
        except KeyError:
            return None


def is_shard_key(key: str) -> bool:
    """Whether `key` belongs to the shard layout (tars, records, indexes) rather than the objects layout."""
    parts = key.split("/")
    if len(parts) == 2:
        return bool(_SHARD.match(parts[1])) or parts[1] == INDEX
    return len(parts) == 3 and parts[1] == IDS_DIR and bool(_RECORD.match(parts[2]))


def check_split(split: str) -> str:
    if not isinstance(split, str) or not _SPLIT.match(split):
        raise WorkbenchError(
            f"invalid split name {split!r}: use 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit"
        )
    return split


def labelled(samples: Iterable[Sample], label_type: str) -> Iterator[Sample]:
    """Samples whose labels fit `label_type` (int|blob|none, as for every backend); none drops labels."""
    for s in samples:
        value = s.label
        if label_type == "none":
            yield s if value is None else dataclasses.replace(s, label=None)
            continue
        if label_type == "int" and (not isinstance(value, int) or isinstance(value, bool)):
            raise WorkbenchError(
                f"sample {s.name} has a {type(value).__name__} label but label_type is int: "
                "use --label-type blob (masks, multilabel vectors) or none"
            )
        if label_type == "blob" and not isinstance(value, bytes | bytearray):
            raise WorkbenchError(
                f"sample {s.name} has a {type(value).__name__} label but label_type is blob: "
                "use --label-type int (class indices) or none"
            )
        yield s


# ------------------------------------------------------------------------------------------ in flight


class InFlight:
    """Jobs on `workers` threads, at most `limit` submitted and unfinished (so memory stays bounded).

    Results are handled by each job's `then` in the submitting thread (progress bars and journals are
    not thread-safe). After a failure no new job is accepted; jobs already running still finish and
    their results are still handled, so everything that was written completely is recorded.
    """

    def __init__(self, workers: int, limit: int, name: str) -> None:
        self.pool = ThreadPoolExecutor(max(1, workers), thread_name_prefix=name)
        self.limit = max(1, limit)
        self.pending: dict[Future, Callable[[Any], None]] = {}
        self.error: BaseException | None = None

    def submit(self, fn: Callable[..., Any], *args: Any, then: Callable[[Any], None]) -> None:
        self._handle([f for f in self.pending if f.done()])
        while len(self.pending) >= self.limit and self.error is None:
            done, _ = wait(self.pending, return_when=FIRST_COMPLETED)
            self._handle(done)
        if self.error is not None:
            raise self.error
        self.pending[self.pool.submit(fn, *args)] = then

    def _handle(self, done: Iterable[Future]) -> None:
        for future in done:
            then = self.pending.pop(future)
            try:
                then(future.result())
            except BaseException as exc:  # kept, and raised in the writing thread
                if self.error is None:
                    self.error = exc

    def drain(self) -> BaseException | None:
        """Wait for every job, handle its result; returns the first error (the caller decides to raise)."""
        try:
            while self.pending:
                done, _ = wait(self.pending, return_when=FIRST_COMPLETED)
                self._handle(done)
        finally:
            self.pool.shutdown(wait=True)
        return self.error


def finish(flight: InFlight, body_failed: bool) -> None:
    """Raise the first job error, unless the writing loop already has an exception on its way."""
    error = flight.drain()
    if error is not None and not body_failed:
        raise error


# ------------------------------------------------------------------------------------------ shard set


@dataclasses.dataclass
class _Listing:
    """What one listing says about a shard set: per split, shard numbers -> sizes, record numbers."""

    tars: dict[str, dict[int, int]]
    records: dict[str, set[int]]
    indexes: set[str]

    @property
    def splits(self) -> list[str]:
        return sorted(set(self.tars) | set(self.records) | self.indexes)


class ShardSet:
    """WebDataset tar shards of one dataset in a `Store` (layout in the module docstring)."""

    def __init__(self, store: Store, maxsize: float, maxcount: int, workers: int, label_type: str) -> None:
        self.store = store
        self.maxsize = maxsize
        self.maxcount = maxcount
        self.workers = workers
        self.label_type = label_type

    # ------------------------------------------------------------------------------ reading state

    def _listing(self) -> _Listing:
        tars: dict[str, dict[int, int]] = {}
        records: dict[str, set[int]] = {}
        indexes: set[str] = set()
        for key, size in self.store.list():
            parts = key.split("/")
            if len(parts) == 2 and (m := _SHARD.match(parts[1])):
                tars.setdefault(parts[0], {})[int(m.group(1))] = size
            elif len(parts) == 2 and parts[1] == INDEX:
                indexes.add(parts[0])
            elif len(parts) == 3 and parts[1] == IDS_DIR and (m := _RECORD.match(parts[2])):
                records.setdefault(parts[0], set()).add(int(m.group(1)))
        return _Listing(tars, records, indexes)

    def _read_record(self, split: str, number: int) -> dict | None:
        key = f"{split}/{IDS_DIR}/shard-{number:06d}.json"
        data = self.store.get_or_none(key)
        if data is None:
            return None
        try:
            doc = json.loads(data)
            if doc.get("format") != RECORD_FORMAT:
                raise ValueError("not a shard record")
            doc["info"] = ShardInfo(**doc["shard"])
            doc["ids"] = [uuid.UUID(i) for i in doc["ids"]]
        except (ValueError, TypeError, KeyError) as exc:
            log.warning("ignoring unreadable shard record %s in %s: %s", key, self.store.where, exc)
            return None
        return doc

    def _complete(self, listing: _Listing) -> dict[str, list[dict]]:
        """Records of complete shards per split (tar present, with the size recorded), in name order."""
        wanted = [(split, n) for split, numbers in listing.records.items() for n in sorted(numbers)
                  if n in listing.tars.get(split, {})]
        with ThreadPoolExecutor(min(max(1, self.workers), 16)) as pool:
            docs = list(pool.map(lambda sn: self._read_record(*sn), wanted))
        complete: dict[str, list[dict]] = {split: [] for split in listing.splits}
        for (split, n), doc in zip(wanted, docs, strict=True):
            if doc is None:
                continue
            if doc["info"].bytes != listing.tars[split][n]:
                log.warning("shard %s/%s in %s has %d bytes, its record says %d: treated as incomplete",
                            split, doc["info"].name, self.store.where, listing.tars[split][n], doc["info"].bytes)
                continue
            complete[split].append(doc)
        return complete

    def splits(self) -> list[str]:
        return self._listing().splits

    def index(self, split: str) -> list[ShardInfo]:
        """The shards the index of `split` lists ([] when there is no index)."""
        data = self.store.get_or_none(f"{split}/{INDEX}")
        if data is None:
            return []
        try:
            return read_index(data)
        except (ValueError, WorkbenchError) as exc:
            raise WorkbenchError(
                f"{self.store.where}/{split}/{INDEX}: {exc} (re-run the ingest to rebuild it)"
            ) from None

    def stored_ids(self) -> set[uuid.UUID]:
        return {i for docs in self._complete(self._listing()).values() for doc in docs for i in doc["ids"]}

    def drop(self) -> None:
        """Delete the shards, records and indexes (an objects layout sharing the prefix is left alone)."""
        self.store.delete([k for k, _ in self.store.list() if is_shard_key(k)])

    # ---------------------------------------------------------------------------------- writing

    def _write_index(self, split: str, infos: list[ShardInfo], compare: bool = True) -> None:
        """(Re)write the index of `split`; with `compare`, only if it changed (a no-op re-ingest writes nothing)."""
        data = write_index(sorted(infos, key=lambda i: i.name))
        if not compare or self.store.get_or_none(f"{split}/{INDEX}") != data:
            self.store.put(f"{split}/{INDEX}", data)

    def _upload(self, split: str, info: ShardInfo, data: bytes, members: list[tuple[uuid.UUID, int]]):
        """Tar first, then its record: the record is what makes the shard complete."""
        stem = info.name.removesuffix(".tar")
        self.store.put(f"{split}/{info.name}", data)
        record = {"format": RECORD_FORMAT, "version": 1, "shard": asdict(info),
                  "data_bytes": sum(n for _, n in members), "ids": [str(i) for i, _ in members]}
        self.store.put(f"{split}/{IDS_DIR}/{stem}.json", (json.dumps(record) + "\n").encode())
        return split, info, members

    def write(self, samples: Iterable[Sample], progress: Progress) -> None:
        listing = self._listing()
        infos = {split: [doc["info"] for doc in docs] for split, docs in self._complete(listing).items()}
        next_number = {
            split: max([*listing.tars.get(split, {}), *listing.records.get(split, set())], default=-1) + 1
            for split in listing.splits
        }
        limit = max(1, min(self.workers, int(SHARD_MEMORY_BUDGET // self.maxsize)))
        flight = InFlight(self.workers, limit, "shard-upload")

        def uploaded(result) -> None:  # runs in this thread, in completion order
            split, info, members = result
            infos.setdefault(split, []).append(info)
            self._write_index(split, infos[split], compare=False)
            progress(len(members), sum(n for _, n in members))

        failed = True
        try:
            for split, run in groupby(labelled(samples, self.label_type), key=lambda s: s.split):
                check_split(split)
                fifo: deque[tuple[uuid.UUID, int]] = deque()

                def tap(run: Iterable[Sample], fifo: deque = fifo) -> Iterator[Sample]:
                    for s in run:
                        fifo.append((s.id, len(s.data)))
                        yield s

                for info, data in pack_shards(tap(run), self.maxsize, self.maxcount):
                    # pack_shards has read one sample past this shard at most: ours are the first ones.
                    members = [fifo.popleft() for _ in range(info.samples)]
                    number = next_number.get(split, 0)
                    next_number[split] = number + 1
                    info.name = SHARD_PATTERN.format(number)
                    flight.submit(self._upload, split, info, data, members, then=uploaded)
                    del data
            failed = False
        finally:
            finish(flight, failed)
            if not failed:
                for split, split_infos in infos.items():
                    self._write_index(split, split_infos)  # also repairs an index a killed writer left behind

    # ---------------------------------------------------------------------------------- reading

    def shard_keys(self) -> list[tuple[str, ShardInfo]]:
        """(split, shard) of every shard the indexes list, in split and name order."""
        return [(split, info) for split in self._listing().indexes for info in self.index(split)]

    def scan(self) -> Iterator[StoredSample]:
        shards = iter(sorted(self.shard_keys(), key=lambda si: (si[0], si[1].name)))
        prefetch = max(1, min(self.workers, 4, int(SHARD_MEMORY_BUDGET // max(self.maxsize, 1))))
        with ThreadPoolExecutor(prefetch, thread_name_prefix="shard-read") as pool:
            pending: deque[tuple[str, str, Future]] = deque()

            def fill() -> None:
                while len(pending) < prefetch and (nxt := next(shards, None)) is not None:
                    split, info = nxt
                    pending.append((split, info.name, pool.submit(self.store.get_or_none, f"{split}/{info.name}")))

            fill()
            while pending:
                split, name, future = pending.popleft()
                fill()
                data = future.result()
                if data is None:
                    log.warning("shard %s/%s listed in the index of %s is missing", split, name, self.store.where)
                    continue
                yield from _samples_of(data, split, f"{self.store.where}/{split}/{name}")


def _samples_of(data: bytes, split: str, where: str) -> Iterator[StoredSample]:
    """StoredSamples of one shard: id from the ``id`` entry, image = first entry, label by extension."""
    try:
        for entries in read_shard(data, where):
            try:
                sample_id = uuid.UUID(entries[ID_ENTRY].decode())
            except (KeyError, ValueError):
                log.warning("sample %s in %s has no valid 'id' entry: skipped", entries.get("__key__"), where)
                continue
            exts = [k for k in entries if k != "__key__"]
            image = entries[exts[0]]
            label: int | bytes | None = None
            for ext in _LABEL_ENTRIES:
                if ext in entries and ext != exts[0]:
                    label = int(entries[ext]) if ext == "cls" else entries[ext]
                    break
            yield StoredSample(sample_id, split, label, image)
    except (ValueError, WorkbenchError) as exc:  # corrupt shard: the samples after the damage are missing
        log.warning("%s", exc)
