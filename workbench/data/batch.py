"""A batch of samples: what loaders hand the adapters on the hot path.

Why: one Python object per batch instead of several per sample. A batch holds its payloads as the loader read
them (`bytes` each, no copy) with their offsets in a virtual buffer where they lie back to back (sample i is
`buffer[offsets[i]:offsets[i + 1]]`). Consumers that take samples one by one (DALI's external source, the item
APIs) read the payloads themselves (`view`, `views`, `items`: no copy); consumers that want one contiguous
buffer (torch takes it as one tensor, which DataLoader workers pass through shared memory; tf.data slices it in
the graph) get `buffer`, made at first use by one copy of each payload; the worker ring copies the payloads
straight into its shared memory (`copy_into`), without that buffer in between.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from workbench.data.sample import Item

Payload = bytes | memoryview


class Batch:
    """`len(keys)` samples: ids, labels, offsets, and their payloads (held as read, or joined in `buffer`)."""

    __slots__ = ("_buffer", "_payloads", "keys", "labels", "offsets")

    def __init__(self, keys: list[str], labels: list[int | bytes | None], buffer: np.ndarray,
                 offsets: np.ndarray) -> None:
        """A batch over a contiguous uint8 `buffer` (offsets: int64, len(keys) + 1, from 0 to its length)."""
        if len(offsets) != len(keys) + 1 or len(labels) != len(keys):
            raise ValueError(f"a batch of {len(keys)} keys needs as many labels (got {len(labels)}) "
                             f"and {len(keys) + 1} offsets (got {len(offsets)})")
        if len(offsets) and (offsets[0] != 0 or offsets[-1] != len(buffer)):
            raise ValueError(f"offsets must run from 0 to the buffer's {len(buffer)} bytes")
        self.keys, self.labels, self.offsets = keys, labels, offsets
        self._buffer: np.ndarray | None = buffer
        self._payloads: list[Payload] | None = None

    @classmethod
    def of(cls, keys: list[str], labels: list[int | bytes | None], payloads: Sequence[Payload]) -> Batch:
        """A batch of `payloads` as they are: nothing is copied until someone asks for `buffer`."""
        if len(labels) != len(keys) or len(payloads) != len(keys):
            raise ValueError(f"a batch of {len(keys)} keys needs as many labels (got {len(labels)}) "
                             f"and payloads (got {len(payloads)})")
        offsets = np.zeros(len(payloads) + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, payloads), dtype=np.int64, count=len(payloads)), out=offsets[1:])
        batch = cls.__new__(cls)
        batch.keys, batch.labels, batch.offsets = keys, labels, offsets
        batch._buffer, batch._payloads = None, list(payloads)
        return batch

    @classmethod
    def from_items(cls, items: Sequence[Item]) -> Batch:
        return cls.of([i.key for i in items], [i.label for i in items], [i.data for i in items])

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def buffer(self) -> np.ndarray:
        """The payloads back to back in one uint8 array: joined at the first call (one copy each), then kept and
        the payloads let go."""
        buffer = self._buffer
        if buffer is None:
            payloads = self._payloads
            if payloads is None:  # joined by another thread meanwhile
                return self._buffer  # type: ignore[return-value]
            buffer = np.frombuffer(bytearray().join(payloads), dtype=np.uint8)  # one allocation, a memcpy each
            self._buffer, self._payloads = buffer, None
        return buffer

    @property
    def nbytes(self) -> int:
        return int(self.offsets[-1])

    def sizes(self) -> np.ndarray:
        return np.diff(self.offsets)

    def view(self, index: int) -> np.ndarray:
        """Sample `index`'s payload as a uint8 array, without a copy (read-only while the batch is not joined)."""
        payloads = self._payloads
        if payloads is not None:
            return np.frombuffer(payloads[index], dtype=np.uint8)
        return self.buffer[self.offsets[index]:self.offsets[index + 1]]

    def views(self) -> list[np.ndarray]:
        return [self.view(i) for i in range(len(self))]

    def copy_into(self, target: np.ndarray) -> None:
        """Write the payloads back to back into `target` (uint8, at least `nbytes` long): one copy each."""
        payloads = self._payloads
        if payloads is None:
            np.copyto(target[: self.nbytes], self.buffer)
            return
        out = memoryview(target)
        for payload, start, end in zip(payloads, self.offsets[:-1].tolist(), self.offsets[1:].tolist(), strict=True):
            out[start:end] = payload

    def tobytes(self) -> bytes:
        """The payloads back to back as one `bytes` (one copy each)."""
        payloads = self._payloads
        return b"".join(payloads) if payloads is not None else self.buffer.tobytes()

    def items(self) -> Iterator[Item]:
        """The samples as Items: the payloads themselves where they are `bytes`, else copied out to `bytes`."""
        payloads = self._payloads
        for i, (key, label) in enumerate(zip(self.keys, self.labels, strict=True)):
            data = payloads[i] if payloads is not None and type(payloads[i]) is bytes else self.view(i).tobytes()
            yield Item(key, label, data)


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
