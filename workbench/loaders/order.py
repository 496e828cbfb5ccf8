"""Which samples a reader delivers, in which order: epoch shuffles, ranks, DataLoader workers.

Every rank computes the same permutation (same seed and epoch) and takes every `num_shards`-th item
from its `shard_id`, so ranks never overlap and together deliver each sample exactly once.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator, Sequence
from typing import TypeVar

T = TypeVar("T")


def epoch_order(items: Sequence[T], seed: int, epoch: int, shuffle: bool = True) -> list[T]:
    """The items in this epoch's order: a seeded permutation that changes every epoch."""
    ordered = list(items)
    if shuffle:
        random.Random(f"{seed}:{epoch}").shuffle(ordered)
    return ordered


def effective_shard(shard_id: int, num_shards: int, worker_id: int = 0, num_workers: int = 1) -> tuple[int, int]:
    """Ranks x DataLoader workers as one flat shard space: (index, count)."""
    if not 0 <= shard_id < num_shards:
        raise ValueError(f"shard_id {shard_id} outside 0..{num_shards - 1}")
    if not 0 <= worker_id < num_workers:
        raise ValueError(f"worker_id {worker_id} outside 0..{num_workers - 1}")
    return shard_id * num_workers + worker_id, num_shards * num_workers


def take_shard(items: Sequence[T], index: int, count: int) -> list[T]:
    """Every `count`-th item starting at `index` (sizes differ by at most one across shards)."""
    return list(items[index::count])


def shuffle_buffer(stream: Iterable[T], size: int, rng: random.Random) -> Iterator[T]:
    """WebDataset-style approximate shuffle of a stream with a bounded buffer of `size` items."""
    if size <= 1:
        yield from stream
        return
    buffer: list[T] = []
    for item in stream:
        if len(buffer) < size:
            buffer.append(item)
            continue
        i = rng.randrange(len(buffer))
        buffer[i], item = item, buffer[i]
        yield item
    rng.shuffle(buffer)
    yield from buffer
