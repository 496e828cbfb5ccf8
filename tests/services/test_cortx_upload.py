"""cortx_pytorch's upload_cv_dataset against the real MinIO: a map-style torch dataset in, RemoteDataset out."""

from __future__ import annotations

import io
import tarfile
import uuid

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import Dataset

from workbench.compat.cortx import RemoteDataset, make_client, upload_cv_dataset, upload_source
from workbench.data.shards import sample_key, sample_to_entries
from workbench.errors import WorkbenchError

pytestmark = [pytest.mark.services]


class Noise(Dataset):
    """(PIL image, int label): item i is the same image every time, and every item differs."""

    def __init__(self, n: int, side: int = 24) -> None:
        self.n, self.side = n, side

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        pixels = np.random.default_rng(i).integers(0, 256, (self.side, self.side, 3), dtype=np.uint8)
        return Image.fromarray(pixels), torch.tensor(i % 7)


@pytest.fixture(scope="module")
def client(stack):
    access, secret = stack.s3_credentials()
    return make_client(stack.s3_endpoint(), access, secret)


def _delete(client, bucket, prefix=""):
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if keys:
            client.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})


@pytest.fixture(scope="module")
def bucket(client):
    name = f"wbt-cortx-{uuid.uuid4().hex[:10]}"
    yield name  # upload_cv_dataset creates it
    _delete(client, name)
    client.delete_bucket(Bucket=name)


def _shards(client, bucket, folder):
    listed = client.list_objects_v2(Bucket=bucket, Prefix=f"{folder}/train/shard-")["Contents"]
    return {o["Key"].rsplit("/", 1)[1]: client.get_object(Bucket=bucket, Key=o["Key"])["Body"].read()
            for o in listed}


def test_upload_then_remote_dataset_reads_exact_samples(client, bucket):
    ds = Noise(100)
    summary = upload_cv_dataset(ds, client=client, bucket=bucket, base_folder="noise/png", maxsize=1e8, maxcount=16,
                                workers=2, image_format="png")
    assert (summary.samples, summary.skipped) == (100, 0)
    read = list(RemoteDataset(client, bucket, "noise/png").decode("rgb8").to_tuple("__key__", "png", "cls"))
    assert len(read) == 100 and len({key for key, _, _ in read}) == 100  # no duplicates
    by_key = {s.id.hex: i for i, s in enumerate(upload_source(ds, "noise/png", "png"))}
    for key, pixels, label in read:
        image, expected_label = ds[by_key[key]]
        assert np.array_equal(pixels, np.asarray(image)) and label == int(expected_label)
    assert len(_shards(client, bucket, "noise/png")) == 7  # ceil(100 / 16)


def test_shards_do_not_depend_on_workers_and_rerun_adds_nothing(client, bucket):
    ds = Noise(70)
    upload_cv_dataset(ds, client=client, bucket=bucket, base_folder="det/two", maxsize=30_000, maxcount=1000,
                      workers=1)
    one = _shards(client, bucket, "det/two")
    _delete(client, bucket, "det/two/")
    upload_cv_dataset(ds, client=client, bucket=bucket, base_folder="det/two", maxsize=30_000, maxcount=1000,
                      workers=2)
    two = _shards(client, bucket, "det/two")
    assert len(one) > 1 and one == two  # maxsize cuts several shards, byte for byte the same
    again = upload_cv_dataset(ds, client=client, bucket=bucket, base_folder="det/two", maxcount=1000, workers=2)
    assert (again.samples, again.skipped) == (0, 70) and _shards(client, bucket, "det/two") == two
    read = list(RemoteDataset(client, bucket, "det/two").to_tuple("__key__", "jpg", "cls"))
    expected = {s.id.hex: (s.data, s.label) for s in upload_source(ds, "det/two")}
    assert {key: (jpg, int(label)) for key, jpg, label in read} == expected and len(read) == 70


def test_bad_inputs_are_one_line(client, bucket):
    with pytest.raises(WorkbenchError, match="workers must be an integer >= 1"):
        upload_cv_dataset(Noise(2), client=client, bucket=bucket, base_folder="x", workers=0)
    with pytest.raises(WorkbenchError, match=r"dataset item 0: unsupported label .cat.: expected int, bytes or None"):
        upload_cv_dataset([(Image.new("RGB", (4, 4)), "cat")], client=client, bucket=bucket, base_folder="bad",
                          workers=2)
    with pytest.raises(WorkbenchError, match="map-style dataset"):
        upload_cv_dataset(iter([]), client=client, bucket=bucket, base_folder="x")


def test_tensor_array_and_pil_images_encode_alike():
    array = np.random.default_rng(0).integers(0, 256, (5, 6, 3), dtype=np.uint8)
    items = [(torch.from_numpy(array).permute(2, 0, 1), 1), (array, 1), (Image.fromarray(array), 1)]
    samples = list(upload_source(items, "kinds", "png"))
    assert samples[0].data == samples[1].data == samples[2].data
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(samples[0].data))), array)
    assert [s.id for s in samples] == [s.id for s in upload_source(items, "kinds", "png")]  # same ids every time
    assert samples[0].id != next(iter(upload_source(items, "other", "png"))).id
    with pytest.raises(WorkbenchError, match="image_format must be one of jpg, png"):
        upload_source(items, "kinds", "gif")


def _objects(client, bucket, folder) -> dict[str, bytes]:
    """Every object under `folder` (shards, their records, the index) by its key under the folder."""
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{folder}/")
    keys = [o["Key"] for page in pages for o in page.get("Contents", [])]
    return {k[len(folder) + 1:]: client.get_object(Bucket=bucket, Key=k)["Body"].read() for k in keys}


def test_any_workers_store_the_same_shards_with_every_sample_once(client, bucket):
    """`workers` only spreads the encoding: 1, 2 and 3 store byte-identical shards, records and index, whose
    members are every sample's entries once, in index order (the speed-up is `workbench bench ingest-cortx`)."""
    ds, folder = Noise(240, side=16), "same/any"  # 8 runs of 32 items for the workers to share
    stored = {}
    for workers in (1, 2, 3):
        summary = upload_cv_dataset(ds, client=client, bucket=bucket, base_folder=folder, maxcount=80, workers=workers)
        assert (summary.samples, summary.skipped) == (240, 0), workers
        stored[workers] = _objects(client, bucket, folder)
        _delete(client, bucket, f"{folder}/")
    for workers in (2, 3):
        one, other = stored[1], stored[workers]
        differ = sorted(k for k in one.keys() | other.keys() if one.get(k) != other.get(k))
        assert differ == [], f"workers={workers} stored other objects than workers=1 at {differ}"
    shards = sorted(k for k in stored[1] if k.startswith("train/shard-"))
    assert len(shards) == 3 and "train/index.json" in stored[1]  # 240 / maxcount 80
    members = []
    for key in shards:
        with tarfile.open(fileobj=io.BytesIO(stored[1][key])) as tar:
            members += [(m.name, tar.extractfile(m).read()) for m in tar.getmembers()]
    expected = [(f"{sample_key(s)}.{ext}", data) for s in upload_source(ds, folder)
                for ext, data in sample_to_entries(s).items()]
    assert members == expected
    assert len({sample_key(s) for s in upload_source(ds, folder)}) == 240
