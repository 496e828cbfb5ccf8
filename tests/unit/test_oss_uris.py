"""The OSS connector's names refuse bad input with one line naming it, before any request: URIs without a bucket,
other schemes, URIs that name no object, a missing credential file."""

from __future__ import annotations

import pytest

from workbench.checkpoints.s3 import OssCheckpoint, S3Checkpoint
from workbench.compat.oss_connector import ObjectMapDataset, OssIterableDataset, OssMapDataset
from workbench.errors import WorkbenchError
from workbench.storage.s3 import parse_object_uri, parse_s3_uri

DATASETS = [OssMapDataset, OssIterableDataset]


def _one_line(info: pytest.ExceptionInfo) -> str:
    text = str(info.value)
    assert "\n" not in text
    return text


@pytest.mark.parametrize("uri", ["oss:///key.png", "oss://", "oss:///"])
@pytest.mark.parametrize("cls", DATASETS)
def test_uri_without_bucket(settings, cls, uri):
    for make in (lambda: cls.from_objects([uri], settings), lambda: cls.from_prefix(uri, settings),
                 lambda: cls.from_manifest_file("unused", None, uri, settings)):
        with pytest.raises(WorkbenchError) as info:
            make()
        assert _one_line(info) == f"OSS URI {uri!r} has no bucket (want oss://bucket/key)"


@pytest.mark.parametrize("uri", ["s3://bucket/a.png", "http://bucket/a.png", "bucket/a.png", "OSS://bucket/a.png"])
@pytest.mark.parametrize("cls", DATASETS)
def test_other_scheme(settings, cls, uri):
    for make in (lambda: cls.from_objects([uri], settings), lambda: cls.from_prefix(uri, settings)):
        with pytest.raises(WorkbenchError) as info:
            make()
        assert _one_line(info) == f"not an oss:// URI: {uri!r} (want oss://bucket/key)"


def test_manifest_uri_of_another_scheme_is_refused(settings):
    with pytest.raises(WorkbenchError) as info:
        OssMapDataset.from_manifest_file("s3://bucket/manifest", None, "oss://bucket/base/", settings)
    assert _one_line(info) == "not an oss:// URI: 's3://bucket/manifest' (want oss://bucket/key)"


@pytest.mark.parametrize("cls", DATASETS)
def test_object_uri_names_an_object(settings, cls):
    for uri in ("oss://bucket", "oss://bucket/", "oss://bucket/folder/"):
        with pytest.raises(WorkbenchError) as info:
            cls.from_objects([uri], settings)
        assert _one_line(info) == f"{uri!r} names no object (want oss://bucket/key)"


def test_oss_names_keep_oss_uris_and_string_labels(settings):
    ds = OssMapDataset.from_objects(["oss://bucket/a/b.png", "oss://other/c"], settings)
    assert [(r.bucket, r.key, r.uri, r.label) for r in ds.refs] == [
        ("bucket", "a/b.png", "oss://bucket/a/b.png", ""), ("other", "c", "oss://other/c", "")]
    plain = ObjectMapDataset.from_objects(["s3://bucket/a/b.png"], settings)  # our own names: s3://, no label
    assert [(r.uri, r.label) for r in plain.refs] == [("s3://bucket/a/b.png", None)]
    with pytest.raises(WorkbenchError, match="not an s3:// URI"):
        ObjectMapDataset.from_objects(["oss://bucket/a/b.png"], settings)


@pytest.mark.parametrize("uri", ["oss:///run/epoch.0", "oss://", "s3://bucket/run/epoch.0", "oss://bucket/run/"])
def test_checkpoint_uris(settings, uri):
    checkpoint = OssCheckpoint(settings)
    for open_ in (checkpoint.reader, checkpoint.writer):
        with pytest.raises(WorkbenchError) as info:
            open_(uri)
        assert uri in _one_line(info) and "(want oss://bucket/key)" in str(info.value)
    with pytest.raises(WorkbenchError, match="not an s3:// URI"):
        S3Checkpoint(settings).reader("oss://bucket/run/epoch.0")


def test_missing_credential_file(settings, tmp_path):
    missing = tmp_path / "no-such-dir" / "credentials"
    expected = f"OSS credential file {missing} does not exist: write it or pass another cred_path"
    for make in (lambda: OssMapDataset.from_objects(["oss://bucket/a.png"], settings, cred_path=missing),
                 lambda: OssIterableDataset.from_prefix("oss://bucket/a/", settings, cred_path=missing),
                 lambda: OssCheckpoint(settings, cred_path=missing)):
        with pytest.raises(WorkbenchError) as info:
            make()
        assert _one_line(info) == expected


def test_parse_functions_default_to_s3():
    assert parse_s3_uri("s3://b/k/x") == ("b", "k/x")
    assert parse_s3_uri("oss://b/", "oss") == ("b", "")
    assert parse_object_uri("oss://b/k", "oss") == ("b", "k")
    with pytest.raises(WorkbenchError, match=r"^S3 URI 's3:///k' has no bucket \(want s3://bucket/key\)$"):
        parse_s3_uri("s3:///k")
