"""WebDataset tar shards built in memory, so S3 and local writers share one packer.

Each sample is stored as contiguous tar members named ``<key>.<ext>`` (image, label, id, sum),
which is what both the ``webdataset`` library and DALI's ``fn.readers.webdataset`` expect.
Headers are fixed (mtime 0, uid/gid 0, empty owner names, mode 0o444), so the same samples
always give byte-identical shards.

The packer also records where every sample's members lie (`workbench.data.shard_spans`); the index
(version 2) carries those spans so readers slice samples out (`slice_shard`) instead of parsing the tar
(`read_shard`, still there for version-1 indexes and for verification).
"""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from workbench.data.sample import JPEG_MAGIC, NPY_MAGIC, PNG_MAGIC, Sample, checksum
from workbench.data.shard_spans import (
    BLOCK,
    Member,
    SampleSpan,
    header_crc,
    member_layout,
    rows_to_spans,
    span_to_row,
)
from workbench.errors import WorkbenchError

RECORD = tarfile.RECORDSIZE  # 10240: tarfile pads a closed archive to a multiple of this
INDEX_FORMAT = "workbench-shards"
# 2: a top-level "members" object maps shard names to their sample rows (shard_spans); "shards" is as in
# version 1, so version-1 readers still read a version-2 index (and ignore the rows).
INDEX_VERSION = 2
SHARD_FIELDS = ("name", "samples", "bytes", "first_key", "last_key")
# The sample id entry is "uid", not "id": webdataset's default decoders turn any ".id" entry into an
# int, which breaks `.decode()` on shards whose ids are uuids.
ID_ENTRY = "uid"
SUM_ENTRY = "sum"
META_ENTRIES = (ID_ENTRY, SUM_ENTRY)
INT_LABEL_ENTRY = "cls"
# Blob label entries, in the order a reader looks for them (the writer writes at most one label entry).
BLOB_LABEL_ENTRIES = ("seg.png", "png", "npy", "lbl")

@dataclass
class ShardInfo:
    """What an index needs to know about one shard."""

    name: str
    samples: int
    bytes: int
    first_key: str
    last_key: str
    # Where each sample lies in the shard (index version 2); None: unknown, readers parse the tar.
    members: Sequence[SampleSpan] | None = None

    def fields(self) -> dict[str, Any]:
        """The version-1 fields, as the index and the shard records store them."""
        return {f: getattr(self, f) for f in SHARD_FIELDS}

    def rows(self) -> list[list[Any]] | None:
        """The spans as index rows (None when unknown)."""
        return None if self.members is None else [span_to_row(s) for s in self.members]

    def with_rows(self, rows: Any) -> ShardInfo:
        """This shard with the spans of `rows` (None: unknown); bad rows raise ValueError/TypeError."""
        self.members = None if rows is None else rows_to_spans(rows, self.samples, self.bytes)
        return self


def sample_key(s: Sample) -> str:
    """Tar key of a sample: its id as 32 hex digits (webdataset splits names at the first dot)."""
    return s.id.hex


def _image_ext(s: Sample) -> str:
    """Entry name for the image: jpg for JPEG bytes, else the original file's extension."""
    if s.data.startswith(JPEG_MAGIC):
        return "jpg"
    ext = s.name.rsplit(".", 1)[-1].lower() if "." in s.name.rsplit("/", 1)[-1] else "bin"
    return "jpg" if ext == "jpeg" else ext


def sample_to_entries(s: Sample) -> dict[str, bytes]:
    """Tar entries of one sample, in write order: image, label, ``id``, ``sum``.

    Labels: int -> ``cls`` (ASCII decimal); PNG bytes -> ``png`` (``seg.png`` if the image itself
    is a PNG); ``np.save`` bytes -> ``npy``; other bytes -> ``lbl``; None -> no entry.
    """
    image_ext = _image_ext(s)
    entries = {image_ext: s.data}
    if isinstance(s.label, int):
        entries[INT_LABEL_ENTRY] = str(s.label).encode()
    elif isinstance(s.label, bytes):
        if s.label.startswith(PNG_MAGIC):
            entries["seg.png" if image_ext == "png" else "png"] = s.label
        elif s.label.startswith(NPY_MAGIC):
            entries["npy"] = s.label
        else:
            entries["lbl"] = s.label
    entries[ID_ENTRY] = str(s.id).encode()
    entries[SUM_ENTRY] = s.checksum.encode()
    return entries


def entry_label(entries: dict[str, Any], image_ext: str, label_type: str, where: str) -> int | bytes | None:
    """The label of one sample's entries, the one rule for every reader of our shards.

    ``int``: the ``cls`` entry, required; ``blob``: the first of BLOB_LABEL_ENTRIES, required; ``none``: None;
    ``any`` (scans): whichever label entry is there, else None. A required entry that is missing, or a
    ``cls`` that is not an integer, is a WorkbenchError naming the sample and what to use instead.
    """
    if label_type == "none":
        return None
    if label_type in ("int", "any") and INT_LABEL_ENTRY in entries:
        try:
            return int(entries[INT_LABEL_ENTRY])
        except ValueError:
            raise WorkbenchError(f"{where}: 'cls' is not an integer") from None
    if label_type == "int":
        raise WorkbenchError(f"{where} has no 'cls' entry but label_type is int: use label_type blob "
                             "(masks, multilabel) or none")
    ext = next((e for e in BLOB_LABEL_ENTRIES if e in entries and e != image_ext), None)
    if ext is not None:
        return entries[ext]
    if label_type == "blob":
        raise WorkbenchError(f"{where} has no label entry ({', '.join(BLOB_LABEL_ENTRIES)}) but label_type is "
                             "blob: use label_type int or none")
    return None


def _member_size(data_len: int) -> int:
    """Bytes one regular file takes in a ustar archive: header block + data padded to blocks."""
    return BLOCK + -(-data_len // BLOCK) * BLOCK


def _closed_size(offset: int) -> int:
    """Final archive size once tarfile writes the two end blocks and pads to a record."""
    return -(-(offset + 2 * BLOCK) // RECORD) * RECORD


class _ShardBuffer:
    """One open in-memory tar with deterministic headers."""

    def __init__(self) -> None:
        self.buf = io.BytesIO()
        # Stays open across add() calls; close() finishes it.
        self.tar = tarfile.open(fileobj=self.buf, mode="w", format=tarfile.USTAR_FORMAT)  # noqa: SIM115
        self.samples = 0
        self.first_key = self.last_key = ""
        self.spans: list[SampleSpan] = []

    @property
    def offset(self) -> int:
        """Bytes written so far (tarfile's own count, so it cannot drift from the archive)."""
        return self.tar.offset

    def add(self, key: str, entries: dict[str, bytes]) -> None:
        """Append all entries of one sample, contiguously, and record where they went."""
        start = self.offset
        offsets, end = member_layout(start, [len(d) for d in entries.values()])
        for ext, data in entries.items():
            info = tarfile.TarInfo(f"{key}.{ext}")
            info.size, info.mtime, info.mode = len(data), 0, 0o444
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            self.tar.addfile(info, io.BytesIO(data))
        if self.offset != end:  # a name too long for one ustar header block: the layout rule does not hold
            raise WorkbenchError(f"sample {key!r}: tar members are not one header block each (names too long?)")
        members = tuple(Member(ext, off, len(d)) for (ext, d), off in zip(entries.items(), offsets, strict=True))
        with self.buf.getbuffer() as view:
            crc = header_crc(view, SampleSpan(start, 0, members).regions)
        self.spans.append(SampleSpan(start, crc, members))
        self.first_key = self.first_key or key
        self.last_key = key
        self.samples += 1

    def close(self, name: str) -> tuple[ShardInfo, bytes]:
        """Finish the archive and describe it."""
        self.tar.close()
        data = self.buf.getvalue()
        return ShardInfo(name, self.samples, len(data), self.first_key, self.last_key, tuple(self.spans)), data


def pack_shards(
    samples: Iterable[Sample],
    maxsize: float = 1e8,
    maxcount: int = 100_000,
    pattern: str = "shard-{:06d}.tar",
) -> Iterator[tuple[ShardInfo, bytes]]:
    """Group samples into tar shards, like webdataset's ``ShardWriter(maxsize, maxcount)``.

    A shard is closed before adding a sample would make it exceed ``maxsize`` bytes (final size,
    padding included) or ``maxcount`` samples; a sample too big for any shard gets one of its
    own. Streaming: at most one shard is held in memory. Shard ``k`` is named ``pattern.format(k)``.
    """
    if maxcount < 1 or maxsize <= 0:
        raise WorkbenchError(f"maxcount must be >= 1 and maxsize > 0, got maxcount={maxcount} maxsize={maxsize}")
    shard, index = _ShardBuffer(), 0
    for s in samples:
        entries = sample_to_entries(s)
        grown = shard.offset + sum(_member_size(len(d)) for d in entries.values())
        if shard.samples and (shard.samples >= maxcount or _closed_size(grown) > maxsize):
            yield shard.close(pattern.format(index))
            shard, index = _ShardBuffer(), index + 1
        shard.add(sample_key(s), entries)
    if shard.samples:
        yield shard.close(pattern.format(index))


def write_index(infos: list[ShardInfo]) -> bytes:
    """JSON index of a shard set: per-shard names, counts and sizes, totals, and the sample rows of the shards
    whose spans are known (one line per shard)."""
    head = {
        "format": INDEX_FORMAT,
        "version": INDEX_VERSION,
        "total_samples": sum(i.samples for i in infos),
        "total_bytes": sum(i.bytes for i in infos),
        "shards": [i.fields() for i in infos],
    }
    text = json.dumps(head, indent=1)
    rows = [(i.name, i.rows()) for i in infos if i.members is not None]
    if rows:  # compact rows, one shard per line: the index stays small and readable
        lines = ",\n".join(f"  {json.dumps(n)}: {json.dumps(r, separators=(',', ':'))}" for n, r in rows)
        text = text[: text.rindex("}")].rstrip() + ',\n "members": {\n' + lines + "\n }\n}"
    return (text + "\n").encode()


def read_index(data: bytes) -> list[ShardInfo]:
    """Parse :func:`write_index` output; bad content raises WorkbenchError."""
    try:
        doc: Any = json.loads(data)
        if not isinstance(doc, dict) or doc.get("format") != INDEX_FORMAT:
            raise WorkbenchError(f"not a {INDEX_FORMAT} document")
        infos = [_shard_info(entry) for entry in doc["shards"]]
        members = doc.get("members", {})
        if not isinstance(members, dict):
            raise TypeError("'members' is not an object")
        for info in infos:
            info.with_rows(members.get(info.name))
    except (KeyError, TypeError, ValueError, RecursionError, WorkbenchError) as exc:  # RecursionError: deep nesting
        raise WorkbenchError(f"invalid shard index: {_one_line(exc)}") from None
    if doc.get("total_samples", sum(i.samples for i in infos)) != sum(i.samples for i in infos):
        raise WorkbenchError("invalid shard index: total_samples does not match the shards")
    return infos


def _shard_info(entry: Any) -> ShardInfo:
    """One index entry, type-checked (the version-1 fields only)."""
    if not isinstance(entry, dict) or set(entry) - set(SHARD_FIELDS):
        raise TypeError(f"bad shard entry {entry!r}")
    info = ShardInfo(**entry)
    if not (isinstance(info.samples, int) and isinstance(info.bytes, int) and isinstance(info.name, str)):
        raise TypeError(f"bad shard entry {entry!r}")
    return info


def split_name(member: str) -> tuple[str, str]:
    """``dir/key.ext.more`` -> (``dir/key``, ``ext.more``): webdataset's first-dot rule."""
    head, _, base = member.rpartition("/")
    stem, dot, ext = base.partition(".")
    if not dot or not stem:
        raise WorkbenchError(f"member {member!r} has no key.ext name")
    return (f"{head}/{stem}" if head else stem), ext


def read_shard(data: bytes | memoryview, name: str = "shard") -> Iterator[dict[str, bytes]]:
    """Samples of one shard as ``{"__key__": key, ext: bytes, ...}``, for verification.

    Stricter than webdataset: a sample's members must be contiguous, extensions unique, and the
    archive must end with its end-of-archive blocks; any violation or truncation raises
    WorkbenchError naming the shard.
    """
    try:
        yield from _read_members(data)
    except (tarfile.TarError, EOFError, ValueError, WorkbenchError) as exc:
        raise WorkbenchError(f"shard {name}: corrupt or truncated tar ({_one_line(exc)})") from None


def spans_from_tar(data: bytes, name: str = "shard") -> tuple[SampleSpan, ...]:
    """The spans of an existing tar shard, found by parsing it once: how a version-1 shard set gets its rows.

    The shard must pass `read_shard` (contiguous samples, whole archive); else a WorkbenchError naming it.
    """
    samples = sum(1 for _ in read_shard(data, name))
    groups: list[tuple[str, int, list[Member]]] = []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        for member in tar:
            if member.isfile():
                key, ext = split_name(member.name)
                if not groups or groups[-1][0] != key:
                    groups.append((key, member.offset, []))
                groups[-1][2].append(Member(ext, member.offset_data, member.size))
    if len(groups) != samples:
        raise WorkbenchError(f"shard {name}: {len(groups)} sample spans for {samples} samples")
    return tuple(SampleSpan(start, header_crc(data, SampleSpan(start, 0, tuple(ms)).regions), tuple(ms))
                 for _, start, ms in groups)


def slice_shard(data: bytes | memoryview, spans: Sequence[SampleSpan], name: str = "shard", base: int = 0
                ) -> Iterator[dict[str, bytes]]:
    """What `read_shard` gives, sliced out by the index's spans instead of parsed: ``{"__key__": key, ext: bytes}``.

    `data` holds the shard from byte `base` on (the whole shard, or a ranged read of these samples). A sample
    outside `data`, or whose headers are not the bytes the index recorded, raises WorkbenchError naming the shard.
    """
    for span in spans:
        check_span(data, span, name, base)
        sample = {"__key__": span_key(data, span, base)}
        for m in span.members:
            sample[m.ext] = bytes(data[m.offset - base : m.offset - base + m.size])
        yield sample


def check_span(data: bytes | memoryview, span: SampleSpan, name: str, base: int = 0) -> None:
    """Raise a WorkbenchError naming the shard unless `data` (from byte `base`) holds `span` as the index says."""
    if span.start < base or span.end - base > len(data):
        raise WorkbenchError(f"shard {name}: truncated (the sample at byte {span.start} is not all there): "
                             "re-run the ingest")
    if header_crc(data, span.regions, base) != span.header_crc:
        raise headers_changed(name, span.start)


def headers_changed(name: str, start: int) -> WorkbenchError:
    """The error for a sample whose tar headers fail the CRC the index recorded (every reader of spans)."""
    return WorkbenchError(f"shard {name}: corrupt or truncated tar (the tar headers of the sample at byte {start} "
                          "are not those the index recorded): re-run the ingest")


def span_key(data: bytes | memoryview, span: SampleSpan, base: int = 0) -> str:
    """The tar key of a sample, from the name field of its first member's header (checked by `check_span`)."""
    at = span.members[0].offset - BLOCK - base
    name = bytes(data[at : at + 100]).split(b"\0", 1)[0].decode("utf-8", errors="replace")
    return split_name(name)[0]


def _one_line(exc: BaseException) -> str:
    """An exception's message on one line: names taken from the input may hold newlines."""
    return " ".join(str(exc).split()) or type(exc).__name__


def _read_members(data: bytes | memoryview) -> Iterator[dict[str, Any]]:
    """Group regular members by key, then check the archive ends properly."""
    seen: set[str] = set()
    current: dict[str, Any] | None = None
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        for member in tar:
            if not member.isfile():
                continue
            key, ext = split_name(member.name)
            if current is None or current["__key__"] != key:
                if key in seen:
                    raise WorkbenchError(f"members of sample {key!r} are not contiguous")
                if current is not None:
                    yield current
                current = {"__key__": key}
                seen.add(key)
            if ext in current:
                raise WorkbenchError(f"sample {key!r} has two {ext!r} entries")
            fobj = tar.extractfile(member)
            payload = fobj.read() if fobj else b""
            if len(payload) != member.size:
                raise WorkbenchError(f"member {member.name!r} is truncated")
            current[ext] = payload
        end = tar.offset
    if data[end : end + 2 * BLOCK] != bytes(2 * BLOCK):
        raise WorkbenchError("missing end-of-archive blocks")
    if current is not None:
        yield current


def check_entries(entries: dict[str, bytes]) -> str | None:
    """None if the image entry (the first one, by write order) matches ``sum``, else a reason."""
    key = entries.get("__key__")
    exts = [k for k in entries if k != "__key__"]
    stored = entries.get(SUM_ENTRY)
    if not exts or exts[0] in META_ENTRIES or stored is None:
        return f"sample {key}: expected an image entry then a 'sum' entry, got {exts}"
    if checksum(entries[exts[0]]) != stored.decode(errors="replace"):
        return f"sample {key}: checksum of {exts[0]!r} does not match 'sum'"
    return None
