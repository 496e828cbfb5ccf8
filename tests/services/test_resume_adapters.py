"""The tf.data and DALI adapters and the reference systems' datasets, stopped mid-epoch, resume at the next sample.

Against the real services: stop after k elements, save the state, build a fresh object, load the state, finish
the epoch: together exactly the uninterrupted sequence, none twice, none missed. tf.data and DALI read ahead
of the consumer, so the state saved is the one of the last element the consumer took; the compat torch
datasets also resume inside torchdata's StatefulDataLoader with 2 workers.
"""

from __future__ import annotations

import uuid
import warnings
from collections import Counter

import pytest

from workbench.backends import make_backend
from workbench.data import SyntheticSource
from workbench.errors import WorkbenchError
from workbench.ingest import ingest

pytestmark = pytest.mark.services

# Ignite with 16 partitions (the node's cache templates), not 1024: shuffled or split over readers, the
# Ignite datasets scan partition by partition, and 1024 scans an epoch are slow on a loaded machine
LAYOUTS = {"fs": {}, "cassandra": {}, "s3-objects": {}, "s3-shards": {"maxcount": 6}, "ignite": {"partitions": 16}}
N = 48


@pytest.fixture(scope="module")
def dataset(stack):
    """(name, ids, backends by layout, id by image bytes) of N small synthetic JPEGs in every layout."""
    name = f"resume_ad_{uuid.uuid4().hex[:8]}"
    source = SyntheticSource(N, mean_kb=6, seed=21)
    backends = {layout: make_backend(layout, stack, name, **options) for layout, options in LAYOUTS.items()}
    for backend in backends.values():
        ingest(source, backend, progress=False)
    yield name, [str(s.id) for s in source], backends, {s.data: str(s.id) for s in source}
    for layout, backend in backends.items():
        try:
            backend.drop()
        except Exception as exc:  # a loaded machine's DROP KEYSPACE can time out: clean-up, not the test
            warnings.warn(f"could not drop the {layout} copy of {name}: {exc}", stacklevel=1)


# ------------------------------------------------------------------------------------ tf.data


def _tf_keys(element, per_sample: bool) -> list[str]:
    keys = element["key"].numpy()
    return [keys.decode()] if per_sample else [k.decode() for k in keys]


@pytest.mark.parametrize("loader", ["fs", "cassandra", "s3-shards"])
@pytest.mark.parametrize("per_sample", [False, True])
def test_tf_dataset_resumes_where_the_consumer_stopped(stack, dataset, loader, per_sample, tf):
    from workbench.adapters.tf import TFLoaderDataset

    name, ids, _, _ = dataset
    config = {"dataset": name, "batch_size": 5, "seed": 3}
    whole = [k for e in TFLoaderDataset(loader, stack, per_sample, **config) for k in _tf_keys(e, per_sample)]
    assert Counter(whole) == Counter(ids)
    first, head = TFLoaderDataset(loader, stack, per_sample, **config), []
    for element in first:
        head.extend(_tf_keys(element, per_sample))
        if len(head) == 15:  # 3 batches, or 15 samples (tf.data has already read further)
            break
    state = first.state_dict()
    assert state["position"] == 15 and not state["done"]
    again = TFLoaderDataset(loader, stack, per_sample, **config)
    again.load_state_dict(state)
    assert again.state_dict() == state  # before the iteration starts, it says where it will
    rest = [k for e in again for k in _tf_keys(e, per_sample)]
    assert head + rest == whole
    assert again.state_dict()["done"]


def test_tf_dataset_refuses_a_state_of_other_settings(stack, dataset, tf):
    from workbench.adapters.tf import TFLoaderDataset

    name = dataset[0]
    state = TFLoaderDataset("fs", stack, dataset=name, seed=3).state_dict()
    with pytest.raises(WorkbenchError, match=r"seed=3.*seed=4"):
        TFLoaderDataset("fs", stack, dataset=name, seed=4).load_state_dict(state)


def test_ignite_dataset_tf_resumes_where_the_consumer_stopped(stack, dataset, tf):
    from workbench.compat.ignite_dataset import ResumableIgniteDataset

    cache = dataset[2]["ignite"].cache_name

    def keys(ds, stop: int | None = None) -> list[str]:
        out = []
        for element in ds:
            out.append(element["key"].numpy().decode())
            if len(out) == stop:
                break
        return out

    whole = keys(ResumableIgniteDataset(cache, settings=stack, page_size=7))
    assert len(whole) == N and len(set(whole)) == N
    first = ResumableIgniteDataset(cache, settings=stack, page_size=7)
    head = keys(first, stop=17)
    state = first.state_dict()
    assert (state["position"], state["partition"], state["offset"], state["done"]) == (17, 0, 17, False)
    again = ResumableIgniteDataset(cache, settings=stack, page_size=7)
    again.load_state_dict(state)
    assert head + keys(again) == whole
    assert again.state_dict()["done"]


# ------------------------------------------------------------------------------------ DALI


def _dali_ids(source, pipe, by_bytes, stop: int | None = None) -> list[str]:
    """Ids of the samples of the batches the consumer takes (all of the epoch, or `stop` batches)."""
    import numpy as np

    ids = []
    taken = 0
    while stop is None or taken < stop:
        try:
            jpegs, _ = source.run(pipe)
        except StopIteration:
            break
        ids.extend(by_bytes[np.array(jpegs[i]).tobytes()] for i in range(len(jpegs)))
        taken += 1
    return ids


@pytest.mark.parametrize("loader", ["fs", "s3-objects"])
def test_dali_source_resumes_where_the_consumer_stopped(stack, dataset, loader):
    pytest.importorskip("nvidia.dali")
    from workbench.adapters.dali import BatchSource, image_pipeline
    from workbench.loaders import make_loader

    name, ids, _, by_bytes = dataset

    def source(state=None) -> tuple:
        feed = BatchSource(make_loader(loader, stack, dataset=name, seed=5), 4)
        if state is not None:
            feed.load_state_dict(state)
        return feed, image_pipeline(feed, 4, gpu=False, decode=False, prefetch_queue_depth=3)

    feed, pipe = source()
    whole = _dali_ids(feed, pipe, by_bytes)
    assert Counter(whole) == Counter(ids)
    feed, pipe = source()
    head = _dali_ids(feed, pipe, by_bytes, stop=3)
    state = feed.state_dict()
    assert state["position"] == 12 and not state["done"]
    assert feed.loader.state_dict()["position"] > 12  # DALI's queue had asked for more: not what was taken
    feed.loader.close()
    feed, pipe = source(state)
    rest = _dali_ids(feed, pipe, by_bytes)
    assert head + rest == whole
    assert feed.state_dict()["done"]
    feed.loader.close()


# ------------------------------------------------------------------------------------ compat datasets


def object_key(item) -> str:
    """ObjectIterableDataset transform: the object's key (module level, so DataLoader workers can pickle it)."""
    with item:
        return item.key


def sample_id(sample: dict) -> str:
    return sample["uid"]


def entry_key(element: dict) -> str:
    return str(element["key"])


KINDS = ["oss", "cortx", "ignite-scan", "ignite-partitions"]


def _compat(kind: str, stack, dataset):
    """A fresh compat dataset of `kind` over the ingested data, yielding one id per sample."""
    backends = dataset[2]
    if kind == "oss":
        from workbench.compat.oss_connector import ObjectIterableDataset

        objects = backends["s3-objects"]
        uri = f"s3://{objects.bucket}/{objects.prefix}/train/"
        ds = ObjectIterableDataset.from_prefix(uri, stack, transform=object_key, shuffle=True, seed=4,
                                               key_filter=lambda k: k.endswith(".jpg"), prefetch_concurrency=4)
        return ds
    if kind == "cortx":
        from workbench.compat.cortx import RemoteDataset

        shards = backends["s3-shards"]
        return RemoteDataset(stack, shards.bucket, shards.prefix, shuffle=True, seed=4).map(sample_id)
    from workbench.compat.ignite_torch import IgniteTorchDataset

    shuffle = kind == "ignite-partitions"  # shuffled partitions, or (one reader, in order) one scan of the cache
    return IgniteTorchDataset(backends["ignite"].cache_name, settings=stack, transform=entry_key, shuffle=shuffle,
                              seed=4, page_size=7)


@pytest.mark.parametrize("kind", KINDS)
def test_compat_dataset_resumes_in_process(stack, dataset, kind):
    whole = list(_compat(kind, stack, dataset))
    assert len(whole) == N and len(set(whole)) == N
    first, head = _compat(kind, stack, dataset), []
    for element in first:
        head.append(element)
        if len(head) == 17:
            break
    state = first.state_dict()
    assert state["position"] == 17 and not state["done"]
    again = _compat(kind, stack, dataset)
    again.load_state_dict(state)
    rest = list(again)
    assert head + rest == whole
    assert again.state_dict()["done"]


@pytest.mark.parametrize("kind", ["oss", "ignite-partitions"])
def test_compat_dataset_refuses_a_state_of_another_order(stack, dataset, kind):
    state = _compat(kind, stack, dataset).state_dict()
    other = _compat(kind, stack, dataset)
    other.seed = 5
    with pytest.raises(WorkbenchError, match=r"seed=4.*seed=5"):
        other.load_state_dict(state)


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")
@pytest.mark.parametrize("kind", ["oss", "cortx", "ignite-scan"])  # 2 readers: Ignite by partitions anyway
def test_compat_dataset_resumes_in_a_stateful_dataloader_with_two_workers(stack, dataset, kind):
    StatefulDataLoader = pytest.importorskip("torchdata.stateful_dataloader").StatefulDataLoader
    from workbench.adapters.torch import worker_context

    def data_loader():
        return StatefulDataLoader(_compat(kind, stack, dataset), batch_size=4, num_workers=2,
                                  collate_fn=list, multiprocessing_context=worker_context(stack, 2))

    whole = list(data_loader())
    keys = [k for batch in whole for k in batch]
    assert len(keys) == N and len(set(keys)) == N
    first, head = data_loader(), []
    for batch in first:
        head.append(batch)
        if len(head) == 3:
            break
    state = first.state_dict()
    workers = state["_snapshot"]["_worker_snapshots"]
    assert sorted(workers[w]["dataset_state"]["position"] for w in workers) == [4, 8]  # the datasets' own states
    del first
    again = data_loader()
    again.load_state_dict(state)
    rest = list(again)
    assert head + rest == whole
