"""The one storage interface: keys -> bytes, with ranges and multipart writes.

Keys are relative, '/'-separated and never empty. A missing key is a `KeyError` (callers decide whether
that is an error); every other failure is a one-line `WorkbenchError` that says what to fix.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class ObjectInfo:
    """What a HEAD says: the size, and a version tag so ranged reads can refuse a replaced object."""

    size: int
    etag: str | None = None


class WrongSize(Exception):
    """The object is not the size its reader expected: replaced, truncated or corrupt (`actual` bytes)."""

    def __init__(self, actual: int) -> None:
        super().__init__(actual)
        self.actual = actual


class MultipartUpload(ABC):
    """An object written in numbered parts; nothing is visible until `complete`, nothing after `abort`."""

    @abstractmethod
    def put_part(self, number: int, data: bytes) -> str:
        """Store part `number` (1-based; every part but the last >= the store's minimum); returns its tag."""

    @abstractmethod
    def complete(self, tags: list[tuple[int, str]]) -> None:
        """Join the parts, in number order, into the object: it appears whole, at once."""

    @abstractmethod
    def abort(self) -> None:
        """Drop the parts; an existing object of the same key is left as it was."""


class Store(ABC):
    """A flat namespace of keys holding bytes (and, where the system keeps it, string metadata)."""

    where: str  # for messages: "s3://bucket/prefix" or a directory

    @abstractmethod
    def put(self, key: str, data: bytes, metadata: dict[str, str] | None = None) -> None:
        """Store `data` at `key` atomically: a reader sees the old value, the new one, or nothing."""

    @abstractmethod
    def get(self, key: str) -> tuple[bytes, dict[str, str]]:
        """(data, metadata) of `key`; KeyError when there is no such key."""

    def get_view(self, key: str) -> memoryview:
        """The bytes of `key` as a read-only view, without the copy into `bytes` where the client allows: for
        readers that slice a big object (shards). KeyError when there is no such key."""
        return memoryview(self.get(key)[0])

    def reserve_ranges(self, ranges: Sequence[tuple[int, int]] | np.ndarray) -> Any | None:
        """Memory for a later `get_ranges` of these ranges, made now, in the calling thread (None: the store has
        no use for it). Why: a reader whose reads run on a pool of threads but whose pieces are consumed in one
        keeps them in one heap by reserving them there (glibc keeps a heap, and its high-water mark, per thread
        that allocates)."""
        return None

    def get_ranges(self, key: str, size: int, ranges: Sequence[tuple[int, int]] | np.ndarray,
                   reserved: Any | None = None) -> list[bytes]:
        """Byte ranges ((offset, length) rows, in order, apart) of `key`, from one read of it, each as `bytes`: for
        readers that cut many pieces out of a big object (shards). `key` must be `size` bytes, else WrongSize;
        KeyError when there is no such key. Stores with a native client read the ranges straight off the body,
        into `reserved` (`reserve_ranges` of the same ranges) when given."""
        data = self.get_view(key)
        if len(data) != size:
            raise WrongSize(len(data))
        return [bytes(data[offset : offset + length]) for offset, length in ranges]

    @abstractmethod
    def get_range(self, key: str, start: int, end: int, etag: str | None = None) -> bytes:
        """Bytes [start, end) of `key`; with `etag`, refuse an object that changed since `head`."""

    @abstractmethod
    def head(self, key: str) -> ObjectInfo:
        """Size and version tag of `key`; KeyError when there is no such key."""

    @abstractmethod
    def list(self, under: str = "") -> Iterator[tuple[str, int]]:
        """(key, size) of every key starting with `under` (a folder, '' for all), in no particular order."""

    @abstractmethod
    def delete(self, keys: Iterable[str]) -> None:
        """Remove keys (missing ones are ignored)."""

    @abstractmethod
    def multipart(self, key: str) -> MultipartUpload:
        """Start a multipart write of `key` (checkpoints: parts upload while the caller keeps writing)."""

    def get_or_none(self, key: str) -> bytes | None:
        try:
            return self.get(key)[0]
        except KeyError:
            return None
