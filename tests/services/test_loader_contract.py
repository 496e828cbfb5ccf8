"""The contract every registered loader keeps, on the same data in every backend.

One epoch delivers exactly the ingested samples (same multiset of ids, byte-identical payloads), item by
item and batch by batch, with 1, 2 and 4 DataLoader workers (batches through shared memory) and with 2
ranks that never overlap; shuffled epochs differ in order, not in content; a seed reproduces an order.
"""

import pytest
from loader_checks import (
    check_batches_are_exactly_the_split,
    check_dataloader_workers_deliver_each_sample_once,
    check_one_epoch_is_exactly_the_split,
    check_shuffled_epochs_differ,
    check_two_ranks_never_overlap,
    check_worker_batches_arrive_in_shared_memory,
    ingested,
)

from workbench.data import SyntheticSource
from workbench.loaders import loader_class, make_loader

pytestmark = pytest.mark.services

LOADERS = ["cassandra", "cassandra-py", "s3-shards", "s3-objects", "s3-naive", "ignite", "fs",
           "webdataset", "s3torchconnector", "mosaic-streaming"]
LAYOUTS = {"cassandra": {}, "s3-objects": {}, "s3-shards": {"maxcount": 6}, "ignite": {}, "fs": {}}


@pytest.fixture(scope="module")
def dataset(stack):
    """48 small synthetic JPEGs ingested into every backend under one dataset name."""
    import uuid

    name = f"contract_{uuid.uuid4().hex[:8]}"
    source = SyntheticSource(48, mean_kb=8, seed=11)
    with ingested(stack, name, source, LAYOUTS):
        peers_with_layouts = {loader_class(n) for n in LOADERS if hasattr(loader_class(n), "prepare_dataset")}
        for cls in peers_with_layouts:
            cls.prepare_dataset(stack, name, source)
        yield name, {str(s.id): s for s in source}


@pytest.mark.parametrize("loader", LOADERS)
def test_one_epoch_is_exactly_the_split(stack, dataset, loader):
    check_one_epoch_is_exactly_the_split(stack, loader, *dataset)


@pytest.mark.parametrize("loader", ["cassandra", "cassandra-py", "ignite", "fs"])
def test_connecting_first_changes_nothing_read(stack, dataset, loader):
    """`connect()` (what `bench loaders` calls before its clock starts) twice, then the same exact epoch."""
    name, expected = dataset
    with make_loader(loader, stack, dataset=name) as source:
        source.connect()
        source.connect()
        items = [item for batch in source.batches() for item in batch.items()]
    assert sorted(i.key for i in items) == sorted(expected)
    assert all(i.data == expected[i.key].data for i in items)


@pytest.mark.parametrize("loader", LOADERS)
def test_batches_are_exactly_the_split(stack, dataset, loader):
    check_batches_are_exactly_the_split(stack, loader, *dataset)


@pytest.mark.parametrize("workers", [2])
@pytest.mark.parametrize("loader", LOADERS)
def test_worker_batches_arrive_in_shared_memory(stack, dataset, loader, workers):
    check_worker_batches_arrive_in_shared_memory(stack, loader, *dataset, workers)


@pytest.mark.parametrize("loader", LOADERS)
def test_two_ranks_never_overlap(stack, dataset, loader):
    check_two_ranks_never_overlap(stack, loader, *dataset)


@pytest.mark.parametrize("loader", LOADERS)
def test_shuffled_epochs_differ_and_seeds_reproduce(stack, dataset, loader):
    name, _ = dataset
    check_shuffled_epochs_differ(stack, loader, name, reproducible=loader_class(loader).Config(dataset=name).ordered)


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2, 4])
@pytest.mark.parametrize("loader", LOADERS)
def test_dataloader_workers_deliver_each_sample_once(stack, dataset, loader, workers):
    check_dataloader_workers_deliver_each_sample_once(stack, loader, *dataset, workers)


def test_invalid_settings_are_rejected_before_io(stack):
    from workbench.errors import WorkbenchError

    for bad in ({"concurrency": 0}, {"prefetch_buffers": 0}, {"label_type": "float"}, {"shard_id": 2, "num_shards": 2},
                {"no_such_knob": 1}):
        with pytest.raises(WorkbenchError, match="invalid cassandra loader setting"):
            make_loader("cassandra", stack, dataset="never_ingested", **bad)
