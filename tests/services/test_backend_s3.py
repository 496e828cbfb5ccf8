"""s3-objects and s3-shards against the real MinIO of the stack: round trips, resume, corruption, readers.

Every test works in a bucket of its own module (deleted at the end) or in a unique prefix it removes.
"""

from __future__ import annotations

import io
import tarfile
import uuid

import pytest
from backend_checks import DiesAfter as Interrupted
from pydantic import SecretStr

from workbench.backends.base import storage_name
from workbench.backends.registry import make_backend
from workbench.backends.s3_objects import S3ObjectsBackend
from workbench.backends.s3_shards import S3ShardsBackend
from workbench.data import Sample, SyntheticSource, read_index
from workbench.errors import WorkbenchError
from workbench.ingest import IngestSummary, ingest, verify
from workbench.storage import s3_client

pytestmark = pytest.mark.services


def _delete_prefix(client, bucket: str, prefix: str = "") -> None:
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if keys:
            client.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})


def _keys(client, bucket: str, prefix: str) -> dict[str, dict]:
    return {o["Key"]: o for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
            for o in page.get("Contents", [])}


@pytest.fixture(scope="module")
def client(settings):
    return s3_client(settings)


@pytest.fixture(scope="module")
def bucket(settings, client):
    name = f"wbt-{uuid.uuid4().hex[:12]}"
    yield name
    try:
        _delete_prefix(client, name)
        client.delete_bucket(Bucket=name)
    except client.exceptions.NoSuchBucket:
        pass


def _by_id(source) -> dict[uuid.UUID, Sample]:
    return {s.id: s for s in source}


def _check_scan(backend, source) -> None:
    expected = _by_id(source)
    stored = list(backend.scan())
    assert len(stored) == len(expected)
    for s in stored:
        original = expected[s.id]
        assert (s.data, s.label, s.split) == (original.data, original.label, original.split)


# ---------------------------------------------------------------------------------------- s3-objects


@pytest.fixture(scope="module")
def objects_ds(settings, bucket):
    """80 samples ingested once into s3-objects (read-only for the tests that use it)."""
    source = SyntheticSource(80, mean_kb=20, name=f"objs-{uuid.uuid4().hex[:6]}")
    backend = make_backend("s3-objects", settings, source.name, bucket=bucket, workers=4)
    summary = ingest(source, backend, progress=False)
    assert summary.samples == 80 and summary.bytes == sum(len(s.data) for s in source)
    return source, backend


def test_objects_round_trip_byte_for_byte(objects_ds):
    source, backend = objects_ds
    report = verify(source, backend)
    assert report.ok, report
    assert report.found == 80
    _check_scan(backend, source)


def test_objects_layout_metadata_and_manifest(objects_ds, client, settings):
    source, backend = objects_ds
    prefix = backend.prefix
    assert prefix == storage_name(source.name)
    keys = _keys(client, backend.bucket, prefix + "/")
    samples = list(source)
    for s in samples:
        key = f"{prefix}/train/{s.name}"  # <prefix>/<split>/<class>/<basename>
        assert key in keys and keys[key]["Size"] == len(s.data)
    head = client.head_object(Bucket=backend.bucket, Key=f"{prefix}/train/{samples[0].name}")
    assert head["Metadata"] == {"id": str(samples[0].id), "label": str(samples[0].label),
                                "checksum": samples[0].checksum}
    expected = sorted(f"{s.name} {s.label}" for s in samples)
    remote = client.get_object(Bucket=backend.bucket, Key=f"{prefix}/train/manifest.txt")["Body"].read().decode()
    assert remote.splitlines() == expected  # "key label", keys relative to <prefix>/<split>/, sorted
    local = settings.state_dir / "manifests" / "s3-objects" / backend.bucket / prefix / "train" / "manifest.txt"
    assert local.read_text() == remote
    assert backend.manifest("train") == [tuple(line.split(" ")) for line in expected]
    # Each manifest key names an object: what an osstorchconnector from_manifest_file reader needs.
    assert all(f"{prefix}/train/{line.split(' ')[0]}" in keys for line in expected)
    assert not list(local.parent.glob(".*tmp"))


def _reingest(dataset, client) -> tuple[IngestSummary, dict[str, dict], dict[str, dict]]:
    """Ingest the dataset's source into its backend again: the summary and the dataset's objects before and after."""
    source, backend = dataset
    before = _keys(client, backend.bucket, backend.prefix + "/")
    summary = ingest(source, backend, progress=False)
    return summary, before, _keys(client, backend.bucket, backend.prefix + "/")


def test_objects_reingest_writes_nothing(objects_ds, client):
    summary, before, after = _reingest(objects_ds, client)
    assert (summary.samples, summary.already_stored) == (0, 80)
    assert {k: v["ETag"] for k, v in after.items()} == {k: v["ETag"] for k, v in before.items()}
    assert {k: v["LastModified"] for k, v in after.items()} == {k: v["LastModified"] for k, v in before.items()}


def test_objects_resume_after_interrupted_ingest(settings, bucket, client):
    source = SyntheticSource(60, mean_kb=20, name=f"resume-{uuid.uuid4().hex[:6]}")
    backend = make_backend("s3-objects", settings, source.name, bucket=bucket, workers=3)
    with pytest.raises(RuntimeError, match="source died"):
        ingest(Interrupted(source, 25), backend, progress=False)
    samples = list(source)
    # Everything submitted before the failure finished and was journaled; nothing else counts.
    assert backend.stored_ids() == {s.id for s in samples[:25]}
    summary = ingest(source, backend, progress=False)
    assert (summary.samples, summary.already_stored) == (35, 25)
    report = verify(source, backend)
    assert report.ok and report.found == 60, report
    data_keys = [k for k in _keys(client, bucket, backend.prefix + "/train/") if not k.endswith("manifest.txt")]
    assert len(data_keys) == 60
    manifest = client.get_object(Bucket=bucket, Key=f"{backend.prefix}/train/manifest.txt")["Body"].read()
    assert len(manifest.decode().splitlines()) == 60
    journal = _keys(client, bucket, backend.prefix + "/_journal/")
    assert len(journal) == 1  # compacted


def test_objects_verify_catches_changed_and_deleted(settings, bucket, client):
    source = SyntheticSource(40, mean_kb=20, name=f"corrupt-{uuid.uuid4().hex[:6]}")
    backend = make_backend("s3-objects", settings, source.name, bucket=bucket)
    ingest(source, backend, progress=False)
    samples = list(source)
    changed, deleted = samples[3], samples[7]
    key = f"{backend.prefix}/train/{changed.name}"
    head = client.head_object(Bucket=bucket, Key=key)
    data = bytearray(changed.data)
    data[len(data) // 2] ^= 0x01
    client.put_object(Bucket=bucket, Key=key, Body=bytes(data), Metadata=head["Metadata"])
    client.delete_object(Bucket=bucket, Key=f"{backend.prefix}/train/{deleted.name}")

    report = verify(source, backend)
    assert report.mismatched == [changed.name]
    assert report.missing == [deleted.name]
    assert not report.ok
    # The deleted sample is no longer stored, so re-ingest puts it back (the changed one stays changed).
    assert deleted.id not in backend.stored_ids()
    assert ingest(source, backend, progress=False).samples == 1
    report = verify(source, backend)
    assert report.missing == [] and report.mismatched == [changed.name]


def test_objects_blob_labels_as_sidecars(settings, bucket, client):
    source = SyntheticSource(40, mean_kb=20, kind="segmentation", name=f"seg-{uuid.uuid4().hex[:6]}")
    backend = make_backend("s3-objects", settings, source.name, bucket=bucket, label_type="blob")
    ingest(source, backend, progress=False)
    assert verify(source, backend).ok
    _check_scan(backend, source)
    s = next(iter(source))
    sidecar = client.get_object(Bucket=bucket, Key=f"{backend.prefix}/train/{s.name}.label")["Body"].read()
    assert sidecar == s.label
    manifest = dict(backend.manifest("train"))
    assert manifest[s.name] == f"{s.name}.label" and len(manifest) == 40


def test_objects_default_bucket_and_prefix(settings, client, unique):
    backend = make_backend("s3-objects", settings, unique)
    assert (backend.bucket, backend.prefix) == (settings.s3_bucket, storage_name(unique))
    described = backend.describe()
    assert (described["bucket"], described["prefix"]) == (settings.s3_bucket, storage_name(unique))
    source = SyntheticSource(40, mean_kb=20, name=unique)
    try:
        ingest(source, backend, progress=False)
        assert verify(source, backend).ok
        assert len(_keys(client, settings.s3_bucket, f"{backend.prefix}/train/")) == 41  # + manifest
        backend.drop()
        assert _keys(client, settings.s3_bucket, backend.prefix + "/") == {}
    finally:
        _delete_prefix(client, settings.s3_bucket, backend.prefix + "/")


def test_both_layouts_share_a_prefix_and_drop_only_their_own(settings, bucket, client):
    source = SyntheticSource(40, mean_kb=20, name=f"both-{uuid.uuid4().hex[:6]}")
    objects = make_backend("s3-objects", settings, source.name, bucket=bucket)
    shards = make_backend("s3-shards", settings, source.name, bucket=bucket, maxcount=15)
    assert objects.prefix == shards.prefix  # both default to the dataset's storage name
    ingest(source, objects, progress=False)
    ingest(source, shards, progress=False)
    assert verify(source, objects).ok and verify(source, shards).ok
    assert objects.stored_ids() == shards.stored_ids() == {s.id for s in source}
    local = settings.state_dir / "manifests" / "s3-objects" / bucket / objects.prefix
    assert local.is_dir()

    shards.drop()
    assert verify(source, objects).ok
    assert verify(source, shards).found == 0 and shards.stored_ids() == set()
    objects.drop()
    assert _keys(client, bucket, objects.prefix + "/") == {}
    assert not local.exists()
    objects.drop()  # idempotent
    shards.drop()
    make_backend("s3-shards", settings, "x", bucket=f"wbt-missing-{uuid.uuid4().hex[:8]}").drop()


# ----------------------------------------------------------------------------------------- s3-shards


@pytest.fixture(scope="module")
def shards_ds(settings, bucket):
    """120 samples in shards of at most 25 (5 shards), ingested once."""
    source = SyntheticSource(120, mean_kb=20, name=f"shards-{uuid.uuid4().hex[:6]}")
    backend = make_backend("s3-shards", settings, source.name, bucket=bucket, maxcount=25, workers=3)
    summary = ingest(source, backend, progress=False)
    assert summary.samples == 120 and summary.bytes == sum(len(s.data) for s in source)
    return source, backend


def test_shards_round_trip_and_index(shards_ds, client):
    source, backend = shards_ds
    report = verify(source, backend)
    assert report.ok and report.found == 120, report
    _check_scan(backend, source)
    keys = _keys(client, backend.bucket, backend.prefix + "/train/")
    raw = client.get_object(Bucket=backend.bucket, Key=f"{backend.prefix}/train/index.json")["Body"].read()
    index = read_index(raw)
    assert [i.name for i in index] == [f"shard-{n:06d}.tar" for n in range(5)]
    assert [i.samples for i in index] == [25, 25, 25, 25, 20]  # maxcount respected
    for info in index:
        assert keys[f"{backend.prefix}/train/{info.name}"]["Size"] == info.bytes
        assert f"{backend.prefix}/train/ids/{info.name.removesuffix('.tar')}.json" in keys


def test_shards_reingest_writes_nothing(shards_ds, client):
    summary, before, after = _reingest(shards_ds, client)
    assert (summary.samples, summary.already_stored) == (0, 120)
    assert {k: (v["ETag"], v["LastModified"]) for k, v in after.items()} == {
        k: (v["ETag"], v["LastModified"]) for k, v in before.items()}


def test_shards_maxsize_respected(settings, bucket, client):
    source = SyntheticSource(60, mean_kb=20, name=f"maxsize-{uuid.uuid4().hex[:6]}")
    maxsize = 100_000
    backend = make_backend("s3-shards", settings, source.name, bucket=bucket, maxsize=maxsize)
    ingest(source, backend, progress=False)
    assert verify(source, backend).ok
    index = backend.shards.index("train")
    assert len(index) > 5 and sum(i.samples for i in index) == 60
    sizes = {k: o["Size"] for k, o in _keys(client, bucket, f"{backend.prefix}/train/shard-").items()}
    assert len(sizes) == len(index)
    biggest_sample = max(len(s.data) for s in source)
    for info in index:
        # Only a shard holding a single sample may exceed maxsize (a sample too big for any shard).
        size = sizes[f"{backend.prefix}/train/{info.name}"]
        assert size <= maxsize or (info.samples == 1 and biggest_sample > maxsize / 2)


def test_shards_resume_never_overwrites(settings, bucket, client):
    source = SyntheticSource(100, mean_kb=20, name=f"sresume-{uuid.uuid4().hex[:6]}")
    backend = make_backend("s3-shards", settings, source.name, bucket=bucket, maxcount=10, workers=2)
    samples = list(source)
    with pytest.raises(RuntimeError, match="source died"):
        ingest(Interrupted(source, 45), backend, progress=False)
    # Shards 0-3 were complete; the 5th was still being packed when the source died.
    assert backend.stored_ids() == {s.id for s in samples[:40]}
    assert [i.name for i in backend.shards.index("train")] == [f"shard-{n:06d}.tar" for n in range(4)]
    # A writer killed between a shard and its record leaves an orphan tar: it must not be overwritten.
    orphan = f"{backend.prefix}/train/shard-000006.tar"
    client.put_object(Bucket=bucket, Key=orphan, Body=b"orphan")
    before = _keys(client, bucket, f"{backend.prefix}/train/shard-")

    summary = ingest(source, backend, progress=False)
    assert (summary.samples, summary.already_stored) == (60, 40)
    after = _keys(client, bucket, f"{backend.prefix}/train/shard-")
    for key, obj in before.items():
        assert after[key]["ETag"] == obj["ETag"], f"{key} was overwritten"
    index = backend.shards.index("train")
    assert [i.name for i in index] == [f"shard-{n:06d}.tar" for n in (0, 1, 2, 3, *range(7, 13))]
    assert sum(i.samples for i in index) == 100
    report = verify(source, backend)
    assert report.ok and report.found == 100, report  # no duplicates, nothing missing


def _flip_image_byte(shard: bytes) -> tuple[bytes, str]:
    """The shard with one byte changed in the middle of its first image; returns the sample key too."""
    with tarfile.open(fileobj=io.BytesIO(shard)) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith(".jpg"))
    data = bytearray(shard)
    data[member.offset_data + member.size // 2] ^= 0x01
    return bytes(data), member.name.split(".")[0]


def test_shards_verify_catches_changed_and_deleted(settings, bucket, client):
    source = SyntheticSource(40, mean_kb=20, name=f"scorrupt-{uuid.uuid4().hex[:6]}")
    backend = make_backend("s3-shards", settings, source.name, bucket=bucket, maxcount=10)
    ingest(source, backend, progress=False)
    names = {s.id.hex: s.name for s in source}
    key1 = f"{backend.prefix}/train/shard-000001.tar"
    changed, key = _flip_image_byte(client.get_object(Bucket=bucket, Key=key1)["Body"].read())
    client.put_object(Bucket=bucket, Key=key1, Body=changed)
    client.delete_object(Bucket=bucket, Key=f"{backend.prefix}/train/shard-000002.tar")
    ordered = [s.name for s in source]

    report = verify(source, backend)
    assert report.mismatched == [names[key]]
    assert sorted(report.missing) == sorted(ordered[20:30])
    # Re-ingest re-writes the lost shard's samples into a new shard and drops the lost one from the index.
    assert ingest(source, backend, progress=False).samples == 10
    assert [i.name for i in backend.shards.index("train")] == [f"shard-{n:06d}.tar" for n in (0, 1, 3, 4)]
    report = verify(source, backend)
    assert report.missing == [] and report.mismatched == [names[key]]


def test_shards_big_shards_use_multipart(settings, bucket, client):
    source = SyntheticSource(30, mean_kb=400, name=f"big-{uuid.uuid4().hex[:6]}")
    backend = make_backend("s3-shards", settings, source.name, bucket=bucket, maxsize=1e9)
    ingest(source, backend, progress=False)
    [info] = backend.shards.index("train")
    assert info.bytes > 8 * 2**20
    head = client.head_object(Bucket=bucket, Key=f"{backend.prefix}/train/{info.name}")
    assert "-" in head["ETag"]  # a multipart upload's ETag is "<md5 of md5s>-<parts>"
    assert verify(source, backend).ok


def test_shards_readable_by_webdataset_over_http(shards_ds):
    wds = pytest.importorskip("webdataset")
    source, backend = shards_ds
    urls = backend.shard_urls("train")
    assert len(urls) == 5 and all(u.startswith("http://") for u in urls)
    expected = {s.id.hex: s for s in source}
    seen = 0
    for sample in wds.WebDataset(urls, shardshuffle=False, empty_check=False):
        original = expected[sample["__key__"]]
        assert sample["jpg"] == original.data
        assert int(sample["cls"]) == original.label
        assert sample["uid"].decode() == str(original.id)
        seen += 1
    assert seen == 120


def test_shards_readable_by_dali(shards_ds, tmp_path):
    pytest.importorskip("nvidia.dali", reason="DALI is the optional 'dali' extra")
    import numpy as np
    import wds2idx  # ships with the DALI wheel (the wds2idx tool)
    from nvidia.dali import fn, pipeline_def

    source, backend = shards_ds
    paths, indexes = [], []
    for split, info in backend.shards.shard_keys():
        path = tmp_path / info.name
        path.write_bytes(backend.store.get(f"{split}/{info.name}")[0])
        creator = wds2idx.IndexCreator(str(path), str(path.with_suffix(".idx")), verbose=False)
        creator.create_index()
        creator.close()
        paths.append(str(path))
        indexes.append(str(path.with_suffix(".idx")))

    batch = 16

    @pipeline_def(batch_size=batch, num_threads=1, device_id=None)
    def pipe():
        jpg, cls, ids = fn.readers.webdataset(paths=paths, index_paths=indexes, ext=["jpg", "cls", "uid"],
                                              missing_component_behavior="error", name="reader")
        return jpg, cls, ids, fn.decoders.image(jpg, device="cpu")

    p = pipe()
    p.build()
    assert p.reader_meta("reader")["epoch_size"] == 120
    expected = {s.id: s for s in source}
    got = []
    for _ in range(-(-120 // batch)):
        jpgs, clss, ids, images = p.run()
        for i in range(len(jpgs)):
            got.append((bytes(np.array(ids.at(i))), bytes(np.array(jpgs.at(i))), bytes(np.array(clss.at(i))),
                        np.array(images.at(i)).shape))
    got = got[:120]  # the last batch wraps around into the next epoch
    assert len({g[0] for g in got}) == 120
    for raw_id, data, cls, shape in got:
        original = expected[uuid.UUID(raw_id.decode())]
        assert data == original.data  # raw bytes, before decoding
        assert int(cls) == original.label
        assert shape == (original.height, original.width, 3)


# ------------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize("name", ["s3-objects", "s3-shards"])
def test_missing_bucket_without_create(settings, client, name):
    missing = f"wbt-missing-{uuid.uuid4().hex[:8]}"
    backend = make_backend(name, settings, "x", bucket=missing, create_bucket=False)
    with pytest.raises(WorkbenchError, match=f"bucket '{missing}' does not exist"):
        ingest(SyntheticSource(40, mean_kb=20), backend, progress=False)
    assert missing not in [b["Name"] for b in client.list_buckets()["Buckets"]]
    with pytest.raises(WorkbenchError, match=missing):
        backend.stored_ids()


@pytest.mark.parametrize("cls", [S3ObjectsBackend, S3ShardsBackend])
@pytest.mark.parametrize("wrong", ["secret", "access"])
def test_wrong_credentials(settings, bucket, cls, wrong):
    update = {"s3_secret_key": SecretStr("not-the-secret-" + uuid.uuid4().hex)} if wrong == "secret" else {
        "s3_access_key": SecretStr("nobody-" + uuid.uuid4().hex[:6])}
    bad = settings.model_copy(update=update)
    backend = cls(bad, "x", cls.Options(bucket=bucket))
    with pytest.raises(WorkbenchError) as info:
        ingest(SyntheticSource(40, mean_kb=20), backend, progress=False)
    message = str(info.value)
    assert "access denied" in message and "WORKBENCH_S3_ACCESS_KEY/WORKBENCH_S3_SECRET_KEY" in message
    assert "\n" not in message
    assert not any(secret in message for secret in bad.secrets() + settings.secrets())


def test_invalid_bucket_name_fails_before_io(settings):
    with pytest.raises(WorkbenchError, match="invalid S3 bucket name 'Bad_Bucket'"):
        make_backend("s3-objects", settings, "x", bucket="Bad_Bucket")


def test_unknown_option_is_rejected(settings):
    with pytest.raises(WorkbenchError, match="invalid s3-shards option 'shard_size'"):
        make_backend("s3-shards", settings, "x", shard_size=3)


def test_unreachable_endpoint_is_a_clear_error(settings):
    import socket

    with socket.socket() as sock:
        sock.bind((settings.host, 0))
        port = sock.getsockname()[1]  # nothing listens there once the socket is closed
    backend = make_backend("s3-shards", settings.model_copy(update={"s3_port": port}), "x")
    with pytest.raises(WorkbenchError, match=rf"cannot reach S3 at http://{settings.host}:{port}.*stack status"):
        ingest(SyntheticSource(40, mean_kb=20), backend, progress=False)
