"""The S3 loaders against the real MinIO: s3-shards, s3-objects, s3-naive, the torch datasets, checkpoints.

Datasets are ingested once per module into a bucket of this module's own (dropped and deleted at the end).
"""

from __future__ import annotations

import io
import time
import uuid
from collections import Counter

import pytest
import torch
from torch.utils.data import DataLoader

from workbench.adapters.torch import LoaderDataset, collate_raw, worker_context
from workbench.backends.registry import make_backend
from workbench.checkpoints.s3 import S3Checkpoint
from workbench.compat.cortx import RemoteDataset, make_client
from workbench.compat.oss_connector import ObjectIterableDataset, ObjectMapDataset, default_manifest_parser
from workbench.data import SyntheticSource
from workbench.errors import WorkbenchError
from workbench.ingest import ingest
from workbench.loaders import make_loader
from workbench.loaders.s3_objects import raw_ceiling as objects_ceiling
from workbench.loaders.s3_shards import raw_ceiling as shards_ceiling
from workbench.net.toxiproxy import Toxiproxy
from workbench.storage import s3_client

pytestmark = [pytest.mark.services,
              pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")]  # 2-core machines

N = 200


@pytest.fixture(scope="module")
def client(settings):
    return s3_client(settings)


def _delete_prefix(client, bucket: str, prefix: str = "") -> None:
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if keys:
            client.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})


@pytest.fixture(scope="module")
def bucket(settings, client):
    name = f"wbt-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=name)
    yield name
    try:
        for upload in client.list_multipart_uploads(Bucket=name).get("Uploads", []):
            client.abort_multipart_upload(Bucket=name, Key=upload["Key"], UploadId=upload["UploadId"])
        _delete_prefix(client, name)
        client.delete_bucket(Bucket=name)
    except client.exceptions.NoSuchBucket:
        pass


def _ingested(settings, client, bucket, backend_name, source, **options):
    backend = make_backend(backend_name, settings, source.name, bucket=bucket, workers=4, **options)
    summary = ingest(source, backend, progress=False)
    assert summary.samples == len(source)
    return backend


def _drop(backend, client) -> None:
    try:
        backend.drop()
    except NotImplementedError:
        _delete_prefix(client, backend.bucket, backend.prefix + "/")


@pytest.fixture(scope="module")
def source():
    return SyntheticSource(N, mean_kb=20, name=f"s3l-{uuid.uuid4().hex[:6]}")


@pytest.fixture(scope="module")
def expected(source):
    """sample id -> (image bytes, label)."""
    return {str(s.id): (s.data, s.label) for s in source}


@pytest.fixture(scope="module")
def shards(settings, client, bucket, source):
    """The source as 20 shards of 10 samples (enough for 2 ranks x 4 workers)."""
    backend = _ingested(settings, client, bucket, "s3-shards", source, maxcount=10)
    yield backend
    _drop(backend, client)


@pytest.fixture(scope="module")
def objects(settings, client, bucket, source):
    backend = _ingested(settings, client, bucket, "s3-objects", source)
    yield backend
    _drop(backend, client)


@pytest.fixture
def datasets(shards, objects):
    """Both layouts ingested (the loaders find them through the catalog)."""
    return shards, objects


def _epoch(settings, name: str, dataset: str, epoch: int = 0, **config):
    with make_loader(name, settings, dataset=dataset, **config) as loader:
        loader.set_epoch(epoch)
        return list(loader)


def _check_items(items, expected) -> None:
    assert Counter(i.key for i in items) == Counter(set(expected))  # every id exactly once
    for item in items:
        data, label = expected[item.key]
        assert item.data == data
        assert item.label == label


LOADERS = ["s3-shards", "s3-objects", "s3-naive"]


# -------------------------------------------------------------------------------- every loader


@pytest.mark.parametrize("name", LOADERS)
@pytest.mark.parametrize("shuffle", [False, True])
def test_one_epoch_delivers_every_sample_byte_for_byte(settings, datasets, source, expected, name, shuffle):
    items = _epoch(settings, name, source.name, shuffle=shuffle, concurrency=8)
    _check_items(items, expected)


@pytest.mark.parametrize("name", LOADERS)
def test_two_ranks_are_disjoint_and_cover_everything(settings, datasets, source, expected, name):
    ranks = [{i.key for i in _epoch(settings, name, source.name, epoch=1, shard_id=r, num_shards=2)}
             for r in range(2)]
    assert not ranks[0] & ranks[1]
    assert ranks[0] | ranks[1] == set(expected)
    assert all(ranks)


@pytest.mark.parametrize("name", ["s3-shards", "s3-objects"])
@pytest.mark.parametrize("workers", [1, 2, 4])
def test_dataloader_workers_deliver_each_sample_once(settings, datasets, source, expected, name, workers):
    dataset = LoaderDataset(name, settings, dataset=source.name, concurrency=8)
    dataset.set_epoch(2)
    loader = DataLoader(dataset, batch_size=16, num_workers=workers, collate_fn=collate_raw,
                        multiprocessing_context=worker_context(settings, workers))
    seen = Counter()
    for batch in loader:
        for data, label, key in zip(batch["data"], batch["label"], batch["key"], strict=True):
            assert (data, label) == expected[key]
            seen[key] += 1
    assert seen == Counter(set(expected))


@pytest.mark.parametrize("name", ["s3-shards", "s3-objects"])
def test_shuffled_epochs_differ_and_the_seed_reproduces_them(settings, datasets, source, expected, name):
    def order(epoch: int, seed: int = 3) -> list[str]:
        return [i.key for i in _epoch(settings, name, source.name, epoch=epoch, seed=seed)]

    e0, e1 = order(0), order(1)
    assert set(e0) == set(e1) == set(expected) and len(e0) == len(e1) == N
    assert e0 != e1
    assert order(0) == e0
    assert order(0, seed=4) != e0


def test_raw_ceilings_read_everything(settings, datasets, source):
    from workbench.loaders.base import LoaderConfig

    config = LoaderConfig(dataset=source.name, concurrency=8)
    samples, nbytes = objects_ceiling(settings, config)
    assert (samples, nbytes) == (N, sum(len(s.data) for s in source))
    samples, nbytes = shards_ceiling(settings, config)
    assert samples == N and nbytes > sum(len(s.data) for s in source)  # whole tars: headers, labels, ids


def test_unknown_loader_setting_fails_before_io(settings, source):
    with pytest.raises(WorkbenchError, match="parallel_shards"):
        make_loader("s3-shards", settings, dataset=source.name, parallel_shards=0)
    with pytest.raises(WorkbenchError, match="shuffle_buffer"):
        make_loader("s3-objects", settings, dataset=source.name, shuffle_buffer=10)


def test_never_ingested_dataset_says_so(settings, bucket):
    for name, what in (("s3-shards", "no shard index"), ("s3-objects", "no manifest")):
        with pytest.raises(WorkbenchError, match=what):
            _epoch(settings, name, "never-ingested", bucket=bucket)


# ------------------------------------------------------------------------------------- s3-shards


@pytest.fixture(scope="module")
def small_shards(settings, client, bucket):
    """30 samples in 3 shards, in a prefix of its own: the tests below damage it."""
    source = SyntheticSource(30, mean_kb=10, name=f"s3l-small-{uuid.uuid4().hex[:6]}")
    backend = _ingested(settings, client, bucket, "s3-shards", source, maxcount=10)
    yield source, backend
    _drop(backend, client)


def test_more_readers_than_shards_warns_and_does_not_hang(settings, small_shards):
    source, _ = small_shards
    with pytest.warns(RuntimeWarning, match="gets no shard"):
        items = _epoch(settings, "s3-shards", source.name, shard_id=3, num_shards=4)
    assert items == []
    assert len(_epoch(settings, "s3-shards", source.name, shard_id=0, num_shards=4)) == 10


def test_blob_labels_wanted_but_absent_name_the_sample(settings, small_shards):
    source, _ = small_shards
    with pytest.raises(WorkbenchError, match=r"sample [0-9a-f-]{36} .* no label entry"):
        _epoch(settings, "s3-shards", source.name, label_type="blob")
    items = _epoch(settings, "s3-shards", source.name, label_type="none")
    assert len(items) == 30 and all(i.label is None for i in items)


def test_truncated_or_corrupt_shard_names_the_shard(settings, client, small_shards):
    source, backend = small_shards
    key = f"{backend.prefix}/train/shard-000001.tar"
    original = client.get_object(Bucket=backend.bucket, Key=key)["Body"].read()
    try:
        client.put_object(Bucket=backend.bucket, Key=key, Body=original[: len(original) // 2])
        with pytest.raises(WorkbenchError, match=r"shard .*shard-000001\.tar.*truncated"):
            _epoch(settings, "s3-shards", source.name, shuffle=False)
        damaged = bytearray(original)
        damaged[100:200] = b"\xff" * 100  # the first member header: mode, ids, size, mtime, checksum
        client.put_object(Bucket=backend.bucket, Key=key, Body=bytes(damaged))
        with pytest.raises(WorkbenchError, match=r"shard .*shard-000001\.tar"):
            _epoch(settings, "s3-shards", source.name, shuffle=False)
    finally:
        client.put_object(Bucket=backend.bucket, Key=key, Body=original)
    assert len(_epoch(settings, "s3-shards", source.name)) == 30


def _preproc():
    from torchvision import transforms

    return transforms.Compose([transforms.Resize(40), transforms.CenterCrop(32), transforms.ToTensor()])


def _identity(x):
    return x


def test_remote_dataset_pipeline_with_a_client_and_dataloader_workers(settings, shards, source):
    access, secret = settings.s3_credentials()
    client = make_client(settings.s3_endpoint(), access, secret)
    dataset = (RemoteDataset(client, shards.bucket, shards.prefix)
               .decode("pil")
               .to_tuple("jpg;png", "cls")
               .map_tuple(_preproc(), _identity)
               .batched(16))
    labels: Counter = Counter()
    batches = 0
    for images, batch_labels in DataLoader(dataset, num_workers=2, batch_size=None,
                                           multiprocessing_context=worker_context(settings, 2)):
        assert images.shape[1:] == (3, 32, 32) and images.dtype == torch.float32
        assert len(images) == len(batch_labels) <= 16
        labels.update(int(x) for x in batch_labels)
        batches += 1
    assert labels == Counter(s.label for s in source)
    assert batches >= N // 16


def test_remote_dataset_labels_match_ids(settings, shards, expected):
    base = RemoteDataset(settings, shards.bucket, shards.prefix, shuffle_buffer=50, seed=1)
    dataset = base.decode("pil").to_tuple("jpg;png", "cls", "uid").map_tuple(_preproc(), None, None).batched(16)
    assert base.stages == [] and len(dataset.stages) == 4  # each call returns a new dataset
    seen = Counter()
    for images, labels, ids in DataLoader(dataset, num_workers=2, batch_size=None,
                                          multiprocessing_context=worker_context(settings, 2)):
        assert len(images) == len(labels) == len(ids)
        for label, key in zip(labels, ids, strict=True):
            assert int(label) == expected[key][1]
            seen[key] += 1
    assert seen == Counter(set(expected))
    raw = next(iter(RemoteDataset(settings, shards.bucket, shards.prefix).to_tuple("jpg", "cls", "uid")))
    assert raw[0] == expected[raw[2]][0] and int(raw[1]) == expected[raw[2]][1]


# ------------------------------------------------------------------------------------ s3-objects


def test_missing_object_and_missing_bucket_name_them(settings, client, bucket, objects, source, tmp_path):
    with pytest.raises(WorkbenchError, match=r"bucket 'wbt-missing-[0-9a-f]+' does not exist"):
        _epoch(settings, "s3-objects", source.name, bucket=f"wbt-missing-{uuid.uuid4().hex[:8]}")
    # A manifest naming an object that is gone.
    prefix = f"gone-{uuid.uuid4().hex[:6]}"
    client.put_object(Bucket=bucket, Key=f"{prefix}/train/manifest.txt", Body=b"class_000/nothing.jpg 0\n")
    try:
        with pytest.raises(WorkbenchError, match=r"class_000/nothing\.jpg.*missing"):
            _epoch(settings, "s3-objects", "whatever", bucket=bucket, prefix=prefix)
    finally:
        _delete_prefix(client, bucket, prefix + "/")


def test_latency_hiding_with_concurrency(settings, objects, source, expected):
    def timed(name: str, **config) -> float:
        start = time.perf_counter()
        items = _epoch(settings, name, source.name, via_proxy=True, **config)
        elapsed = time.perf_counter() - start
        _check_items(items, expected)
        return elapsed

    with Toxiproxy(settings).network("s3", rtt_ms=20):
        naive = timed("s3-naive")
        parallel = timed("s3-objects", concurrency=32)
    assert naive > N * 0.020  # one round trip per sample at least
    assert parallel < 0.5 * naive, (parallel, naive)


# ----------------------------------------------------------------------------- OSS-style datasets


def _object_key(objects, sample) -> str:
    return f"{objects.prefix}/train/{sample.name}"


def _check_oss_items(items, objects, source, labels: bool) -> None:
    by_key = {_object_key(objects, s): s for s in source}
    assert Counter(i.key for i in items) == Counter(list(by_key))
    for item in items:
        sample = by_key[item.key]
        assert item.size == len(sample.data)
        assert item.label == (sample.label if labels else None)
        assert item.id == str(sample.id)


class _Read:
    """(key, bytes, label) of an item: picklable transform for DataLoader workers."""

    def __call__(self, item):
        with item:
            return item.key, item.read(), item.label


@pytest.mark.parametrize("cls", [ObjectMapDataset, ObjectIterableDataset])
def test_from_prefix(settings, objects, source, cls):
    uri = f"s3://{objects.bucket}/{objects.prefix}/train/"
    ds = cls.from_prefix(uri, settings, key_filter=lambda k: k.endswith(".jpg"), prefetch_concurrency=8)
    assert len(ds) == N
    triples = list(ds) if cls is ObjectIterableDataset else [ds[i] for i in range(len(ds))]
    _check_oss_items(triples, objects, source, labels=False)
    by_key = {_object_key(objects, s): s.data for s in source}
    for item in triples:
        with item:
            assert item.read() == by_key[item.key]
        assert item.closed


@pytest.mark.parametrize("cls", [ObjectMapDataset, ObjectIterableDataset])
def test_from_objects_keeps_order(settings, objects, source, cls):
    samples = list(source)[:50]
    uris = [f"s3://{objects.bucket}/{_object_key(objects, s)}" for s in samples]
    ds = cls.from_objects(uris, settings, transform=_Read())
    got = list(ds)
    assert [k for k, _, _ in got] == [_object_key(objects, s) for s in samples]
    assert [d for _, d, _ in got] == [s.data for s in samples]


@pytest.mark.parametrize("where", ["local", "s3"])
def test_from_manifest_file(settings, objects, source, where):
    base = f"s3://{objects.bucket}/{objects.prefix}/train/"
    manifest = (objects.local_manifest("train") if where == "local"
                else f"s3://{objects.bucket}/{objects.prefix}/train/manifest.txt")
    for cls in (ObjectMapDataset, ObjectIterableDataset):
        ds = cls.from_manifest_file(manifest, default_manifest_parser, base, settings, prefetch_concurrency=16)
        items = list(ds)
        _check_oss_items(items, objects, source, labels=True)
        by_key = {_object_key(objects, s): s.data for s in source}
        assert all(item.read() == by_key[item.key] for item in items)


def test_map_dataset_item_context_and_batched_getitems(settings, objects, source):
    base = f"s3://{objects.bucket}/{objects.prefix}/train/"
    ds = ObjectMapDataset.from_manifest_file(objects.local_manifest("train"), None, base, settings)
    with ds[0] as item:
        first_key, first = item.key, item.read(10)
        assert len(first) == 10 and item.read() and item.size > 10
    assert item.closed
    with pytest.raises(ValueError):
        item.read()
    batch = ds.__getitems__([5, 0, 7, 5])
    assert [b.key for b in batch] == [ds.refs[i].key for i in (5, 0, 7, 5)]
    assert batch[1].key == first_key and batch[1].read(10) == first
    assert ds[-1].key == ds.refs[-1].key
    with pytest.raises(IndexError):
        ds[len(ds)]


def test_map_dataset_with_a_shuffling_dataloader(settings, objects, source):
    base = f"s3://{objects.bucket}/{objects.prefix}/train/"
    ds = ObjectMapDataset.from_manifest_file(f"{base}manifest.txt", None, base, settings, transform=_Read())
    loader = DataLoader(ds, batch_size=16, shuffle=True, num_workers=2, collate_fn=list,
                        multiprocessing_context=worker_context(settings, 2))
    by_key = {_object_key(objects, s): s for s in source}
    seen = Counter()
    order = []
    for batch in loader:
        assert len(batch) <= 16
        for key, data, label in batch:
            assert data == by_key[key].data and label == by_key[key].label
            seen[key] += 1
            order.append(key)
    assert seen == Counter(list(by_key))
    assert order != sorted(order) and order != [r.key for r in ds.refs]


def test_iterable_dataset_splits_across_dataloader_workers(settings, objects, source):
    base = f"s3://{objects.bucket}/{objects.prefix}/train/"
    ds = ObjectIterableDataset.from_manifest_file(f"{base}manifest.txt", None, base, settings, transform=_Read(),
                                                  shuffle=True, seed=5)
    seen = Counter()
    for batch in DataLoader(ds, batch_size=10, num_workers=3, collate_fn=list,
                            multiprocessing_context=worker_context(settings, 3)):
        seen.update(key for key, _, _ in batch)
    assert seen == Counter(_object_key(objects, s) for s in source)


def test_listing_happens_once_in_the_constructor(settings, objects, monkeypatch):
    uri = f"s3://{objects.bucket}/{objects.prefix}/train/"
    ds = ObjectIterableDataset.from_prefix(uri, settings, key_filter=lambda k: k.endswith(".jpg"))
    import pickle

    clone = pickle.loads(pickle.dumps(ds))  # what a spawned DataLoader worker receives
    assert clone.refs == ds.refs

    def no_listing(*args, **kwargs):
        raise AssertionError("listed again")

    import botocore.client

    monkeypatch.setattr(botocore.client.BaseClient, "get_paginator", no_listing)
    assert len(list(clone)) == N


def test_malformed_manifest_line_names_file_and_line(settings, objects, tmp_path):
    manifest = tmp_path / "bad-manifest.txt"
    manifest.write_text("class_000/a.jpg 1\n\nclass_000/b.jpg 2 extra\n")
    base = f"s3://{objects.bucket}/{objects.prefix}/train/"
    with pytest.raises(WorkbenchError, match=r"bad-manifest\.txt line 3"):
        ObjectMapDataset.from_manifest_file(manifest, default_manifest_parser, base, settings)
    with pytest.raises(WorkbenchError, match="does not exist"):
        ObjectMapDataset.from_manifest_file(tmp_path / "nope.txt", None, base, settings)
    with pytest.raises(WorkbenchError, match=r"manifest s3://.*does not exist"):
        ObjectMapDataset.from_manifest_file(f"{base}nope.txt", None, base, settings)


def test_dataset_errors_name_the_object_or_bucket(settings, objects):
    missing = f"s3://{objects.bucket}/{objects.prefix}/train/class_000/not-there.jpg"
    ds = ObjectMapDataset.from_objects([missing], settings)
    with pytest.raises(WorkbenchError, match=r"class_000/not-there\.jpg does not exist"):
        ds[0]
    with pytest.raises(WorkbenchError, match=r"class_000/not-there\.jpg does not exist"):
        list(ObjectIterableDataset.from_objects([missing], settings))
    gone = f"wbt-missing-{uuid.uuid4().hex[:8]}"
    with pytest.raises(WorkbenchError, match=f"bucket '{gone}' does not exist"):
        ObjectMapDataset.from_prefix(f"s3://{gone}/x/", settings)
    with pytest.raises(WorkbenchError, match=f"bucket '{gone}' does not exist"):
        ObjectMapDataset.from_objects([f"s3://{gone}/x.jpg"], settings)[0]
    with pytest.raises(WorkbenchError, match="not an s3:// URI"):
        ObjectMapDataset.from_objects(["http://x/y"], settings)


# ------------------------------------------------------------------------------------ checkpoints


def _state_dict(mb: float) -> dict:
    generator = torch.Generator().manual_seed(0)
    return {"big": torch.randn(int(mb * 2**20 / 4), generator=generator),
            "layer.weight": torch.randn(64, 32, generator=generator), "step": torch.tensor(7)}


def test_checkpoint_round_trip_multipart(settings, client, bucket):
    state = _state_dict(30)
    checkpoint = S3Checkpoint(settings, part_size=8 * 2**20, upload_concurrency=4, prefetch_concurrency=4)
    uri = f"s3://{bucket}/ckpt/{uuid.uuid4().hex[:6]}/epoch-1.pt"
    with checkpoint.writer(uri) as writer:
        torch.save(state, writer)
    key = uri.split("/", 3)[3]
    head = client.head_object(Bucket=bucket, Key=key)
    assert head["ContentLength"] > 30 * 2**20
    assert head["ETag"].strip('"').endswith("-4")  # a multipart object of 4 parts
    with checkpoint.reader(uri) as reader:
        loaded = torch.load(reader)
    assert loaded.keys() == state.keys()
    assert all(torch.equal(loaded[k], state[k]) for k in state)
    with checkpoint.reader(uri) as reader:  # the reader is a seekable file
        buffer = io.BytesIO(client.get_object(Bucket=bucket, Key=key)["Body"].read())
        reader.seek(-100, io.SEEK_END)
        assert reader.read() == buffer.getvalue()[-100:]
        reader.seek(12345)
        assert reader.read(1000) == buffer.getvalue()[12345:13345]


def test_small_checkpoint_is_one_put(settings, bucket):
    state = {"w": torch.arange(10)}
    checkpoint = S3Checkpoint(settings)
    uri = f"s3://{bucket}/ckpt/small.pt"
    with checkpoint.writer(uri) as writer:
        torch.save(state, writer)
    with checkpoint.reader(uri) as reader:
        assert torch.equal(torch.load(reader)["w"], state["w"])


def test_aborted_checkpoint_leaves_nothing(settings, client, bucket):
    checkpoint = S3Checkpoint(settings, part_size=5 * 2**20, upload_concurrency=2)
    key = f"ckpt/{uuid.uuid4().hex[:6]}/aborted.pt"
    with pytest.raises(RuntimeError, match="training crashed"), checkpoint.writer(f"s3://{bucket}/{key}") as writer:
        torch.save(_state_dict(20), writer)  # several parts are already uploaded
        raise RuntimeError("training crashed")
    assert "Contents" not in client.list_objects_v2(Bucket=bucket, Prefix=key)
    uploads = client.list_multipart_uploads(Bucket=bucket, Prefix=key).get("Uploads", [])
    assert uploads == []
    with pytest.raises(WorkbenchError, match="does not exist"):
        checkpoint.reader(f"s3://{bucket}/{key}")
