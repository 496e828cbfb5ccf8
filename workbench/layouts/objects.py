"""One object per sample + a manifest per split, in any `Store`: the writer (`ObjectSet`) and its reader.

The OSS-connector / "bucket of JPEGs" layout on S3 (`workbench.backends.s3_objects`) and the
ImageFolder copy on the local disk (`workbench.backends.fs`). Under the store's root::

    <split>/<class>/<basename>          the encoded image, bytes as given; its name is the sample's name
                                        ("class_003/img_0000042.jpg"); a name without a class folder goes
                                        under "unlabelled/". x-amz-meta: id (uuid), checksum, and
                                        label (decimal, int labels) or label-object (blob labels)
    <split>/<class>/<basename>.label    blob labels (masks, np.save vectors) as a sidecar object
    <split>/manifest.txt                osstorchconnector manifest: one "key label" line per sample, key
                                        relative to "<prefix>/<split>/", label = the int label, or the
                                        sidecar key for blob labels, or absent (key only) without labels;
                                        '%' and whitespace in keys are percent-encoded (urllib.parse.unquote)
    _journal/<time>-<run>-<n>.jsonl     which key holds which id ({"key","id","label","blob","sum"} lines)

Why the journal: ids are uuid5(source name, sample name), which a key cannot be mapped back to without
knowing the source, and reading every object's metadata takes one HEAD per sample. So `stored_ids` is
one paginated LIST plus reading the journal: an id counts as stored when its journal line names a key
that is listed (and its sidecar, for blob labels). A writer journals a sample only after its objects
are uploaded (an interrupted ingest journals what finished before it raises), and a killed writer's
unjournaled uploads are simply rewritten on resume: keys are deterministic, so there are no duplicates.
At the end of `write` the manifest is rebuilt from the full listing (uploaded once per split and written
atomically under ``state_dir/manifests/s3-objects/<bucket>/<prefix>/<split>/manifest.txt``) and the
journal is compacted into one part. `scan` lists, GETs every object in parallel and reads id and label
from its metadata (the journal when metadata is missing) and the sidecar.

"""

from __future__ import annotations

import json
import logging
import os
import re
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath
from typing import Any

from workbench.concurrency import InFlight, finish
from workbench.data import Progress, Sample, StoredSample
from workbench.errors import WorkbenchError
from workbench.layouts.common import check_split, labelled
from workbench.layouts.shards import is_shard_key
from workbench.storage import Store

log = logging.getLogger(__name__)

JOURNAL = "_journal"
MANIFEST = "manifest.txt"
SIDECAR = ".label"
UNLABELLED = "unlabelled"
JOURNAL_BATCH = 1000  # journal lines per part written while ingesting


def object_key(sample: Sample) -> str:
    """``<split>/<class>/<basename>``: the sample's name under its split ("unlabelled/" for flat names)."""
    name = sample.name
    parts = name.split("/")  # as given: PurePosixPath would drop '.' components ("a/./x.jpg" -> a, x.jpg)
    if (not name or name.startswith("/") or any(p in (".", "..") for p in parts) or "//" in name
            or name.endswith(("/", SIDECAR)) or "\x00" in name):
        raise WorkbenchError(
            f"sample name {name!r} cannot be an object key: use a relative 'class/file' name without "
            f"'.', '..' or empty components, not ending in '{SIDECAR}'"
        )
    rel = name if len(parts) > 1 else f"{UNLABELLED}/{name}"
    return f"{check_split(sample.split)}/{rel}"


def manifest_key(key: str) -> str:
    """A key as written in a manifest line: '%' and whitespace percent-encoded, the rest as is."""
    return re.sub(r"[%\s]", lambda m: "".join(f"%{b:02X}" for b in m.group().encode()), key)


def _is_data_key(key: str) -> bool:
    parts = key.split("/")
    return len(parts) >= 3 and parts[0] != JOURNAL and not key.endswith(SIDECAR) and not is_shard_key(key)


class ObjectSet:
    """One stored object per sample in a `Store`, a journal of ids and a manifest per split (module docstring)."""

    def __init__(self, store: Store, workers: int, label_type: str,
                 local_manifest: Callable[[str], Path] | None = None, use_metadata: bool = True) -> None:
        self.store = store
        self.workers = workers
        self.label_type = label_type
        self.local_manifest = local_manifest
        self.use_metadata = use_metadata
        self.run = uuid.uuid4().hex[:8]
        self._parts = 0
        # True when this writer is one of several writing the set at once (a partition of a Spark ingest,
        # `workbench.ingest_spark`): `write` leaves `finalize` to one call after all of them, since a finalize
        # racing another writer's uploads could compact away journal lines whose objects it has not listed.
        self.partitioned = False

    # --------------------------------------------------------------------------------- journal

    def _journal(self) -> tuple[dict[str, dict], list[str]]:
        """key -> its latest journal line, and the journal parts read (oldest first)."""
        parts = sorted(k for k, _ in self.store.list(JOURNAL) if k.endswith(".jsonl"))
        with ThreadPoolExecutor(min(max(1, self.workers), 16)) as pool:
            texts = list(pool.map(self.store.get_or_none, parts))
        records: dict[str, dict] = {}
        for part, text in zip(parts, texts, strict=True):
            for line in (text or b"").decode(errors="replace").splitlines():
                try:
                    record = json.loads(line)
                    records[record["key"]] = record
                except (ValueError, KeyError, TypeError, RecursionError):  # RecursionError: deeply nested JSON
                    log.warning("ignoring a bad line in journal part %s of %s", part, self.store.where)
        return records, parts

    def _write_journal(self, records: list[dict]) -> str:
        """One journal part; names sort by time, so later parts override earlier ones."""
        self._parts += 1
        key = f"{JOURNAL}/{time.time_ns():020d}-{self.run}-{self._parts:06d}.jsonl"
        self.store.put(key, "".join(json.dumps(r) + "\n" for r in records).encode())
        return key

    @staticmethod
    def _live(records: dict[str, dict], keys: set[str]) -> dict[str, dict]:
        """Journal lines whose objects (and label sidecars) are all listed."""
        return {k: r for k, r in records.items() if k in keys and (not r.get("blob") or k + SIDECAR in keys)}

    def drop(self) -> None:
        """Delete every object of this layout (a shard layout sharing the prefix is left alone)."""
        self.store.delete([k for k, _ in self.store.list() if not is_shard_key(k)])

    def stored_ids(self) -> set[uuid.UUID]:
        keys = {k for k, _ in self.store.list()}
        records, _ = self._journal()
        ids = set()
        for record in self._live(records, keys).values():
            try:
                ids.add(uuid.UUID(record["id"]))
            except (KeyError, ValueError, TypeError):
                continue
        return ids

    # ---------------------------------------------------------------------------------- writing

    def _put(self, sample: Sample) -> dict:
        """Sidecar first, then the object: once the object is listed its label is there too."""
        key = object_key(sample)
        meta = {"id": str(sample.id), "checksum": sample.checksum}
        label = sample.label
        if isinstance(label, bytes | bytearray):
            self.store.put(key + SIDECAR, bytes(label))
            meta["label-object"] = PurePosixPath(key + SIDECAR).name
        elif label is not None:
            meta["label"] = str(int(label))
        self.store.put(key, sample.data, meta)
        return {"key": key, "id": str(sample.id), "label": label if isinstance(label, int) else None,
                "blob": isinstance(label, bytes | bytearray), "sum": sample.checksum, "size": len(sample.data)}

    def write(self, samples: Iterable[Sample], progress: Progress) -> None:
        flight = InFlight(self.workers, 2 * self.workers, "object-upload")
        journal: list[dict] = []

        def stored(record: dict) -> None:  # runs in this thread
            journal.append(record)
            progress(1, record["size"])
            if len(journal) >= JOURNAL_BATCH:
                self._write_journal(journal)
                journal.clear()

        failed = True
        try:
            for sample in labelled(samples, self.label_type):
                object_key(sample)  # bad names fail here, in order, not in a worker
                flight.submit(self._put, sample, then=stored)
            failed = False
        finally:
            try:
                finish(flight, failed)
            finally:
                if journal:
                    self._write_journal(journal)  # what finished before a failure counts on resume
        if not self.partitioned:
            self.finalize()

    def finalize(self) -> None:
        """Manifests from the full listing, then the journal compacted into one part."""
        keys = {k for k, _ in self.store.list()}
        records, parts = self._journal()
        live = self._live(records, keys)
        splits = sorted({k.split("/", 1)[0] for k in live} | {k.split("/", 1)[0] for k in keys if k.endswith(
            "/" + MANIFEST) and k.count("/") == 1})
        for split in splits:
            lines = []
            for key in sorted(k for k in live if k.startswith(split + "/")):
                record, rel = live[key], key[len(split) + 1:]
                label = (f" {manifest_key(rel + SIDECAR)}" if record.get("blob")
                         else f" {record['label']}" if record.get("label") is not None else "")
                lines.append(f"{manifest_key(rel)}{label}\n")
            data = "".join(lines).encode()
            if self.store.get_or_none(f"{split}/{MANIFEST}") != data:
                self.store.put(f"{split}/{MANIFEST}", data)
            if self.local_manifest is not None:
                _write_atomic(self.local_manifest(split), data)
        if len(parts) > 1 or len(live) != len(records):
            new = self._write_journal(list(live.values())) if live else None
            self.store.delete([p for p in parts if p != new])

    # ---------------------------------------------------------------------------------- reading

    def manifest(self, split: str) -> list[tuple[str, str]]:
        """(key, label) lines of a split's manifest, keys as written (percent-encoded)."""
        data = self.store.get_or_none(f"{split}/{MANIFEST}") or b""
        lines = []
        for line in data.decode().splitlines():
            key, _, label = line.partition(" ")
            lines.append((key, label))
        return lines

    def _read(self, key: str, record: dict | None) -> StoredSample | None:
        try:
            data, meta = self.store.get(key)
        except KeyError:
            return None  # deleted since the listing
        meta = meta if self.use_metadata else {}
        raw_id = meta.get("id") or (record or {}).get("id")
        if raw_id is None:
            log.debug("object %s in %s is not a workbench sample: skipped", key, self.store.where)
            return None
        label: Any = None
        try:
            sample_id = uuid.UUID(raw_id)
            if "label" in meta:
                label = int(meta["label"])
            elif "label-object" in meta or (not meta and (record or {}).get("blob")):
                label = self.store.get_or_none(key + SIDECAR)
            elif not meta and record is not None:  # no metadata (filesystem): the journal says
                label = record.get("label")
        except (ValueError, TypeError) as exc:
            log.warning("object %s in %s has unreadable id/label metadata (%s): skipped", key, self.store.where, exc)
            return None
        return StoredSample(sample_id, key.split("/", 1)[0], label, data)

    def scan(self) -> Iterator[StoredSample]:
        keys = sorted(k for k, _ in self.store.list() if _is_data_key(k))
        records, _ = self._journal()
        batch = 4 * max(1, self.workers)
        with ThreadPoolExecutor(max(1, self.workers), thread_name_prefix="object-read") as pool:
            for i in range(0, len(keys), batch):
                chunk = keys[i:i + batch]
                for stored in pool.map(lambda k: self._read(k, records.get(k)), chunk):
                    if stored is not None:
                        yield stored


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
