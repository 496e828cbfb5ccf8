"""Where each sample's members lie in a tar shard, so readers slice them out instead of parsing the tar.

A ustar member is a 512-byte header block followed by its data, padded with zeros to a whole block. The
packer (`workbench.data.shards.pack_shards`) writes a sample's members back to back, so their data offsets
follow from the sample's first byte and the member sizes (`member_layout`). Each sample's span is recorded
in the shard index (format version 2): its first byte, a CRC-32 of every byte of the span that is not
payload (headers and padding, what tarfile's header checksums would guard), and per member its entry name,
data offset and size. A reader then needs one slice per entry and one CRC per sample; the shard stays an
ordinary tar that any tar or WebDataset reader can still read.

Index rows are flat JSON lists, one per sample: ``[start, header_crc, ext, offset, size, ext, offset, size, ...]``.
"""

from __future__ import annotations

import itertools
import zlib
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, overload

import numpy as np

BLOCK = 512


def padded(size: int) -> int:
    """Bytes `size` bytes of member data take in the archive: rounded up to whole blocks."""
    return -(-size // BLOCK) * BLOCK


def member_layout(start: int, sizes: Sequence[int]) -> tuple[list[int], int]:
    """Data offsets of members of `sizes` bytes written back to back from `start`, one header block each,
    and the offset just past the last one's padding (where the next sample starts)."""
    offsets = []
    pos = start
    for size in sizes:
        offsets.append(pos + BLOCK)
        pos += BLOCK + padded(size)
    return offsets, pos


@dataclass(frozen=True, slots=True)
class Member:
    """One entry of a sample: name after the key (``jpg``, ``cls``, ``uid``...), data offset and size in the shard."""

    ext: str
    offset: int
    size: int


@dataclass(frozen=True, slots=True)
class SampleSpan:
    """One sample's bytes ``[start, end)`` of its shard: members in write order (the image first)."""

    start: int
    header_crc: int
    members: tuple[Member, ...]
    end: int = field(init=False, compare=False)
    by_ext: dict[str, Member] = field(init=False, compare=False, repr=False)
    # The non-payload byte ranges of the span: each member's header (and the padding before it), then the
    # last member's padding. Computed once: readers check them for every sample they slice.
    regions: tuple[tuple[int, int], ...] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        regions, pos = [], self.start
        for m in self.members:
            regions.append((pos, m.offset))
            pos = m.offset + m.size
        end = self.members[-1].offset + padded(self.members[-1].size)
        regions.append((pos, end))
        object.__setattr__(self, "end", end)
        object.__setattr__(self, "by_ext", {m.ext: m for m in self.members})
        object.__setattr__(self, "regions", tuple(regions))


def header_crc(data: bytes | memoryview, regions: Sequence[tuple[int, int]], base: int = 0) -> int:
    """CRC-32 of the bytes of `regions` (shard offsets) in `data`, which holds the shard from offset `base`."""
    view = memoryview(data)
    crc = 0
    for a, b in regions:
        crc = zlib.crc32(view[a - base : b - base], crc)
    return crc


def span_to_row(span: SampleSpan) -> list[Any]:
    """The index row of a span (see the module docstring)."""
    row: list[Any] = [span.start, span.header_crc]
    for m in span.members:
        row += [m.ext, m.offset, m.size]
    return row


class SpanTable(Sequence[SampleSpan]):
    """One shard's spans as flat integers, a SampleSpan made when one is asked for.

    Why: held as objects, an index costs about 1.2 KB a sample (25 MB for 20,000 samples, in every reader for
    as long as it reads), which made a loader's memory grow with the dataset; as integers, 64 bytes (3 entries
    a sample). For a shard whose samples have the same entries (what the packer writes); `rows_to_spans` keeps
    objects for any other.
    """

    __slots__ = ("exts", "values", "width")

    def __init__(self, exts: tuple[str, ...], values: array) -> None:
        self.exts, self.values, self.width = exts, values, 2 + 2 * len(exts)  # start, crc, (offset, size) each

    def __len__(self) -> int:
        return len(self.values) // self.width

    @overload
    def __getitem__(self, index: int) -> SampleSpan: ...

    @overload
    def __getitem__(self, index: slice) -> list[SampleSpan]: ...

    def __getitem__(self, index: int | slice) -> SampleSpan | list[SampleSpan]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if not -len(self) <= index < len(self):
            raise IndexError(f"span {index} of {len(self)}")
        at = (index % len(self)) * self.width
        v = self.values
        return SampleSpan(v[at], v[at + 1], tuple(Member(ext, v[at + 2 + 2 * k], v[at + 3 + 2 * k])
                                                  for k, ext in enumerate(self.exts)))

    def checks(self) -> tuple[array, array]:
        """(starts, header CRCs) of the samples, without making their SampleSpans."""
        return self.values[0 :: self.width], self.values[1 :: self.width]

    def pieces(self) -> np.ndarray:
        """The shard's samples as (offset, length) rows in shard order, 2 x entries + 1 a sample: each entry's
        header region (`SampleSpan.regions`), then its data; last the padding after the last entry. The header
        pieces of a sample are what its header CRC covers; together the pieces are exactly its span."""
        v = np.frombuffer(self.values, dtype=np.int64).reshape(len(self), self.width)
        offsets, sizes = v[:, 2::2], v[:, 3::2]
        ends = offsets + sizes
        header_starts = np.concatenate([v[:, :1], ends[:, :-1]], axis=1)
        tail_end = offsets[:, -1] + padded(sizes[:, -1])  # elementwise on the array
        pieces = np.empty((len(self), 2 * len(self.exts) + 1, 2), dtype=np.int64)
        pieces[:, 0:-1:2, 0], pieces[:, 0:-1:2, 1] = header_starts, offsets - header_starts
        pieces[:, 1::2, 0], pieces[:, 1::2, 1] = offsets, sizes
        pieces[:, -1, 0], pieces[:, -1, 1] = ends[:, -1], tail_end - ends[:, -1]
        return pieces.reshape(-1, 2)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or len(self) != len(other):
            return False
        return all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]  # like a list: compared by content


def _count(value: Any) -> int:
    if type(value) is not int or value < 0:
        raise ValueError(f"{value!r} is not a byte count")
    return value


def _checked_row(row: Any, shard_bytes: int) -> tuple[tuple[str, ...], list[int], int]:
    """(entry names, [start, crc, offset, size, ...], end) of an index row, checked: members in order, inside
    the shard, each after a header block. Raises ValueError or TypeError on a bad row."""
    if not isinstance(row, list) or len(row) < 5 or (len(row) - 2) % 3:
        raise ValueError(f"bad sample row {str(row)[:80]!r}")
    start, crc = _count(row[0]), _count(row[1])
    exts, values, pos = [], [start, crc], start
    for i in range(2, len(row), 3):
        ext, offset, size = row[i], _count(row[i + 1]), _count(row[i + 2])
        if not isinstance(ext, str) or not ext or offset < pos + BLOCK:
            raise ValueError(f"bad member {ext!r} at {offset} in sample row starting at {start}")
        exts.append(ext)
        values += (offset, size)
        pos = offset + padded(size)
    if pos > shard_bytes or crc > 0xFFFFFFFF or len(set(exts)) != len(exts):
        raise ValueError(f"bad sample row starting at {start} (ends at {pos}, the shard has {shard_bytes} bytes)")
    return tuple(exts), values, pos


def row_to_span(row: Any, shard_bytes: int) -> SampleSpan:
    """A span from an index row, checked (`_checked_row`); a bad row raises ValueError or TypeError (the index
    reader turns them into one WorkbenchError)."""
    exts, v, _ = _checked_row(row, shard_bytes)
    return SampleSpan(v[0], v[1], tuple(Member(ext, v[2 + 2 * k], v[3 + 2 * k]) for k, ext in enumerate(exts)))


def rows_to_spans(rows: Any, samples: int, shard_bytes: int) -> Sequence[SampleSpan]:
    """All spans of one shard from its index rows: one per sample, in order, not overlapping. A SpanTable when
    every sample has the same entries, else a tuple of SampleSpans."""
    if not isinstance(rows, list) or len(rows) != samples:
        raise ValueError(f"{samples} samples but {len(rows) if isinstance(rows, list) else 'no'} sample rows")
    checked = [_checked_row(row, shard_bytes) for row in rows]
    for (_, _, end), (_, following, _) in itertools.pairwise(checked):
        if following[0] < end:
            raise ValueError(f"sample rows overlap at {following[0]}")
    if checked and all(exts == checked[0][0] for exts, _, _ in checked):
        return SpanTable(checked[0][0], array("q", itertools.chain.from_iterable(v for _, v, _ in checked)))
    return tuple(row_to_span(row, shard_bytes) for row in rows)
