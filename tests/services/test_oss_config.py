"""OSS connector options against the real MinIO: endpoint, cred_path (with an STS token) and config_path, each
honoured by the OSS-style datasets and the checkpoint reader/writer; the audit log is read after an epoch."""

from __future__ import annotations

import io
import json
import re
import threading
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
import torch
from torch.utils.data import DataLoader

from workbench.checkpoints.s3 import S3Checkpoint
from workbench.compat.oss_connector import ObjectIterableDataset, ObjectMapDataset, OssIterableDataset, OssMapDataset
from workbench.errors import WorkbenchError
from workbench.storage import s3_client

pytestmark = [pytest.mark.services,
              pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")]

N = 24


@pytest.fixture(scope="module")
def settings(stack):
    return stack


@pytest.fixture(scope="module")
def bucket(settings):
    client = s3_client(settings)
    name = f"wbt-oss-{uuid.uuid4().hex[:10]}"
    client.create_bucket(Bucket=name)
    objects = {f"data/obj-{i:03d}.bin": bytes([i]) * (100 + 37 * i) for i in range(N)}
    for key, body in objects.items():
        client.put_object(Bucket=name, Key=key, Body=body)
    yield name, objects
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=name):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if keys:
            client.delete_objects(Bucket=name, Delete={"Objects": keys, "Quiet": True})
    client.delete_bucket(Bucket=name)


@pytest.fixture(scope="module")
def sts_credentials(settings):
    """Temporary credentials from MinIO's STS (AssumeRole): key, secret, session token and expiration."""
    import boto3

    access, secret = settings.s3_credentials()
    sts = boto3.client("sts", endpoint_url=settings.s3_endpoint(), aws_access_key_id=access,
                       aws_secret_access_key=secret, region_name=settings.s3_region)
    return sts.assume_role(RoleArn="arn:minio:iam:::role/workbench", RoleSessionName="oss-test",
                           DurationSeconds=900)["Credentials"]


def _cred_file(path, access, secret, token=None, expiration=None):
    doc = {"AccessKeyId": access, "AccessKeySecret": secret}
    if token is not None:
        doc["SecurityToken"] = token
    if expiration is not None:
        doc["Expiration"] = expiration
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture
def cred_path(tmp_path, sts_credentials):
    c = sts_credentials
    return _cred_file(tmp_path / "credentials", c["AccessKeyId"], c["SecretAccessKey"], c["SessionToken"],
                      c["Expiration"].astimezone(UTC).isoformat())


def _config(tmp_path, **doc):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc))
    return path


class _Read:
    def __call__(self, item):
        with item:
            return item.key, item.read()


def _audit_lines(path):
    rows = [line.split("\t") for line in path.read_text().splitlines()]
    for row in rows:
        datetime.fromisoformat(row[0])  # a time stamp
    return rows


@pytest.mark.parametrize("cls", [ObjectMapDataset, ObjectIterableDataset])
def test_dataset_with_endpoint_credentials_and_config(settings, bucket, tmp_path, cred_path, sts_credentials, cls):
    name, objects = bucket
    audit, log_file = tmp_path / "audit" / "audit.log", tmp_path / "logs" / "connector.log"
    config = _config(tmp_path, logLevel=0, logPath=str(log_file), auditPath=str(audit),
                     datasetConfig={"prefetchConcurrency": 3, "prefetchWorker": 1})
    ds = cls.from_prefix(f"s3://{name}/data/", transform=_Read(), endpoint=settings.s3_endpoint(),
                         cred_path=cred_path, config_path=config)
    assert ds.prefetch_concurrency == 3  # prefetchWorker's effect: test_prefetch_workers_share_the_gets
    assert sts_credentials["SecretAccessKey"] not in repr(ds.access)
    loader = DataLoader(ds, batch_size=5, num_workers=2, collate_fn=lambda b: b,
                        shuffle=cls is ObjectMapDataset)
    got = dict(pair for batch in loader for pair in batch)
    assert got == objects
    rows = _audit_lines(audit)
    assert Counter(r[2] for r in rows) == Counter(f"{name}/{k}" for k in objects)  # each object once
    assert {(r[1], r[2], int(r[3])) for r in rows} == {("GET", f"{name}/{k}", len(v)) for k, v in objects.items()}
    assert len(rows) == N  # one line per GET, from both workers
    text = log_file.read_text()
    assert "DEBUG" in text and f"GET s3://{name}/data/obj-000.bin" in text
    assert sts_credentials["SecretAccessKey"] not in text + audit.read_text()


def test_explicit_prefetch_concurrency_beats_config_and_info_level_drops_debug(settings, bucket, tmp_path):
    name, objects = bucket
    log_file = tmp_path / "c.log"
    config = _config(tmp_path, logLevel=1, logPath=str(log_file), datasetConfig={"prefetchConcurrency": 3})
    uris = [f"s3://{name}/{k}" for k in sorted(objects)]
    ds = ObjectMapDataset.from_objects(uris, settings, _Read(), 5, config_path=config)
    assert ds.prefetch_concurrency == 5
    assert dict(ds.__getitems__(range(N))) == objects
    assert "GET s3://" not in log_file.read_text() and "ObjectMapDataset of 24 objects" in log_file.read_text()
    assert ObjectMapDataset.from_objects(uris, settings).prefetch_concurrency == 24


def test_manifest_from_s3_is_audited(settings, bucket, tmp_path, cred_path):
    name, objects = bucket
    s3_client(settings).put_object(Bucket=name, Key="manifest.txt", Body="\n".join(
        f"{k.removeprefix('data/')} 1" for k in sorted(objects)).encode())
    audit = tmp_path / "audit.log"
    ds = ObjectMapDataset.from_manifest_file(f"s3://{name}/manifest.txt", None, f"s3://{name}/data/",
                                             transform=_Read(), endpoint=settings.s3_endpoint(), cred_path=cred_path,
                                             config_path=_config(tmp_path, auditPath=str(audit)))
    assert dict(ds) == objects
    rows = _audit_lines(audit)
    assert rows[0][1:] == ["GET", f"{name}/manifest.txt", str(len(s3_client(settings).get_object(
        Bucket=name, Key="manifest.txt")["Body"].read()))]
    assert len(rows) == N + 1


def test_credential_file_is_what_signs(settings, bucket, tmp_path):
    name, _ = bucket
    access, _ = settings.s3_credentials()
    wrong = _cred_file(tmp_path / "wrong", access, "not-the-secret-xyz")
    with pytest.raises(WorkbenchError, match="access denied") as info:
        ObjectMapDataset.from_prefix(f"s3://{name}/data/", settings, cred_path=wrong)
    assert "not-the-secret-xyz" not in str(info.value)


def test_expired_credentials_name_file_and_expiry(settings, bucket, tmp_path):
    name, _ = bucket
    access, secret = settings.s3_credentials()
    when = (datetime.now(UTC) - timedelta(minutes=5)).replace(microsecond=0)
    old = _cred_file(tmp_path / "old", access, secret, "token", when.isoformat().replace("+00:00", "Z"))
    for make in (lambda: ObjectMapDataset.from_objects([f"s3://{name}/data/obj-000.bin"], settings, cred_path=old),
                 lambda: S3Checkpoint(settings, cred_path=old)):
        with pytest.raises(WorkbenchError, match=re.escape(f"{old} expired at {when.isoformat()}")) as info:
            make()
        assert secret not in str(info.value)


def test_endpoint_is_used(settings, bucket, tmp_path):
    name, objects = bucket
    ds = ObjectMapDataset.from_objects([f"s3://{name}/data/obj-001.bin"], settings,
                                       endpoint=settings.s3_endpoint(via_proxy=True))
    with ds[0] as item:  # toxiproxy's port, passing through to MinIO
        assert item.read() == objects["data/obj-001.bin"]
    dead = ObjectMapDataset.from_objects([f"s3://{name}/data/obj-001.bin"], settings, endpoint="http://127.0.0.1:9")
    with pytest.raises(WorkbenchError, match=r"cannot reach S3 at http://127.0.0.1:9"):
        dead[0]
    with pytest.raises(WorkbenchError, match="not an S3 endpoint URL"):
        ObjectMapDataset.from_objects([], settings, endpoint="127.0.0.1:9000")


def test_bad_config_fails_before_any_request(settings, bucket, tmp_path):
    name, _ = bucket
    bad = _config(tmp_path, datasetConfig={"prefetchConcurency": 3})
    with pytest.raises(WorkbenchError, match="unknown key 'prefetchConcurency' in datasetConfig: valid keys are "
                                             "prefetchConcurrency, prefetchWorker"):
        ObjectIterableDataset.from_prefix(f"s3://{name}/data/", settings, config_path=bad)


def test_checkpoint_with_endpoint_credentials_and_config(settings, bucket, tmp_path, cred_path, sts_credentials):
    name, _ = bucket
    audit, log_file = tmp_path / "audit.log", tmp_path / "ckpt.log"
    config = _config(tmp_path, logLevel=1, logPath=str(log_file), auditPath=str(audit),
                     checkpointConfig={"uploadConcurrency": 2, "prefetchConcurrency": 3, "prefetchWorker": 1})
    checkpoint = S3Checkpoint(part_size=5 * 2**20, endpoint=settings.s3_endpoint(), cred_path=cred_path,
                              config_path=config)
    assert (checkpoint.upload_concurrency, checkpoint.prefetch_concurrency, checkpoint.prefetch_worker) == (2, 3, 1)
    assert S3Checkpoint(settings, config_path=_config(tmp_path)).upload_concurrency == 64  # documented default
    state = {"w": torch.arange(3 * 2**20 + 17, dtype=torch.float32)}  # ~12 MiB: 3 parts
    uri = f"s3://{name}/run/ckpt.pt"
    with checkpoint.writer(uri) as f:
        torch.save(state, f)
    with checkpoint.reader(uri) as f:
        size = f.size
        loaded = torch.load(io.BytesIO(f.read()))
    assert torch.equal(loaded["w"], state["w"])
    rows = _audit_lines(audit)
    puts = [r for r in rows if r[1] == "PUT"]
    gets = [r for r in rows if r[1] == "GET"]
    assert sorted(r[4] for r in puts) == ["part 1", "part 2", "part 3"]
    assert sum(int(r[3]) for r in puts) == size == sum(int(r[3]) for r in gets)
    assert {r[2] for r in rows} == {f"{name}/run/ckpt.pt"} and len(gets) == 3
    text = log_file.read_text()
    assert f"wrote checkpoint {uri}: {size} bytes in 3 part(s)" in text and f"reading checkpoint {uri}" in text
    assert sts_credentials["SecretAccessKey"] not in text


def test_persistent_workers_follow_set_epoch(settings, bucket):
    """Workers that persist across epochs read each epoch in the order `set_epoch` gives in the main process (the
    order workers started for that epoch read), not in the first epoch's order again."""
    name, objects = bucket
    ds = ObjectIterableDataset.from_prefix(f"s3://{name}/data/", settings, _Read(), shuffle=True, seed=7)

    def keys(**kw):
        return [key for batch in DataLoader(ds, batch_size=4, num_workers=2, collate_fn=lambda b: b, **kw)
                for key, _ in batch]

    persistent = DataLoader(ds, batch_size=4, num_workers=2, collate_fn=lambda b: b, persistent_workers=True)
    orders = []
    for epoch in (0, 1, 2):
        ds.set_epoch(epoch)
        got = [key for batch in persistent for key, _ in batch]
        assert got == keys()
        orders.append(got)
    assert sorted(orders[0]) == sorted(objects) and orders[0] != orders[1] != orders[2]


_GET_THREAD = re.compile(r"^oss-dataset-get-(\d+)_\d+$")  # worker w's GET threads (workbench.compat.oss_prefetch)


def _recording(cls):
    """`cls` whose fetch notes, per key, the prefetch worker whose GET thread ran it, and the GETs in flight."""

    class Recording(cls):
        def _reset(self):
            super()._reset()
            self.fetched, self.in_flight, self.peak, self._count = [], {}, {}, threading.Lock()

        def fetch(self, ref):
            match = _GET_THREAD.match(threading.current_thread().name)
            assert match is not None, threading.current_thread().name
            worker = int(match.group(1))
            with self._count:
                self.in_flight[worker] = self.in_flight.get(worker, 0) + 1
                self.peak[worker] = max(self.peak.get(worker, 0), self.in_flight[worker])
            try:
                item = super().fetch(ref)
            finally:
                with self._count:
                    self.in_flight[worker] -= 1
            self.fetched.append((ref.key, worker))
            return item

    return Recording


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("cls", [OssMapDataset, OssIterableDataset])
def test_prefetch_workers_share_the_gets(settings, bucket, tmp_path, cls, workers):
    """datasetConfig.prefetchWorker = N: N prefetch workers fetch (worker w the w-th of every N objects, with its
    share of prefetchConcurrency in flight); order and content are unchanged and every object is fetched once."""
    name, objects = bucket
    config = _config(tmp_path, datasetConfig={"prefetchConcurrency": 6, "prefetchWorker": workers})
    ds = _recording(cls).from_prefix(f"oss://{name}/data/", settings, _Read(), config_path=config)
    keys = sorted(objects)
    assert list(ds) == [(key, objects[key]) for key in keys]  # order and content
    assert sorted(key for key, _ in ds.fetched) == keys  # each object once
    assert dict(ds.fetched) == {key: i % workers for i, key in enumerate(keys)}  # dealt round-robin
    assert set(ds.peak) == set(range(workers)) and max(ds.peak.values()) <= 6 // workers
    if cls is OssMapDataset:  # a DataLoader's batch goes through the same workers
        ds.fetched.clear()
        assert ds.__getitems__([5, 0, 7]) == [(keys[i], objects[keys[i]]) for i in (5, 0, 7)]
        assert sorted(ds.fetched) == sorted((keys[i], n % workers) for n, i in enumerate((5, 0, 7)))


def test_prefetch_worker_argument_beats_config_and_is_capped_by_concurrency(settings, bucket, tmp_path):
    name, objects = bucket
    config = _config(tmp_path, datasetConfig={"prefetchWorker": 3})
    ds = _recording(OssIterableDataset).from_prefix(f"oss://{name}/data/", settings, _Read(), 2,
                                                    config_path=config)  # 2 GETs in flight: 2 workers of 1
    assert dict(ds) == objects and set(ds.peak) == {0, 1}
    ds = _recording(OssIterableDataset).from_prefix(f"oss://{name}/data/", settings, _Read(), config_path=config,
                                                    prefetch_worker=1)
    assert dict(ds) == objects and set(ds.peak) == {0}
    with pytest.raises(WorkbenchError, match="prefetch_worker must be >= 1, got 0"):
        OssMapDataset.from_objects([f"oss://{name}/data/obj-000.bin"], settings, prefetch_worker=0)
