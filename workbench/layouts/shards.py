"""WebDataset tar shards + index in any `Store`: the writer (`ShardSet`) and the reader, defined once.

Used by the s3-shards and fs backends (writing, scanning), by our loaders over S3 and the local disk, and
by the peers that read our shards. The tar format itself (entries, packing, parsing) is
`workbench.data.shards`; this module is where those tars live in a store and how they are found again.

Shard set layout, per split::

    <split>/shard-000000.tar        WebDataset tar (workbench.data.pack_shards), one per maxsize/maxcount
    <split>/ids/shard-000000.json   completion record: the shard's ShardInfo, its sample rows and ids
    <split>/index.json              workbench.data.write_index of the complete shards, in name order

Readers cut samples out of a shard by the spans the index records (`workbench.data.shard_spans`): one GET
of the whole shard read as its pieces (`Store.get_ranges`: each entry's header region and data, straight
into `bytes` where the store has a native client), or ranged GETs of the samples wanted; one CRC of each
sample's tar headers; no tar parsing. A version-1 index (no spans) falls back to parsing the tar; the next
ingest into such a set (even one with nothing new) parses its shards once and writes their rows.

A shard is complete once its tar is stored AND its record is written after it (and the tar still has
the size the record says). `stored_ids` is the union of the complete records; the index is rebuilt
from them after every uploaded shard, so an interrupted ingest leaves an index of complete shards only.
A resumed ingest numbers its shards after the highest shard or record found, so it never overwrites a
shard (a tar left without a record by a killed writer stays unused: it is in no index).

Several writers at once (the partitions of a Spark ingest, `workbench.ingest_spark`): `free_blocks` reserves a
block of shard numbers per writer, and each writer's `numbers` is its block: it numbers its shards from the
block's start whatever it finds, so every attempt of a partition writes the same (byte-identical) shards under
the same names, and a retry overwrites what its failed attempt wrote instead of adding to it. The indexes are
left to one plain `write` (of nothing) after all writers, which rebuilds them from the complete records.

Samples are packed per run of consecutive samples of one split (sources yield their splits one after
the other); a source that interleaves splits gets a partly filled shard at every switch.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import sys
import uuid
import zlib
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from itertools import groupby
from typing import Any

from workbench.concurrency import InFlight, finish
from workbench.data import (
    BLOB_LABEL_ENTRIES,
    ID_ENTRY,
    INT_LABEL_ENTRY,
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
from workbench.data.shard_spans import BLOCK, SampleSpan, SpanTable
from workbench.data.shards import check_span, headers_changed, slice_shard, span_key, spans_from_tar, split_name
from workbench.errors import WorkbenchError
from workbench.layouts.common import check_split, labelled
from workbench.storage import Store, WrongSize

log = logging.getLogger(__name__)

SHARD_PATTERN = "shard-{:06d}.tar"
_SHARD = re.compile(r"^shard-(\d{6,})\.tar$")
_RECORD = re.compile(r"^shard-(\d{6,})\.json$")
INDEX = "index.json"
IDS_DIR = "ids"
RECORD_FORMAT = "workbench-shard-record"
# In-flight shards are whole tars in memory: at most this many bytes of them (plus the one being packed).
SHARD_MEMORY_BUDGET = 512 * 2**20
# Ranged reads of some samples of a shard: samples less than this apart are read in one range (the gap is
# cheaper to transfer than another request).
RANGE_GAP = 256 * 2**10
# Shard numbers reserved for each writer of a partitioned ingest (`free_blocks`).
PARTITION_BLOCK = 10_000


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
        self.numbers: range | None = None  # one of several writers at once: its block (module docstring)

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
        try:
            doc["info"].with_rows(doc.get("members"))
        except (ValueError, TypeError) as exc:  # the shard is fine; its readers parse it instead of slicing
            log.warning("ignoring the sample rows of shard record %s in %s: %s", key, self.store.where, exc)
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
        self.store.put(f"{split}/{info.name}", data)
        self._put_record(split, info, sum(n for _, n in members), [i for i, _ in members])
        return split, info, members

    def _put_record(self, split: str, info: ShardInfo, data_bytes: int, ids: list[uuid.UUID]) -> None:
        record = {"format": RECORD_FORMAT, "version": 2, "shard": info.fields(), "members": info.rows(),
                  "data_bytes": data_bytes, "ids": [str(i) for i in ids]}
        self.store.put(f"{split}/{IDS_DIR}/{info.name.removesuffix('.tar')}.json", (json.dumps(record) + "\n").encode())

    def _add_spans(self, split: str, doc: dict) -> None:
        """Give a complete shard written before index version 2 its sample rows (read and parsed once, record
        rewritten): the index written after this ingest lets readers slice it too. A shard that cannot be
        parsed keeps its old record (a warning says why)."""
        info: ShardInfo = doc["info"]
        data = self.store.get_or_none(f"{split}/{info.name}")
        try:
            if data is None or len(data) != info.bytes:
                raise WorkbenchError(f"shard {self.store.where}/{split}/{info.name} changed or vanished")
            info.members = spans_from_tar(data, f"{self.store.where}/{split}/{info.name}")
        except WorkbenchError as exc:
            log.warning("%s: its readers keep parsing it", exc)
            return
        self._put_record(split, info, doc.get("data_bytes", 0), doc["ids"])

    def write(self, samples: Iterable[Sample], progress: Progress) -> None:
        listing = self._listing()
        complete = self._complete(listing)
        old = [(split, doc) for split, docs in complete.items() for doc in docs if doc["info"].members is None]
        if old:  # a shard set from before index version 2
            log.info("adding sample rows to %d shard(s) in %s (index version 2)", len(old), self.store.where)
            with ThreadPoolExecutor(min(max(1, self.workers), 4)) as pool:
                list(pool.map(lambda sd: self._add_spans(*sd), old))
        infos = {split: [doc["info"] for doc in docs] for split, docs in complete.items()}
        numbers = self.numbers or range(sys.maxsize)
        next_number = {} if self.numbers is not None else {  # after the highest shard or record found
            split: max([*listing.tars.get(split, {}), *listing.records.get(split, set())], default=-1) + 1
            for split in listing.splits
        }
        limit = max(1, min(self.workers, int(SHARD_MEMORY_BUDGET // self.maxsize)))
        flight = InFlight(self.workers, limit, "shard-upload")

        def uploaded(result) -> None:  # runs in this thread, in completion order
            split, info, members = result
            infos.setdefault(split, []).append(info)
            if self.numbers is None:
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
                    number = next_number.get(split, numbers.start)
                    if number not in numbers:
                        raise WorkbenchError(f"a partition of the ingest into {self.store.where} needs more than "
                                             f"{len(numbers)} shards: use more partitions")
                    next_number[split] = number + 1
                    info.name = SHARD_PATTERN.format(number)
                    flight.submit(self._upload, split, info, data, members, then=uploaded)
                    del data
            failed = False
        finally:
            finish(flight, failed)
            if not failed and self.numbers is None:
                for split, split_infos in infos.items():
                    self._write_index(split, split_infos)  # also repairs an index a killed writer left behind

    def free_blocks(self, count: int) -> list[range]:
        """`count` disjoint blocks of PARTITION_BLOCK shard numbers after every shard and record found: one per
        writer of a partitioned ingest (each writer's `numbers`)."""
        listing = self._listing()
        found = [n for split in listing.splits for n in (*listing.tars.get(split, {}), *listing.records.get(split, ()))]
        first = max(found, default=-1) + 1
        return [range(first + p * PARTITION_BLOCK, first + (p + 1) * PARTITION_BLOCK) for p in range(count)]

    # ---------------------------------------------------------------------------------- reading

    def shard_keys(self) -> list[tuple[str, ShardInfo]]:
        """(split, shard) of every shard the indexes list, in split and name order."""
        return [(split, info) for split in self._listing().indexes for info in self.index(split)]

    def scan(self) -> Iterator[StoredSample]:
        shards = iter(sorted(self.shard_keys(), key=lambda si: (si[0], si[1].name)))
        prefetch = max(1, min(self.workers, 4, int(SHARD_MEMORY_BUDGET // max(self.maxsize, 1))))
        with ThreadPoolExecutor(prefetch, thread_name_prefix="shard-read") as pool:
            pending: deque[tuple[str, ShardInfo, Future]] = deque()

            def fill() -> None:
                while len(pending) < prefetch and (nxt := next(shards, None)) is not None:
                    split, info = nxt
                    pending.append((split, info, pool.submit(self.store.get_or_none, f"{split}/{info.name}")))

            fill()
            while pending:
                split, info, future = pending.popleft()
                fill()
                data = future.result()
                if data is None:
                    log.warning("shard %s/%s listed in the index of %s is missing", split, info.name, self.store.where)
                    continue
                yield from _samples_of(data, split, f"{self.store.where}/{split}/{info.name}", info)


def _samples_of(data: bytes, split: str, where: str, info: ShardInfo) -> Iterator[StoredSample]:
    """StoredSamples of one shard: id from the ``uid`` entry, image = first entry, label by extension."""
    try:
        if len(data) != info.bytes:
            raise WorkbenchError(f"shard {where}: {len(data)} bytes, the index says {info.bytes}")
        for entries in (read_shard(data, where) if info.members is None else slice_shard(data, info.members, where)):
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


def fetch_shard(store: Store, split: str, info: ShardInfo) -> memoryview:
    """The bytes of one indexed shard (a view of the client's buffer: readers copy out only the samples),
    checked against the size the index records."""
    where = f"{store.where}/{split}/{info.name}"
    try:
        data = store.get_view(f"{split}/{info.name}")
    except KeyError:
        raise _missing(where) from None
    if len(data) != info.bytes:
        raise _wrong_size(where, len(data), info)
    return data


def _missing(where: str) -> WorkbenchError:
    return WorkbenchError(f"shard {where} is listed in the index but missing: re-run the ingest")


def _wrong_size(where: str, actual: int, info: ShardInfo) -> WorkbenchError:
    return WorkbenchError(f"shard {where}: corrupt or truncated ({actual} bytes, the index says {info.bytes}): "
                          "re-run the ingest")


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


def shard_items(data: bytes | memoryview, where: str, label_type: str, spans: Sequence[SampleSpan] | None = None,
                base: int = 0) -> list[Item]:
    """Items of one shard's bytes, in the order they were written: sliced out by the index's `spans` when it
    has them (`data` holds the shard from byte `base`), else parsed from the tar."""
    if spans is None:
        return [sample_item({**entries, "__url__": where}, label_type) for entries in read_shard(data, where)]
    items = []
    for span in spans:
        check_span(data, span, where, base)
        items.append(_sliced_item(data, span, where, label_type, base))
    return items


def _sliced_item(data: bytes | memoryview, span: SampleSpan, where: str, label_type: str, base: int) -> Item:
    """`sample_item` of one sample, by slices: the common cases here, anything else through `sample_item` itself
    (same labels, same errors)."""
    image, uid = span.members[0], span.by_ext.get(ID_ENTRY)
    if uid is None or image.ext in META_ENTRIES:
        return sample_item(_entries(data, span, where, base), label_type)
    try:
        key = str(data[uid.offset - base : uid.offset - base + uid.size], "utf-8")
    except UnicodeDecodeError:
        return sample_item(_entries(data, span, where, base), label_type)
    label: int | bytes | None = None
    m = None
    if label_type == "int":
        m = span.by_ext.get(INT_LABEL_ENTRY)
    elif label_type == "blob":
        m = next((span.by_ext[e] for e in BLOB_LABEL_ENTRIES if e in span.by_ext and e != image.ext), None)
    if m is not None:
        label = bytes(data[m.offset - base : m.offset - base + m.size])
        if label_type == "int":
            try:
                label = int(label)  # what entry_label does with the 'cls' bytes
            except ValueError:
                m = None
    if m is None and label_type != "none":  # 'any', or a label missing or bad: the one rule decides, words the error
        return sample_item(_entries(data, span, where, base), label_type)
    # bytes() copies out of a view (a shard's buffer must not live on in the shuffle buffer); a bytes slice is a copy
    return Item(key, label, bytes(data[image.offset - base : image.offset - base + image.size]))


def _entries(data: bytes | memoryview, span: SampleSpan, where: str, base: int) -> dict[str, Any]:
    """The webdataset-style dict of one sliced sample (``__key__``, ``__url__``, entries)."""
    entries: dict[str, Any] = {"__key__": span_key(data, span, base), "__url__": where}
    for m in span.members:
        entries[m.ext] = bytes(data[m.offset - base : m.offset - base + m.size])
    return entries


def reserve_items(store: Store, info: ShardInfo) -> Any | None:
    """Memory for all of one shard's pieces, made in the calling thread, for a `fetch_items` of the whole shard
    in another (`Store.reserve_ranges`: a reader that GETs shards on a pool keeps their pieces in the heap of
    the thread that consumes them). None when the shard is not read as pieces or the store has no use for it."""
    return store.reserve_ranges(info.members.pieces()) if isinstance(info.members, SpanTable) else None


def fetch_items(store: Store, split: str, info: ShardInfo, label_type: str,
                which: Sequence[int] | None = None, reserved: Any | None = None) -> list[Item]:
    """Items of one indexed shard: all of them from one GET of the shard (into `reserved`, `reserve_items` of
    it, when given), or with `which` (sample positions in the shard) only those, from ranged GETs of their
    bytes when the index has the shard's spans.

    Either way the shard's size must be what the index says; damage is a WorkbenchError naming the shard.
    """
    where = f"{store.where}/{split}/{info.name}"
    if which is None and isinstance(info.members, SpanTable):
        return _piece_items(store, split, info, info.members, label_type, reserved)
    if which is None or info.members is None:
        items = shard_items(fetch_shard(store, split, info), where, label_type, info.members)
        return items if which is None else [items[i] for i in which]
    key = f"{split}/{info.name}"
    try:
        head = store.head(key)
    except KeyError:
        raise _missing(where) from None
    if head.size != info.bytes:
        raise _wrong_size(where, head.size, info)
    items = []
    for run in sample_runs([info.members[i] for i in which]):
        start = run[0].start
        try:
            data = store.get_range(key, start, max(s.end for s in run), head.etag)
        except KeyError:
            raise WorkbenchError(f"shard {where} was deleted while it was read: re-run the ingest") from None
        items += shard_items(data, where, label_type, run, base=start)
    return items


def _piece_items(store: Store, split: str, info: ShardInfo, table: SpanTable, label_type: str,
                 reserved: Any | None = None) -> list[Item]:
    """Items of a shard whose samples have the same entries, from its pieces (`SpanTable.pieces`, one
    `Store.get_ranges`): each payload is its own `bytes` as read (no whole shard in memory, no slice in Python),
    each sample's header pieces checked against its CRC; a sample off the common case goes through
    `sample_item` (same labels, same errors as `_sliced_item`)."""
    where = f"{store.where}/{split}/{info.name}"
    try:
        pieces = store.get_ranges(f"{split}/{info.name}", info.bytes, table.pieces(), reserved)
    except KeyError:
        raise _missing(where) from None
    except WrongSize as exc:
        raise _wrong_size(where, exc.actual, info) from None
    exts, width = table.exts, 2 * len(table.exts) + 1
    label_ext = {"int": INT_LABEL_ENTRY if INT_LABEL_ENTRY in exts else None,
                 "blob": next((e for e in BLOB_LABEL_ENTRIES if e in exts[1:]), None)}.get(label_type)
    common = ID_ENTRY in exts and exts[0] not in META_ENTRIES and (label_ext is not None or label_type == "none")
    uid_at = 2 * exts.index(ID_ENTRY) + 1 if ID_ENTRY in exts else 0
    label_at = 2 * exts.index(label_ext) + 1 if label_ext else 0
    starts, crcs = table.checks()
    items = []
    for n, (start, expected) in enumerate(zip(starts, crcs, strict=True)):
        at, crc = n * width, 0
        for header in range(at, at + width, 2):
            crc = zlib.crc32(pieces[header], crc)
        if crc != expected:
            raise headers_changed(where, start)
        try:
            if not common:
                raise ValueError("not the common case")
            key = str(pieces[at + uid_at], "utf-8")
            label = None if label_type == "none" else int(pieces[at + label_at]) if label_type == "int" \
                else pieces[at + label_at]
            items.append(Item(key, label, pieces[at + 1]))
        except ValueError:  # UnicodeDecodeError too: the one rule decides, and words the error
            items.append(sample_item(_piece_entries(pieces[at : at + width], exts, where), label_type))
    return items


def _piece_entries(sample: Sequence[bytes], exts: Sequence[str], where: str) -> dict[str, Any]:
    """The webdataset-style dict of one sample from its pieces: its key is in its first header's name field."""
    name = sample[0][-BLOCK:][:100].split(b"\0", 1)[0].decode("utf-8", errors="replace")
    entries: dict[str, Any] = {"__key__": split_name(name)[0], "__url__": where}
    entries.update(zip(exts, sample[1::2], strict=True))
    return entries


def sample_runs(spans: Sequence[SampleSpan], gap: int = RANGE_GAP) -> list[list[SampleSpan]]:
    """Spans grouped into runs that one ranged read covers: each next span starts at most `gap` bytes after the
    previous one ends (in the order given; a span before its predecessor starts a new run)."""
    runs: list[list[SampleSpan]] = []
    for span in spans:
        if runs and runs[-1][-1].end <= span.start <= runs[-1][-1].end + gap:
            runs[-1].append(span)
        else:
            runs.append([span])
    return runs
