"""The checks every loader's epochs must pass, shared by the contract tests (every registered loader on
every backend) and the peer tests (other projects' readers on layouts of their own); `ingested` puts one
source into several backends for them."""

from __future__ import annotations

import pickle
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from shm_checks import in_shared_memory

from workbench.backends import Backend, make_backend
from workbench.ingest import ingest
from workbench.loaders import Item, make_loader


@contextmanager
def ingested(stack, name: str, source, layouts: dict[str, dict]) -> Iterator[list[Backend]]:
    """`source` ingested under dataset `name` into every backend of `layouts` (backend -> its options); the
    backends' data is dropped on the way out."""
    backends = [make_backend(b, stack, name, **opts) for b, opts in layouts.items()]
    try:
        for backend in backends:
            ingest(source, backend, progress=False)
        yield backends
    finally:
        for backend in backends:
            backend.drop()


def check_pickles_before_and_after_an_epoch(stack, loader: str, name: str, **config) -> None:
    """A copy pickled before the first epoch and one pickled after it read the same keys as the original."""
    with make_loader(loader, stack, dataset=name, **config) as source:
        fresh = pickle.loads(pickle.dumps(source))
        first = [i.key for i in source]
        used = pickle.loads(pickle.dumps(source))
    for copy in (fresh, used):
        with copy:
            assert [i.key for i in copy] == first


def epoch(stack, loader: str, name: str, **config) -> list[Item]:
    with make_loader(loader, stack, dataset=name, **config) as source:
        return list(source)


def check_one_epoch_is_exactly_the_split(stack, loader: str, name: str, expected: dict) -> None:
    """The same multiset of ids as ingested, byte-identical payloads, the same labels."""
    items = epoch(stack, loader, name)
    assert Counter(i.key for i in items) == Counter(expected.keys())
    for item in items:
        assert item.data == expected[item.key].data
        assert item.label == expected[item.key].label


def check_two_ranks_never_overlap(stack, loader: str, name: str, expected: dict) -> None:
    ranks = [Counter(i.key for i in epoch(stack, loader, name, shard_id=r, num_shards=2)) for r in range(2)]
    assert ranks[0] and ranks[1]
    assert not set(ranks[0]) & set(ranks[1])
    assert ranks[0] + ranks[1] == Counter(expected.keys())


def check_shuffled_epochs_differ(stack, loader: str, name: str, reproducible: bool) -> None:
    """Epochs differ in order, not in content; with `reproducible`, a seed gives the same order again."""
    with make_loader(loader, stack, dataset=name, seed=5) as source:
        first = [i.key for i in source]
        source.set_epoch(1)
        second = [i.key for i in source]
    assert first != second and sorted(first) == sorted(second)
    if reproducible:
        with make_loader(loader, stack, dataset=name, seed=5) as again:
            assert [i.key for i in again] == first


def check_dataloader_workers_deliver_each_sample_once(stack, loader: str, name: str, expected: dict,
                                                      workers: int) -> None:
    """Workers started as the pipelines start them (settings.worker_start), each reading its own shard."""
    from torch.utils.data import DataLoader

    from workbench.adapters.torch import LoaderDataset, collate_raw, worker_context

    data = LoaderDataset(loader, stack, dataset=name, batch_size=8)
    keys: Counter = Counter()
    for batch in DataLoader(data, batch_size=8, num_workers=workers, collate_fn=collate_raw,
                            multiprocessing_context=worker_context(stack, workers)):
        keys.update(batch["key"])
    assert keys == Counter(expected.keys())


def check_batches_are_exactly_the_split(stack, loader: str, name: str, expected: dict, batch_size: int = 5) -> None:
    """The batch path: full batches but the last, the same samples byte for byte, counted once per batch."""
    with make_loader(loader, stack, dataset=name, batch_size=batch_size) as source:
        batches = list(source.batches())
        assert (source.samples, source.bytes) == (sum(map(len, batches)), sum(b.nbytes for b in batches))
    assert all(len(b) == batch_size for b in batches[:-1]) and 1 <= len(batches[-1]) <= batch_size
    keys = [k for b in batches for k in b.keys]
    assert Counter(keys) == Counter(expected.keys())
    for batch in batches:
        for index, key in enumerate(batch.keys):
            assert batch.view(index).tobytes() == expected[key].data
            assert batch.labels[index] == expected[key].label


def check_worker_batches_arrive_in_shared_memory(stack, loader: str, name: str, expected: dict, workers: int) -> None:
    """`BatchDataset` in DataLoader workers: each sample once, byte-identical, and every batch's payload
    tensor in shared memory (a slot of the worker's ring, handed over, not pickled through the worker's pipe)."""
    from torch.utils.data import DataLoader

    from workbench.adapters.torch import BatchDataset, payloads, worker_context

    data = BatchDataset(loader, stack, dataset=name, batch_size=8)
    keys: Counter = Counter()
    for element in DataLoader(data, batch_size=None, num_workers=workers,
                              multiprocessing_context=worker_context(stack, workers)):
        assert in_shared_memory(element["data"])
        for key, raw in zip(element["key"], payloads(element), strict=True):
            assert raw.numpy().tobytes() == expected[key].data
        keys.update(element["key"])
    assert keys == Counter(expected.keys())
