"""The local filesystem loader: the baseline every remote loader is compared with.

Reads the two layouts of `workbench.backends.fs` (root from the catalog, or the ``root`` setting; the
layout is recognised from the files: ``<root>/<split>/index.json`` means shards):

* ``imagefolder``: the split's files are listed once per loader from the ingest's manifest
  (``<root>/<split>/manifest.txt``) joined with its journal (``<root>/_journal/*.jsonl``, which maps each
  file to its sample id and label; without a manifest, the journal's files that exist). Each epoch takes
  this epoch's order (`epoch_order`), this rank's and DataLoader worker's share (`take_shard`) and reads
  ``concurrency`` files at a time, ``files_per_request`` back to back per thread, in order or as they
  complete (``ordered``).
* ``shards``: the split's tar shards from its ``index.json``; shards are shuffled per epoch and split
  across ranks x workers (so with fewer shards than readers some readers get none), read a few at a time
  and cut into Items by the spans of a version-2 index (slices, no tar parsing; a version-1 index: parsed
  with `read_shard`); samples then go through a seeded ``shuffle_buffer``, as with S3 shards.

Resuming mid-epoch (a loaded `state_dict`): imagefolder skips the files already delivered; shards replay the
shuffle buffer on positions (`resume_shards`) and read only the shards still holding samples to come.

A missing or unreadable file raises a WorkbenchError naming it.
``raw_ceiling(settings, config)`` reads the same files with plain threads: what the disk gives at best.
"""

from __future__ import annotations

import json
import logging
import os
import random
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import numpy as np
from pydantic import Field

from workbench.backends import locate
from workbench.concurrency import LazyPool, PicklesWithoutLocks, fixed_depth, in_flight, make_window
from workbench.config import Settings
from workbench.data import ShardInfo, read_index
from workbench.errors import WorkbenchError
from workbench.layouts.objects import JOURNAL, MANIFEST, SIDECAR
from workbench.layouts.shards import INDEX, shard_items
from workbench.loaders.base import Item, Loader, LoaderConfig, RequestModel
from workbench.loaders.order import effective_shard, epoch_order, resume_shards, shuffle_buffer, take_shard
from workbench.storage.native_ext import load_extension

log = logging.getLogger(__name__)

SHARDS_IN_FLIGHT = 4  # whole shards (up to maxsize each) held in memory at once


class FilesystemLoaderConfig(LoaderConfig):
    root: Path | None = Field(None, description="dataset folder (default: the catalog's, as ingested)")
    shuffle_buffer: int = Field(1000, ge=0, le=1_000_000, description="shards: samples in the shuffle buffer")
    files_per_request: int = Field(16, ge=1, le=1024, description=(
        "imagefolder: files one thread reads back to back per request (page-cache reads take microseconds; "
        "handing each file to a thread on its own costs more than reading it); `concurrency` still counts files"))


@dataclass(frozen=True, slots=True)
class FileEntry:
    rel: str  # path relative to the root, '/'-separated
    id: str
    label: int | None
    blob: bool
    size: int | None = None  # bytes at ingest (the journal's), to reserve its read's memory (`read_many`)


class FileList(Sequence[FileEntry]):
    """A split's sample files as a few packed columns, not an object per file: 20,000 files took 7 MB as
    FileEntry objects (360 bytes a file, held for the loader's life: 360 MB for a million), about 100 bytes a
    file here. Indexing makes one file's FileEntry; a reader makes them a request at a time."""

    def __init__(self, entries: Sequence[FileEntry]) -> None:
        self._rels, self._rel_at = _packed([entry.rel for entry in entries])
        self._ids, self._id_at = _packed([entry.id for entry in entries])
        self._labels = [entry.label for entry in entries]  # small ints are shared objects: 8 bytes a file
        self._blobs = np.fromiter((entry.blob for entry in entries), dtype=bool, count=len(entries))
        self._sizes = np.fromiter((-1 if entry.size is None else entry.size for entry in entries), dtype=np.int64,
                                  count=len(entries))

    def __len__(self) -> int:
        return len(self._labels)

    def __getitem__(self, i: int) -> FileEntry:  # type: ignore[override]  # no slices: take positions instead
        i = self._position(i)
        size = int(self._sizes[i])
        return FileEntry(self._rels[self._rel_at[i]:self._rel_at[i + 1]], self.id(i), self._labels[i],
                         bool(self._blobs[i]), None if size < 0 else size)

    def id(self, i: int) -> str:
        i = self._position(i)
        return self._ids[self._id_at[i]:self._id_at[i + 1]]

    def _position(self, i: int) -> int:
        at = i + len(self) if i < 0 else i
        if not 0 <= at < len(self):
            raise IndexError(f"file {i} of {len(self)}")
        return at

    def sizes(self, positions: Sequence[int]) -> list[int | None]:
        return [None if size < 0 else size for size in self._sizes[positions].tolist()]


def _packed(strings: list[str]) -> tuple[str, np.ndarray]:
    """The strings joined, and where each starts (one more: the end): string i is joined[at[i]:at[i + 1]]."""
    at = np.zeros(len(strings) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, strings), dtype=np.int64, count=len(strings)), out=at[1:])
    return "".join(strings), at


class FilesystemLoader(PicklesWithoutLocks, Loader):
    name = "fs"
    request_model = RequestModel("reads local files: no round trip to bound it", per_request=None)
    backend = "fs"
    Config = FilesystemLoaderConfig
    config: FilesystemLoaderConfig

    def __init__(self, settings: Settings, config: LoaderConfig, worker_id: int = 0, num_workers: int = 1) -> None:
        super().__init__(settings, config, worker_id, num_workers)
        self._root: Path | None = None
        self._files: FileList | None = None
        self._shards: list[ShardInfo] | None = None
        self._pool = LazyPool(self.config.concurrency, "fs-read", wait_on_close=True)
        # imagefolder: requests of files_per_request files; kept across epochs, so a settled "auto" stays
        self._window = make_window(self.config.concurrency, self.config.files_per_request)

    @property
    def window_history(self) -> list[int]:
        """Files in flight, every depth the window took (recorded in results): its requests x files_per_request.
        Empty for the shards layout, which reads a fixed number of shards at once."""
        if self.layout == "shards":
            return []
        return [depth * self.config.files_per_request for depth in self._window.history]

    @property
    def window_tuning(self) -> bool:
        return self.layout != "shards" and self._window.tuning

    # ------------------------------------------------------------------------------- layout

    @property
    def root(self) -> Path:
        if self._root is None:
            if self.config.root is not None:
                self._root = Path(self.config.root).expanduser()
            else:
                entry = locate(self.settings, "fs", self.config.dataset)
                self._root = Path(entry["root"]).expanduser()
        return self._root

    @property
    def split_dir(self) -> Path:
        return self.root / self.config.split

    @property
    def layout(self) -> str:
        return "shards" if (self.split_dir / INDEX).is_file() else "imagefolder"

    def _check_split(self) -> None:
        if not self.split_dir.is_dir():
            found = sorted(p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))) \
                if self.root.is_dir() else []
            where = f"{self.root} (splits: {', '.join(found) or 'none'})" if self.root.is_dir() else \
                f"{self.root}, which does not exist (ingest the dataset, or set root)"
            raise WorkbenchError(f"no split '{self.config.split}' of dataset '{self.config.dataset}' in {where}")

    def files(self) -> FileList:
        """The split's sample files in path order (listed once per loader)."""
        if self._files is None:
            self._check_split()
            self._files = list_files(self.root, self.config.split)
        return self._files

    def shards(self) -> list[ShardInfo]:
        """The split's shards, as its index lists them (read once per loader)."""
        if self._shards is None:
            self._check_split()
            path = self.split_dir / INDEX
            try:
                self._shards = read_index(path.read_bytes())
            except OSError as exc:
                raise WorkbenchError(f"cannot read {path}: {exc.strerror or exc}") from exc
            except WorkbenchError as exc:
                raise WorkbenchError(f"{path}: {exc}") from None
            if not self._shards:
                raise WorkbenchError(f"{path} lists no shard: re-run the ingest")
        return self._shards

    # ------------------------------------------------------------------------------- reading

    def _shard(self) -> tuple[int, int]:
        c = self.config
        return effective_shard(c.shard_id, c.num_shards, self.worker_id, self.num_workers)

    def iter_epoch(self, epoch: int) -> Iterator[Item]:
        if self.layout == "shards":
            return self._shards_epoch(epoch)
        return self._files_epoch(epoch)

    def _files_epoch(self, epoch: int) -> Iterator[Item]:
        c = self.config
        files = self.files()
        order = self.unread(epoch, take_shard(epoch_order(range(len(files)), c.seed, epoch, c.shuffle),
                                              *self._shard()), key=files.id)
        pool = self._pool.get()
        step = c.files_per_request
        requests = [order[i:i + step] for i in range(0, len(order), step)]

        def submit(run: list[int]) -> Future[list[Item]]:
            # the files' bytes objects are made here, in the thread that consumes them: one heap holds them all,
            # not one heap per pool thread (`reserve`)
            return pool.submit(self._read_files, [files[i] for i in run], reserve(files.sizes(run)))

        for _, items in in_flight(requests, submit, self._window, c.ordered):
            yield from items

    def _read_files(self, entries: list[FileEntry], reserved: Any | None = None) -> list[Item]:
        """One request: its files in one call of the extension (no GIL while it reads; into `reserved` when
        given), else one by one."""
        if self.config.label_type != "none" and any(entry.blob for entry in entries):
            return [self._read_file(entry) for entry in entries]
        bodies = read_many([self.root / entry.rel for entry in entries], [f"sample {entry.id}" for entry in entries],
                           reserved)
        labels = self.config.label_type != "none"
        return [Item(entry.id, entry.label if labels else None, data)
                for entry, data in zip(entries, bodies, strict=True)]

    def _read_file(self, entry: FileEntry) -> Item:
        data = read_bytes(self.root / entry.rel, f"sample {entry.id}")
        label: int | bytes | None = None
        if self.config.label_type != "none":
            if entry.blob:
                label = read_bytes(self.root / (entry.rel + SIDECAR), f"label of sample {entry.id}")
            else:
                label = entry.label
        return Item(entry.id, label, data)

    def _shards_epoch(self, epoch: int) -> Iterator[Item]:
        c = self.config
        shards = self.shards()
        index, count = self._shard()
        if count > len(shards) and index == 0:
            log.warning("%d readers (ranks x workers) but only %d shards in %s: some readers get nothing",
                        count, len(shards), self.split_dir)
        mine = take_shard(epoch_order(shards, c.seed, epoch, c.shuffle), index, count)
        pool = self._pool.get()
        depth = max(1, min(fixed_depth(c.concurrency), SHARDS_IN_FLIGHT))
        size = c.shuffle_buffer if c.shuffle else 0
        rng = random.Random(f"{c.seed}:{epoch}:{index}")
        start = self.resume_position(epoch)
        if start and mine:  # resuming: shards the shuffle buffer had emptied are not read again
            resume = resume_shards([info.samples for info in mine], size, rng, start)
            wanted = in_flight(resume.plan, lambda p: pool.submit(self._shard_members, mine[p[0]], p[1]), depth)
            yield from resume.items(items for _, items in wanted)
            return
        stream = (item for _, data in in_flight(mine, lambda s: pool.submit(self._read_shard_file, s), depth,
                                                c.ordered)
                  for item in data)
        yield from shuffle_buffer(stream, size, rng)

    def _shard_members(self, info: ShardInfo, members: list[int]) -> list[Item]:
        """The samples at positions `members` of one shard file (a resumed epoch)."""
        items = self._read_shard_file(info)
        if len(items) != info.samples:
            raise WorkbenchError(f"shard {self.split_dir / info.name} holds {len(items)} samples, its index says "
                                 f"{info.samples}: cannot resume mid-epoch exactly; re-run the ingest")
        return [items[m] for m in members]

    def _read_shard_file(self, info: ShardInfo) -> list[Item]:
        path = self.split_dir / info.name
        data = read_bytes(path, "shard")
        if len(data) != info.bytes:
            raise WorkbenchError(f"shard {path}: corrupt or truncated ({len(data)} bytes, the index says "
                                 f"{info.bytes}): re-run the ingest")
        return shard_items(data, str(path), self.config.label_type, info.members)

    def close(self) -> None:
        self._pool.close()

    @classmethod
    def raw_ceiling(cls, settings: Settings, config: LoaderConfig | dict) -> tuple[int, int]:
        return raw_ceiling(settings, config)


# ------------------------------------------------------------------------------------------ helpers


def read_bytes(path: Path, what: str) -> bytes:
    """The whole file, with the fewest calls (open, fstat, read, close: no buffered file object)."""
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            data = os.read(fd, size)
            if len(data) < size:  # a read returns at most about 2 GiB at once on Linux
                data += b"".join(iter(lambda: os.read(fd, 1 << 30), b""))
            return data
        finally:
            os.close(fd)
    except (FileNotFoundError, NotADirectoryError):
        raise WorkbenchError(f"missing file {path} ({what}): deleted since the ingest? re-run the ingest") from None
    except OSError as exc:
        raise WorkbenchError(f"cannot read {path} ({what}): {exc.strerror or exc}") from exc


def reserve(sizes: list[int | None]) -> Any | None:
    """The `bytes` objects of a later `read_many` of files of these sizes, made now, in the calling thread
    (`workbench_native.reserve`); None without the extension or when a size is unknown (an older journal).

    Why: glibc gives each thread that allocates its own heap, with its own high-water mark; files read on a
    pool of threads into objects made there spread over one heap per thread (fs at 20,000 files: 115 MB peak
    against 94 with one request in flight). A file whose size changed since is read into a new object."""
    native = load_extension("local files are read one Python call each")
    if native is None or None in sizes:
        return None
    return native.reserve(np.asarray(sizes, dtype=np.int64))


def read_many(paths: list[Path], whats: list[str], reserved: Any | None = None) -> list[bytes]:
    """`read_bytes` of every path, in one call of `workbench_native.read_files` when it is installed (the files
    are read without the GIL, so a second reading thread uses a second core; into `reserved`, `reserve` of
    their sizes, when given); the same errors either way."""
    native = load_extension("local files are read one Python call each")
    if native is None:
        return [read_bytes(path, what) for path, what in zip(paths, whats, strict=True)]
    try:
        return native.read_files([os.fspath(path) for path in paths], reserved)
    except OSError:  # read them again one by one: the failing file raises its one-line error
        return [read_bytes(path, what) for path, what in zip(paths, whats, strict=True)]


def read_journal(root: Path) -> dict[str, FileEntry | None]:
    """key -> its latest journal record as a FileEntry (None: the record has no sample id); parts are read in
    name order, line by line, keeping only what a reader needs (memory flat in the dataset's size)."""
    records: dict[str, FileEntry | None] = {}
    folder = root / JOURNAL
    if not folder.is_dir():
        return records
    for part in sorted(p for p in folder.iterdir() if p.name.endswith(".jsonl") and not p.name.startswith(".")):
        try:
            with part.open(errors="replace") as lines:
                for line in lines:
                    try:
                        record = json.loads(line)
                        key, label = record["key"], record.get("label")
                        size = record.get("size")
                        records[key] = None if "id" not in record else FileEntry(
                            key, str(record["id"]), int(label) if label is not None else None,
                            bool(record.get("blob")), size if isinstance(size, int) and 0 <= size < 2**62 else None)
                    except (ValueError, KeyError, TypeError, RecursionError):  # RecursionError: deep JSON
                        log.warning("ignoring a bad line in journal part %s", part)
        except OSError as exc:
            raise WorkbenchError(f"cannot read {part}: {exc.strerror or exc}") from exc
    return records


def list_files(root: Path, split: str) -> FileList:
    """Every sample file of `split`: the manifest's keys (else the journal's that exist), with ids and labels."""
    records = read_journal(root)
    manifest = root / split / MANIFEST
    if manifest.is_file():
        try:
            with manifest.open() as lines:
                keys = [f"{split}/{unquote(line.partition(' ')[0])}" for line in lines if line.strip()]
        except OSError as exc:
            raise WorkbenchError(f"cannot read {manifest}: {exc.strerror or exc}") from exc
    else:
        present = {p.relative_to(root).as_posix() for p in (root / split).rglob("*") if p.is_file()}
        keys = [k for k in records if k in present]
    keys.sort()
    entries = []
    for key in keys:
        entry = records.get(key)
        if entry is None:
            raise WorkbenchError(f"{root / key} has no sample id in the ingest journal ({root / JOURNAL}): "
                                 "re-run the ingest")
        entries.append(entry)
    if not entries:
        raise WorkbenchError(f"no samples of split '{split}' under {root}: ingest the dataset first")
    return FileList(entries)


def raw_ceiling(settings: Settings, config: LoaderConfig | dict) -> tuple[int, int]:
    """(samples, bytes) of plain threaded reads of every file of the split (sample files, or whole shards)."""
    c = config if isinstance(config, FilesystemLoaderConfig) else FilesystemLoaderConfig(
        **(config.model_dump() if isinstance(config, LoaderConfig) else config))
    loader = FilesystemLoader(settings, c)
    if loader.layout == "shards":
        shards = loader.shards()
        paths = [loader.split_dir / s.name for s in shards]
        samples = sum(s.samples for s in shards)
    else:
        files = loader.files()
        paths = [loader.root / f.rel for f in files]
        samples = len(files)
    with ThreadPoolExecutor(fixed_depth(c.concurrency), thread_name_prefix="fs-raw") as pool:
        nbytes = sum(pool.map(lambda p: len(read_bytes(p, "raw read")), paths))
    return samples, nbytes
