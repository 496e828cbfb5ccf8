"""Batches from DataLoader workers to the main process through shared memory that is reused, not made per batch.

Why: torch hands each tensor a worker yields to the main process in a shared-memory segment made for it (and
sends its file descriptor over a socket): a fresh segment per batch, whose every page is faulted in and zeroed
on both sides. Measured on the 2-core box, a `BatchDataset` element of 32 x 110 KB cost about 70 µs a sample in
the worker and 35 in the main process, more than the fs loader's whole read (about 65).

Here each worker keeps a ring of `SLOTS` shared storages. A batch is copied into a free slot and only small
things travel through the pipe: the slot's number, the offsets, labels and keys (a slot's storage itself goes
once, the first time it is used). In the main process the element is rebuilt as tensors over the slot, and
when the last of them is gone a flag in memory the worker shares says the slot is free again. A worker that
finds no free slot (the consumer holds on to its batches) sends the batch the ordinary way: nothing waits.
"""

from __future__ import annotations

import os
import uuid
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import get_worker_info

from workbench.data.batch import Batch

SLOTS = 8  # per worker: DataLoader's prefetch (2 a worker by default) and the batches being used, with room
MIN_SLOT_BYTES = 1 << 20


def labels_value(labels: list[int | bytes | None]) -> Any:
    """Integer labels (None: -1) as an int64 tensor; blobs stay a list."""
    if all(label is None or isinstance(label, int) for label in labels):
        return torch.tensor([-1 if label is None else label for label in labels], dtype=torch.int64)
    return list(labels)


def _first_bytes(storage: torch.UntypedStorage, size: int) -> np.ndarray:
    """The first `size` bytes of `storage` as a uint8 array over the same memory."""
    return torch.empty(0, dtype=torch.uint8).set_(storage, 0, (size,)).numpy()


class WorkerRing:
    """A worker's slots: shared storages, and one shared byte per slot that says whether the main process
    still uses it."""

    def __init__(self) -> None:
        self.token = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.flags = torch.zeros(SLOTS, dtype=torch.uint8).share_memory_()
        self._busy = self.flags.numpy()
        self._slots: list[torch.UntypedStorage | None] = [None] * SLOTS
        self._generation = [0] * SLOTS
        self._flags_sent = False

    def pack(self, batch: Batch) -> RingBatch | None:
        """`batch` copied into a free slot, as the object to yield; None when every slot is in use."""
        free = np.flatnonzero(self._busy == 0)
        if not len(free):
            return None
        slot, size = int(free[0]), batch.nbytes
        storage, new = self._slots[slot], None
        if storage is None or storage.nbytes() < size:
            storage = new = torch.UntypedStorage._new_shared(max(size + size // 4, MIN_SLOT_BYTES))
            self._slots[slot] = storage
            self._generation[slot] += 1
        batch.copy_into(_first_bytes(storage, size))  # the payloads straight into shared memory
        self._busy[slot] = 1
        flags, self._flags_sent = (None if self._flags_sent else self.flags), True
        return RingBatch(self.token, slot, self._generation[slot], size, batch.offsets.tolist(), list(batch.labels),
                         list(batch.keys), new, flags)


_ring: WorkerRing | None = None


def worker_ring() -> WorkerRing | None:
    """This DataLoader worker's ring (made at first use); None outside a worker."""
    global _ring
    if get_worker_info() is None:
        return None
    if _ring is None or not _ring.token.startswith(f"{os.getpid()}-"):
        _ring = WorkerRing()
    return _ring


@dataclass(frozen=True)
class RingBatch:
    """What a worker yields for a batch in its ring; unpickled in the main process as the element itself."""

    token: str
    slot: int
    generation: int
    size: int
    offsets: list[int]
    labels: list[int | bytes | None]
    keys: list[str]
    storage: torch.UntypedStorage | None  # the slot's storage, the first time it is sent (or after it grew)
    flags: torch.Tensor | None  # the worker's flags, with its first batch

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return _element, (self.token, self.slot, self.generation, self.size, self.offsets, self.labels, self.keys,
                          self.storage, self.flags)


# In the main process: each worker's slots (token -> slot -> (generation, storage)) and flags (token -> array).
_slots: dict[str, dict[int, tuple[int, torch.UntypedStorage]]] = {}
_flags: dict[str, np.ndarray] = {}


def _element(token: str, slot: int, generation: int, size: int, offsets: list[int], labels: list,
             keys: list[str], storage: torch.UntypedStorage | None, flags: torch.Tensor | None) -> dict[str, Any]:
    """The batch as a `BatchDataset` element, its data a view of the slot; the slot is freed with the view."""
    if flags is not None:
        _forget_gone_workers()
        _flags[token] = flags.numpy()
    if storage is not None:
        _slots.setdefault(token, {})[slot] = (generation, storage)
    known, held = _slots[token][slot]
    if known != generation:
        raise RuntimeError(f"worker ring {token}: slot {slot} is at generation {known} here, the worker sent "
                           f"{generation}")
    view = _first_bytes(held, size)
    weakref.finalize(view, _release, _flags[token], slot)  # the tensor below keeps `view` alive, its views too
    return {"data": torch.from_numpy(view), "offsets": torch.tensor(offsets, dtype=torch.int64),
            "label": labels_value(labels), "key": keys}


def _release(flags: np.ndarray, slot: int) -> None:
    flags[slot] = 0


def _forget_gone_workers() -> None:
    """Drop the slots of workers that have exited (a DataLoader without persistent workers starts new ones each
    epoch): their memory is unmapped once no element of theirs is left."""
    for token in list(_flags):
        pid = int(token.partition("-")[0])
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            _flags.pop(token, None)
            _slots.pop(token, None)
        except PermissionError:
            pass
