"""The contract every registered loader keeps, on the same data in every backend.

One epoch delivers exactly the ingested samples (same multiset of ids, byte-identical payloads), with
1, 2 and 4 DataLoader workers and with 2 ranks that never overlap; shuffled epochs differ in order,
not in content; a seed reproduces an order.
"""

from collections import Counter

import pytest

from workbench.backends import make_backend
from workbench.data import SyntheticSource
from workbench.ingest import ingest
from workbench.loaders import loader_class, make_loader

pytestmark = pytest.mark.services

LOADERS = ["cassandra", "s3-shards", "s3-objects", "s3-naive", "ignite", "fs",
           "webdataset", "s3torchconnector", "mosaic-streaming"]
LAYOUTS = {"cassandra": {}, "s3-objects": {}, "s3-shards": {"maxcount": 6}, "ignite": {}, "fs": {}}


@pytest.fixture(scope="module")
def dataset(stack):
    """48 small synthetic JPEGs ingested into every backend under one dataset name."""
    import uuid

    name = f"contract_{uuid.uuid4().hex[:8]}"
    source = SyntheticSource(48, mean_kb=8, seed=11)
    backends = [make_backend(b, stack, name, **opts) for b, opts in LAYOUTS.items()]
    for backend in backends:
        ingest(source, backend, progress=False)
    peers_with_layouts = {loader_class(n) for n in LOADERS if hasattr(loader_class(n), "prepare_dataset")}
    for cls in peers_with_layouts:
        cls.prepare_dataset(stack, name, source)
    yield name, {str(s.id): s for s in source}
    for backend in backends:
        backend.drop()


def epoch(stack, loader, name, **config):
    with make_loader(loader, stack, dataset=name, **config) as source:
        return list(source)


@pytest.mark.parametrize("loader", LOADERS)
def test_one_epoch_is_exactly_the_split(stack, dataset, loader):
    name, expected = dataset
    items = epoch(stack, loader, name)
    assert Counter(i.key for i in items) == Counter(expected.keys())
    for item in items:
        assert item.data == expected[item.key].data
        assert item.label == expected[item.key].label


@pytest.mark.parametrize("loader", LOADERS)
def test_two_ranks_never_overlap(stack, dataset, loader):
    name, expected = dataset
    ranks = [Counter(i.key for i in epoch(stack, loader, name, shard_id=r, num_shards=2)) for r in range(2)]
    assert not set(ranks[0]) & set(ranks[1])
    assert ranks[0] + ranks[1] == Counter(expected.keys())


@pytest.mark.parametrize("loader", LOADERS)
def test_shuffled_epochs_differ_and_seeds_reproduce(stack, dataset, loader):
    name, _ = dataset
    with make_loader(loader, stack, dataset=name, seed=5) as source:
        first = [i.key for i in source]
        source.set_epoch(1)
        second = [i.key for i in source]
    assert first != second and sorted(first) == sorted(second)
    if loader_class(loader).Config(dataset=name).ordered:
        with make_loader(loader, stack, dataset=name, seed=5) as again:
            assert [i.key for i in again] == first


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2, 4])
@pytest.mark.parametrize("loader", LOADERS)
def test_dataloader_workers_deliver_each_sample_once(stack, dataset, loader, workers):
    from torch.utils.data import DataLoader

    from workbench.adapters.torch import LoaderDataset, collate_raw

    name, expected = dataset
    data = LoaderDataset(loader, stack, dataset=name, batch_size=8)
    keys = Counter()
    for batch in DataLoader(data, batch_size=8, num_workers=workers, collate_fn=collate_raw):
        keys.update(batch["key"])
    assert keys == Counter(expected.keys())


def test_invalid_settings_are_rejected_before_io(stack):
    from workbench.errors import WorkbenchError

    for bad in ({"concurrency": 0}, {"prefetch_buffers": 0}, {"label_type": "float"}, {"shard_id": 2, "num_shards": 2},
                {"no_such_knob": 1}):
        with pytest.raises(WorkbenchError, match="invalid cassandra loader setting"):
            make_loader("cassandra", stack, dataset="never_ingested", **bad)
