"""The IgniteDataset elements as a torch ``IterableDataset`` (imports torch; the tf.data one does not)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from torch.utils.data import IterableDataset

from workbench.compat.ignite_dataset import dataset_source, ignite_order, to_python
from workbench.compat.resumable import Order, PartitionReader, Resumable, worker
from workbench.config import Settings
from workbench.loaders.order import effective_shard, epoch_order, take_shard


class IgniteTorchDataset(Resumable, IterableDataset):
    """The IgniteDataset elements ``{'key': key, 'val': {field: value}}`` as a torch IterableDataset.

    Values stay python values (bytes, ints, nested dicts: decode in a transform/collate). Ranks
    (`shard_id` of `num_shards`) and DataLoader workers split the cache's partitions between them, so
    together they read every entry exactly once; with `part` >= 0 only that partition is read (by the
    first worker). `shuffle` permutes the partition order per `set_epoch` (same on every rank).

    Resumable (torchdata's Stateful convention): `state_dict()` after k elements, given to a fresh dataset's
    `load_state_dict()`, makes its next iteration deliver exactly the rest of that epoch (per DataLoader
    worker, as `StatefulDataLoader` keeps it), scanning from the partition it stopped in.
    """

    _state_name = "ignite-dataset"

    def __init__(self, cache_name: str, host: str | None = None, port: int | None = None, local: bool = False,
                 part: int = -1, page_size: int = 100, username: str | None = None, password: str | None = None,
                 certfile: str | None = None, keyfile: str | None = None, cert_password: str | None = None,
                 settings: Settings | None = None, shard_id: int = 0, num_shards: int = 1, shuffle: bool = False,
                 seed: int = 0, transform: Callable[[dict], Any] | None = None) -> None:
        self.source = dataset_source(cache_name, host, port, local, part, page_size, username, password, certfile,
                                     keyfile, cert_password, settings)
        effective_shard(shard_id, num_shards)  # validates
        self.shard_id, self.num_shards = shard_id, num_shards
        self.shuffle, self.seed = shuffle, seed
        self._start_epochs()
        self.transform = transform
        self._partitions: int | None = None

    # resuming (torchdata's Stateful convention, `workbench.compat.resumable`): the loaders' state format, plus
    # where in this reader's partitions it stopped (`partition`: index into them, `offset`: entries of it
    # delivered), so a resumed epoch scans only from that partition on.

    def _order(self) -> Order:
        return ignite_order(self.source, self.seed, self.shuffle, self.shard_id, self.num_shards)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_live": None}

    def _parts(self, index: int, count: int) -> list[int]:
        if self.source.part >= 0:
            return [self.source.part] if index == 0 else []
        if count == 1 and not self.shuffle:
            return [-1]  # one reader, no shuffling: one scan of the whole cache
        if self._partitions is None:
            self._partitions = self.source.partitions()
        return take_shard(epoch_order(range(self._partitions), self.seed, self.epoch, self.shuffle), index, count)

    def __iter__(self) -> Iterator[Any]:
        # Not a generator: the loaded state is taken now (StatefulDataLoader asks for a state at once).
        saved = self._begin()
        resume = self.check(saved) if saved is not None else None
        reader = PartitionReader(self, self._parts(*effective_shard(self.shard_id, self.num_shards, *worker())),
                                 saved if resume is not None and resume.epoch == self.epoch else None, worker())
        self._live = reader
        return self._read(reader)

    def _read(self, reader: PartitionReader) -> Iterator[Any]:
        try:
            for key, value in reader.entries():
                element = {"key": to_python(key), "val": to_python(value)}
                yield self.transform(element) if self.transform else element
        finally:
            self._end(reader)
