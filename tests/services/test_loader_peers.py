"""Peers (other projects' readers) on our data, against the real MinIO: the same contract as our loaders.

webdataset reads the s3-shards tars over presigned URLs, s3torchconnector the s3-objects layout, mosaic
streaming an MDS copy written by its own MDSWriter. One epoch delivers exactly the ingested samples
(byte-identical, same labels), two ranks never overlap and together deliver everything, shuffled epochs
differ in order and not in content, a seed reproduces an order.
"""

import pytest
from loader_checks import (
    check_dataloader_workers_deliver_each_sample_once,
    check_one_epoch_is_exactly_the_split,
    check_pickles_before_and_after_an_epoch,
    check_shuffled_epochs_differ,
    check_two_ranks_never_overlap,
    epoch,
    ingested,
)

from workbench.data import SyntheticSource
from workbench.errors import WorkbenchError

pytestmark = pytest.mark.services

PEERS = ["webdataset", "s3torchconnector", "mosaic-streaming"]


@pytest.fixture(scope="module")
def dataset(stack):
    """48 small synthetic JPEGs in s3-shards (6 per shard), s3-objects and an MDS copy (several shards)."""
    import uuid

    from workbench.loaders.peers.mosaic import drop_mds, write_mds

    name = f"peers_{uuid.uuid4().hex[:8]}"
    source = SyntheticSource(48, mean_kb=8, seed=11)
    with ingested(stack, name, source, {"s3-shards": {"maxcount": 6}, "s3-objects": {}}):
        try:
            write_mds(stack, name, source, size_limit=64 * 1024)
            yield name, {str(s.id): s for s in source}
        finally:
            drop_mds(stack, name)


@pytest.mark.parametrize("loader", PEERS)
def test_one_epoch_is_exactly_the_split(stack, dataset, loader):
    check_one_epoch_is_exactly_the_split(stack, loader, *dataset)


@pytest.mark.parametrize("loader", PEERS)
def test_label_type_none_drops_labels(stack, dataset, loader):
    name, expected = dataset
    items = epoch(stack, loader, name, label_type="none", shuffle=False)
    assert sorted(i.key for i in items) == sorted(expected)
    assert all(i.label is None for i in items)


@pytest.mark.parametrize("loader", PEERS)
def test_two_ranks_never_overlap(stack, dataset, loader):
    check_two_ranks_never_overlap(stack, loader, *dataset)


@pytest.mark.parametrize("loader", PEERS)
def test_shuffled_epochs_differ_and_seeds_reproduce(stack, dataset, loader):
    check_shuffled_epochs_differ(stack, loader, dataset[0], reproducible=True)


@pytest.mark.slow
@pytest.mark.parametrize("loader", PEERS)
def test_dataloader_workers_deliver_each_sample_once(stack, dataset, loader):
    check_dataloader_workers_deliver_each_sample_once(stack, loader, *dataset, workers=2)


@pytest.mark.parametrize("loader", PEERS)
def test_a_loader_pickles_before_and_after_an_epoch(stack, dataset, loader):
    check_pickles_before_and_after_an_epoch(stack, loader, dataset[0], shard_id=1, num_shards=2)


@pytest.mark.parametrize("loader", PEERS)
def test_a_dataset_never_ingested_is_a_clear_error(stack, loader, unique):
    with pytest.raises(WorkbenchError, match=unique):
        epoch(stack, loader, unique)


def test_write_mds_is_idempotent(stack, dataset, monkeypatch):
    import streaming

    from workbench.loaders.peers.mosaic import write_mds

    name, _ = dataset

    def no_writer(*args, **kwargs):
        raise AssertionError("MDSWriter must not run when the index exists")

    monkeypatch.setattr(streaming, "MDSWriter", no_writer)
    assert write_mds(stack, name, SyntheticSource(48, mean_kb=8, seed=11)).endswith(f"/{name}/mds/train")
