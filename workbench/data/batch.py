"""A batch of samples in one contiguous buffer: what loaders hand the adapters on the hot path.

Why: one Python object per batch instead of several per sample. The payloads sit back to back in one
uint8 array (sample i is `buffer[offsets[i]:offsets[i + 1]]`), so DALI takes numpy views of it, torch
takes it as one tensor (which DataLoader workers pass through shared memory, not pickled through a
pipe), and tf.data slices it in the graph. Building a batch copies each payload once, into the buffer;
every view after that is free. Item-level APIs stay available through `items()`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from workbench.data.sample import Item


@dataclass(frozen=True)
class Batch:
    """`len(keys)` samples: ids, labels, and their payloads back to back in `buffer`."""

    keys: list[str]
    labels: list[int | bytes | None]
    buffer: np.ndarray  # uint8, 1-D, contiguous
    offsets: np.ndarray  # int64, len(keys) + 1; sample i is buffer[offsets[i]:offsets[i + 1]]

    def __post_init__(self) -> None:
        if len(self.offsets) != len(self.keys) + 1 or len(self.labels) != len(self.keys):
            raise ValueError(f"a batch of {len(self.keys)} keys needs as many labels (got {len(self.labels)}) "
                             f"and {len(self.keys) + 1} offsets (got {len(self.offsets)})")
        if len(self.offsets) and (self.offsets[0] != 0 or self.offsets[-1] != len(self.buffer)):
            raise ValueError(f"offsets must run from 0 to the buffer's {len(self.buffer)} bytes")

    @classmethod
    def of(cls, keys: list[str], labels: list[int | bytes | None], payloads: Sequence[bytes | memoryview]) -> Batch:
        """Copy `payloads` once, back to back, into a new buffer."""
        sizes = np.fromiter((len(p) for p in payloads), dtype=np.int64, count=len(payloads))
        offsets = np.zeros(len(payloads) + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        buffer = np.frombuffer(bytearray().join(payloads), dtype=np.uint8)  # one allocation, a memcpy each (in C)
        return cls(keys, labels, buffer, offsets)

    @classmethod
    def from_items(cls, items: Sequence[Item]) -> Batch:
        return cls.of([i.key for i in items], [i.label for i in items], [i.data for i in items])

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def nbytes(self) -> int:
        return len(self.buffer)

    def sizes(self) -> np.ndarray:
        return np.diff(self.offsets)

    def view(self, index: int) -> np.ndarray:
        """Sample `index`'s payload as a uint8 array that shares the buffer (no copy)."""
        return self.buffer[self.offsets[index]:self.offsets[index + 1]]

    def views(self) -> list[np.ndarray]:
        return [self.view(i) for i in range(len(self))]

    def items(self) -> Iterator[Item]:
        """The samples as Items (each payload copied out to bytes): for item-level APIs."""
        for i, (key, label) in enumerate(zip(self.keys, self.labels, strict=True)):
            yield Item(key, label, self.view(i).tobytes())


def batched(items: Iterable[Item], size: int) -> Iterator[Batch]:
    """Items grouped into batches of `size` (the last one may be shorter), one buffer copy per batch."""
    if size < 1:
        raise ValueError(f"batch size must be >= 1, got {size}")
    pending: list[Item] = []
    for item in items:
        pending.append(item)
        if len(pending) == size:
            yield Batch.from_items(pending)
            pending = []
    if pending:
        yield Batch.from_items(pending)
