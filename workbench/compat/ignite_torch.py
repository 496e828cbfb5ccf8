"""The IgniteDataset elements as a torch ``IterableDataset`` (imports torch; the tf.data one does not)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from torch.utils.data import IterableDataset, get_worker_info

from workbench.compat.ignite_dataset import dataset_source, to_python
from workbench.config import Settings
from workbench.loaders.order import effective_shard, epoch_order, take_shard


class IgniteTorchDataset(IterableDataset):
    """The IgniteDataset elements ``{'key': key, 'val': {field: value}}`` as a torch IterableDataset.

    Values stay python values (bytes, ints, nested dicts: decode in a transform/collate). Ranks
    (`shard_id` of `num_shards`) and DataLoader workers split the cache's partitions between them, so
    together they read every entry exactly once; with `part` >= 0 only that partition is read (by the
    first worker). `shuffle` permutes the partition order per `set_epoch` (same on every rank).
    """

    def __init__(self, cache_name: str, host: str | None = None, port: int | None = None, local: bool = False,
                 part: int = -1, page_size: int = 100, username: str | None = None, password: str | None = None,
                 certfile: str | None = None, keyfile: str | None = None, cert_password: str | None = None,
                 settings: Settings | None = None, shard_id: int = 0, num_shards: int = 1, shuffle: bool = False,
                 seed: int = 0, transform: Callable[[dict], Any] | None = None) -> None:
        self.source = dataset_source(cache_name, host, port, local, part, page_size, username, password, certfile,
                                     keyfile, cert_password, settings)
        effective_shard(shard_id, num_shards)  # validates
        self.shard_id, self.num_shards = shard_id, num_shards
        self.shuffle, self.seed, self.epoch = shuffle, seed, 0
        self.transform = transform
        self._partitions: int | None = None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[Any]:
        info = get_worker_info()
        worker_id, num_workers = (info.id, info.num_workers) if info else (0, 1)
        index, count = effective_shard(self.shard_id, self.num_shards, worker_id, num_workers)
        if self.source.part >= 0:
            parts = [self.source.part] if index == 0 else []
        elif count == 1 and not self.shuffle:
            parts = [-1]  # one reader, no shuffling: one scan of the whole cache
        else:
            if self._partitions is None:
                self._partitions = self.source.partitions()
            order = epoch_order(range(self._partitions), self.seed, self.epoch, self.shuffle)
            parts = take_shard(order, index, count)
        if not parts:
            return
        for key, value in self.source.entries(parts):
            element = {"key": to_python(key), "val": to_python(value)}
            yield self.transform(element) if self.transform else element
