"""WebDataset tar shards + index in any `Store`: the writer (`ShardSet`) and the reader, defined once.

Used by the s3-shards and fs backends (writing, scanning), by our loaders over S3 and the local disk, and
by the peers that read our shards. The tar format itself (entries, packing, parsing) is
`workbench.data.shards`; this module is where those tars live in a store and how they are found again.

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
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict
from itertools import groupby
from typing import Any

from workbench.concurrency import InFlight, finish
from workbench.data import (
    ID_ENTRY,
    META_ENTRIES,
    Item,
    Progress,
    Sample,
    ShardInfo,
    StoredSample,
    entry_label,
    pack_shards,
    read_index,
    read_shard,
    write_index,
)
from workbench.errors import WorkbenchError
from workbench.layouts.common import check_split, labelled
from workbench.storage import Store

log = logging.getLogger(__name__)

SHARD_PATTERN = "shard-{:06d}.tar"
_SHARD = re.compile(r"^shard-(\d{6,})\.tar$")
_RECORD = re.compile(r"^shard-(\d{6,})\.json$")
INDEX = "index.json"
IDS_DIR = "ids"
RECORD_FORMAT = "workbench-shard-record"
# In-flight shards are whole tars in memory: at most this many bytes of them (plus the one being packed).
SHARD_MEMORY_BUDGET = 512 * 2**20


# ------------------------------------------------------------------------------------------------ store


def is_shard_key(key: str) -> bool:
    """Whether `key` belongs to the shard layout (tars, records, indexes) rather than the objects layout."""
    parts = key.split("/")
    if len(parts) == 2:
        return bool(_SHARD.match(parts[1])) or parts[1] == INDEX
    return len(parts) == 3 and parts[1] == IDS_DIR and bool(_RECORD.match(parts[2]))


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
    """StoredSamples of one shard: id from the ``uid`` entry, image = first entry, label by extension."""
    try:
        for entries in read_shard(data, where):
            try:
                sample_id = uuid.UUID(entries[ID_ENTRY].decode())
            except (KeyError, ValueError):
                log.warning("sample %s in %s has no valid 'id' entry: skipped", entries.get("__key__"), where)
                continue
            image_ext = next(k for k in entries if k != "__key__")
            yield StoredSample(sample_id, split, entry_label(entries, image_ext, "any", where), entries[image_ext])
    except (ValueError, WorkbenchError) as exc:  # corrupt shard: the samples after the damage are missing
        log.warning("%s", exc)


# ------------------------------------------------------------------------------------------ reading


def read_split_index(store: Store, split: str, dataset: str) -> list[ShardInfo]:
    """A split's shard index, with errors that say what to do (no index: ingest first, or pass bucket/prefix)."""
    where = f"{store.where}/{split}/{INDEX}"
    try:
        data, _ = store.get(f"{split}/{INDEX}")
    except KeyError:
        raise WorkbenchError(
            f"no shard index at {where}: dataset '{dataset}' split '{split}' was not ingested as shards there "
            "(`workbench ingest --backend s3-shards`, or fs with --layout shards), or pass bucket/prefix/root"
        ) from None
    try:
        return read_index(data)
    except WorkbenchError as exc:
        raise WorkbenchError(f"{where}: {exc}") from None


def fetch_shard(store: Store, split: str, info: ShardInfo) -> bytes:
    """The bytes of one indexed shard, checked against the size the index records."""
    where = f"{store.where}/{split}/{info.name}"
    try:
        data, _ = store.get(f"{split}/{info.name}")
    except KeyError:
        raise WorkbenchError(f"shard {where} is listed in the index but missing: re-run the ingest") from None
    if len(data) != info.bytes:
        raise WorkbenchError(
            f"shard {where}: corrupt or truncated ({len(data)} bytes, the index says {info.bytes}): re-run the ingest")
    return data


def sample_item(entries: dict[str, Any], label_type: str) -> Item:
    """An Item from one sample's entries: key = the ``uid`` entry, data = the image (first) entry, label per type."""
    where = f"sample {_shown(entries.get('__key__'))} in {entries.get('__url__', 'a shard')}"
    raw_id = entries.get(ID_ENTRY)
    if raw_id is None:
        raise WorkbenchError(f"{where} has no '{ID_ENTRY}' entry: not a workbench shard (ingest with workbench)")
    try:
        key = raw_id.decode() if isinstance(raw_id, bytes) else str(raw_id)
    except UnicodeDecodeError:
        raise WorkbenchError(f"{where}: its '{ID_ENTRY}' entry is not UTF-8 text: not a workbench shard") from None
    where = f"sample {_shown(key)} in {entries.get('__url__', 'a shard')}"
    image_ext = next((k for k in entries if not k.startswith("__")), None)
    if image_ext is None or image_ext in META_ENTRIES:
        raise WorkbenchError(f"{where} has no image entry")
    return Item(key, entry_label(entries, image_ext, label_type, where), entries[image_ext])


def _shown(name: object) -> str:
    """A name from a shard as printed in an error: as is, or quoted and escaped when it holds newlines."""
    text = str(name)
    return text if text.isprintable() else repr(text)


def shard_items(data: bytes, where: str, label_type: str) -> Iterator[Item]:
    """Items of one shard's bytes, in the order they were written."""
    for entries in read_shard(data, where):
        entries["__url__"] = where
        yield sample_item(entries, label_type)
