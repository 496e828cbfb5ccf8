"""The S3 client benchmark reads exactly the dataset's objects through every client it compares."""

from __future__ import annotations

import uuid

import pytest

from workbench.backends import make_backend
from workbench.bench.s3_clients import run
from workbench.data import SyntheticSource
from workbench.errors import WorkbenchError
from workbench.ingest import ingest

pytestmark = pytest.mark.services

CHECKED = ("boto3-threads", "obstore-async", "obstore-threads", "S3Store", "native-batch")


def test_every_client_reads_the_same_bytes(stack, tmp_path):
    settings = stack.model_copy(update={"state_dir": tmp_path})
    source = SyntheticSource(24, mean_kb=4, seed=3, name=f"bench-s3c-{uuid.uuid4().hex[:6]}")
    backend = make_backend("s3-objects", settings, source.name, prefix=source.name)
    ingest(source, backend, progress=False)
    try:
        rows = run(settings, source.name, repeats=1, concurrency=4,
                   clients=CHECKED)
        expected = sum(len(s.data) for s in source if s.split == "train")
        assert [r["client"] for r in rows] == list(CHECKED)
        assert {(r["samples"], r["bytes"]) for r in rows} == {(len([s for s in source if s.split == "train"]),
                                                               expected)}
        assert all(r["samples_per_s"] > 0 and r["cpu_us_per_sample"] > 0 for r in rows)
    finally:
        backend.store.delete(k for k, _ in backend.store.list())


def test_a_dataset_not_ingested_is_one_clear_line(stack, tmp_path):
    with pytest.raises(WorkbenchError, match="ingest"):
        run(stack.model_copy(update={"state_dir": tmp_path}), "never-ingested")
