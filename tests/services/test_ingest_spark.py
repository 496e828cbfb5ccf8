"""Ingest with Spark (local[2]) into the real servers: a task that dies on its first attempt is retried, and the
stored ids are the source's ids exactly (nothing missing, nothing twice) for every remote backend."""

from __future__ import annotations

import importlib.util
import uuid
from collections import Counter

import pytest
from spark_sources import FailsFirstAttempt, ship_by_value

from workbench.backends.registry import make_backend
from workbench.data import SyntheticSource
from workbench.ingest import read_catalog, verify
from workbench.ingest_spark import ingest_with_spark
from workbench.layouts.shards import PARTITION_BLOCK

pytestmark = [
    pytest.mark.services,
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("pyspark") is None,
                       reason="pyspark is not installed (pip install 'workbench[spark]')"),
]
LAYOUT = {"cassandra": {}, "s3-objects": {}, "s3-shards": {"maxcount": 4}, "ignite": {}}


@pytest.fixture
def settings(stack, tmp_path):
    """The stack's settings with a private state_dir (catalog and local manifests land there)."""
    return stack.model_copy(update={"state_dir": tmp_path / "state"})


@pytest.mark.parametrize("backend_name", list(LAYOUT))
def test_retried_task_leaves_exactly_the_source_ids(settings, backend_name):
    ship_by_value()
    inner = SyntheticSource(40, mean_kb=8, name=f"spark_{uuid.uuid4().hex[:8]}")
    source = FailsFirstAttempt(inner, at=25)  # partition 1 of 3 (items 13..25) dies at its last item, once
    options = {**LAYOUT[backend_name], "workers": 4}
    backend = make_backend(backend_name, settings, inner.name, **options)
    try:
        summary = ingest_with_spark(source, backend_name, settings, partitions=3,
                                    conf={"spark.ui.enabled": "false"}, **options)
        assert (summary.samples, summary.already_stored, summary.failed_attempts) == (40, 0, 1)
        stored = Counter(s.id for s in backend.scan())
        assert stored == Counter(s.id for s in inner)  # nothing missing, nothing twice
        assert backend.stored_ids() == {s.id for s in inner}
        report = verify(inner, backend)
        assert report.ok, (report.missing, report.extra, report.mismatched)
        if backend_name == "s3-shards":  # each partition numbered its shards in its own block
            names = [info.name for _, info in backend.layout.shard_keys()]
            assert {int(n[len("shard-"):-len(".tar")]) // PARTITION_BLOCK for n in names} == {0, 1, 2}
        if backend_name == "s3-objects":  # the manifest, written once after all tasks, lists every sample
            assert len(backend.layout.manifest("train")) == 40
        entry = read_catalog(settings, backend_name, inner.name)
        assert (entry["last_ingest"]["engine"], entry["last_ingest"]["samples"]) == ("spark", 40)
    finally:
        backend.drop()
