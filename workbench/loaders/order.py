"""Which samples a reader delivers, in which order: epoch shuffles, ranks, DataLoader workers.

Every rank computes the same permutation (same seed and epoch) and takes every `num_shards`-th item
from its `shard_id`, so ranks never overlap and together deliver each sample exactly once. Because that
order is fixed, a reader stopped mid-epoch can resume at its next item (`resume_shards` for shard readers).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
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


# ------------------------------------------------------------------------------ resuming mid-epoch
# A reader stopped after `start` items resumes at item `start` of the same order. For a list of ids that is
# `order[start:]`. A reader of shards through `shuffle_buffer` replays the buffer on positions alone (it never
# looks at the items), so it knows which shards it can skip unread and which members it still needs.


def buffered_order(count: int, size: int, rng: random.Random) -> list[int]:
    """The input positions of `count` items in the order `shuffle_buffer(items, size, rng)` yields them."""
    return list(shuffle_buffer(range(count), size, rng))


@dataclass(frozen=True)
class ShardResume:
    """What a shard reader still has to deliver after `start` items of an epoch: `order[start:]`, whose items
    lie in the members `plan` lists (shard position in the reader's shard order, sorted member positions), so
    every shard the plan leaves out is skipped without a read."""

    order: list[int]  # the epoch's outputs as input positions (shard by shard, member by member)
    start: int
    offsets: list[int]  # input position of each shard's first member (and the total at the end)
    plan: list[tuple[int, list[int]]]

    def items(self, fetched: Iterable[Sequence[T]]) -> Iterator[T]:
        """The rest of the epoch, in order, from the planned members as fetched (one list per plan entry, in plan
        order); each is held only until it is due, as the shuffle buffer would have held it."""
        def positioned() -> Iterator[tuple[int, T]]:
            for (shard, members), got in zip(self.plan, fetched, strict=True):
                if len(got) != len(members):
                    raise ValueError(f"shard {shard}: {len(got)} items fetched for {len(members)} members")
                for member, item in zip(members, got, strict=True):
                    yield self.offsets[shard] + member, item

        return in_target_order(positioned(), self.order[self.start:])


def resume_shards(sizes: Sequence[int], buffer: int, rng: random.Random, start: int) -> ShardResume:
    """Where a reader of shards of `sizes` items (its shards, in reading order) through a `buffer`-item shuffle
    buffer seeded like `rng` (0 or 1: no shuffle) stands after delivering `start` items."""
    offsets = list(itertools.accumulate(sizes, initial=0))
    if not 0 <= start <= offsets[-1]:
        raise ValueError(f"position {start} outside this reader's {offsets[-1]} items")
    order = buffered_order(offsets[-1], buffer, rng)
    plan: list[tuple[int, list[int]]] = []
    shard = 0
    for position in sorted(order[start:]):
        while position >= offsets[shard + 1]:
            shard += 1
        if plan and plan[-1][0] == shard:
            plan[-1][1].append(position - offsets[shard])
        else:
            plan.append((shard, [position - offsets[shard]]))
    return ShardResume(order, start, offsets, plan)


def in_target_order(stream: Iterable[tuple[int, T]], targets: Iterable[int]) -> Iterator[T]:
    """The items of `stream` ((position, item), positions increasing) in the order of `targets`, each held only
    until it is due."""
    held: dict[int, T] = {}
    source = iter(stream)
    for target in targets:
        while target not in held:
            try:
                position, item = next(source)
            except StopIteration:
                raise ValueError(f"position {target} is not in the stream") from None
            held[position] = item
        yield held.pop(target)
