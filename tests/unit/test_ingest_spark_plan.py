"""Ingest with Spark (`workbench.ingest_spark`): partitioning and masters, then real Spark jobs (local[2]) into the fs
backend's two layouts, with a task that fails on its first attempt and is retried. No services."""

from __future__ import annotations

import importlib.util
import uuid
from collections import Counter

import pytest
from spark_sources import FailsFirstAttempt, ship_by_value
from typer.testing import CliRunner

from workbench.backends.registry import make_backend
from workbench.cli import app
from workbench.config import Settings, get_settings
from workbench.data import SyntheticSource
from workbench.errors import WorkbenchError
from workbench.ingest import BadImagesError, read_catalog, verify
from workbench.ingest_spark import blocks, ingest_with_spark, local_master
from workbench.layouts.objects import ObjectSet
from workbench.layouts.shards import PARTITION_BLOCK, ShardSet
from workbench.storage import DirStore

needs_spark = pytest.mark.skipif(importlib.util.find_spec("pyspark") is None,
                                 reason="pyspark is not installed (pip install 'workbench[spark]')")
QUIET = {"spark.ui.enabled": "false"}


@pytest.mark.parametrize("count,partitions", [(10, 3), (3, 8), (1, 1), (100, 7), (7, 7)])
def test_blocks_cover_every_item_once_in_near_equal_runs(count, partitions):
    parts = blocks(count, partitions)
    assert [p for p, _, _ in parts] == list(range(min(count, partitions)))
    assert [i for _, start, stop in parts for i in range(start, stop)] == list(range(count))
    sizes = [stop - start for _, start, stop in parts]
    assert max(sizes) - min(sizes) <= 1 and min(sizes) >= 1


def test_blocks_refuse_no_partitions():
    with pytest.raises(WorkbenchError, match="partitions >= 1"):
        blocks(10, 0)


@pytest.mark.parametrize("master,expected", [
    ("local[2]", "local[2,4]"), ("local", "local[1,4]"), ("local[*]", "local[*,4]"),
    ("local[2,3]", "local[2,3]"), ("spark://head:7077", "spark://head:7077"), ("yarn", "yarn"),
])
def test_local_masters_get_their_retries(master, expected):
    assert local_master(master, 4) == expected


class NoIndex:
    """A source that can only be streamed."""

    name, classes = "stream", []

    def __len__(self) -> int:
        return 1

    def __iter__(self):
        return iter(())


def test_a_stream_only_source_is_refused_before_spark_starts(tmp_path):
    settings = Settings(state_dir=tmp_path / "state", s3_access_key=None, s3_secret_key=None)
    with pytest.raises(WorkbenchError, match="no sample\\(i\\)"):
        ingest_with_spark(NoIndex(), "fs", settings)  # type: ignore[arg-type]


# ---------------------------------------------------------------------- the layouts' partitioned writers


def _write(layout, samples) -> None:
    layout.write(iter(samples), lambda n, nbytes: None)


def test_partition_shard_writers_use_their_blocks_and_a_retry_rewrites_the_same_shards(tmp_path):
    store = DirStore(tmp_path / "set")
    samples = list(SyntheticSource(20, mean_kb=2, name="blocks"))
    ShardSet(store, 1e8, 4, 2, "int").write(iter(samples[:3]), lambda n, nbytes: None)  # an earlier plain ingest
    first = ShardSet(store, 1e8, 4, 2, "int").free_blocks(2)
    assert [(b.start, len(b)) for b in first] == [(1, PARTITION_BLOCK), (1 + PARTITION_BLOCK, PARTITION_BLOCK)]

    def writer(block: range) -> ShardSet:
        shards = ShardSet(store, 1e8, 4, 2, "int")
        shards.numbers = block
        return shards

    def dies_after_5(part):
        yield from part[:5]
        raise RuntimeError("task died")

    parts = [samples[3:11], samples[11:]]
    with pytest.raises(RuntimeError, match="task died"):
        _write(writer(first[0]), dies_after_5(parts[0]))  # partition 0's first attempt: one shard, then death
    before = {k: store.get(k)[0] for k, _ in store.list() if k.endswith(".tar")}
    assert sorted(before) == ["train/shard-000000.tar", "train/shard-000001.tar"]
    for block, part in zip(first, parts, strict=True):
        _write(writer(block), part)  # the successful attempts
    assert all(store.get(k)[0] == data for k, data in before.items())  # the retry rewrote the same bytes
    assert [i.name for i in ShardSet(store, 1e8, 4, 2, "int").index("train")] == ["shard-000000.tar"]  # not yet

    _write(ShardSet(store, 1e8, 4, 2, "int"), [])  # the driver's final step: the index of everything complete
    shards = ShardSet(store, 1e8, 4, 2, "int")
    names = [info.name for _, info in shards.shard_keys()]
    assert names == sorted(["shard-000000.tar", "shard-000001.tar", "shard-000002.tar",
                            "shard-010001.tar", "shard-010002.tar", "shard-010003.tar"])
    assert Counter(s.id for s in shards.scan()) == Counter(s.id for s in samples)


def test_a_partitioned_object_writer_leaves_the_manifest_to_the_final_write(tmp_path):
    store = DirStore(tmp_path / "set")
    samples = list(SyntheticSource(6, mean_kb=2, name="objects"))
    objects = ObjectSet(store, 2, "int", use_metadata=False)
    objects.partitioned = True
    _write(objects, samples)
    assert objects.manifest("train") == []
    _write(ObjectSet(store, 2, "int", use_metadata=False), [])
    assert len(objects.manifest("train")) == 6
    assert objects.stored_ids() == {s.id for s in samples}


# ------------------------------------------------------------------------------------------ real Spark jobs


@needs_spark
@pytest.mark.slow
@pytest.mark.parametrize("layout", ["imagefolder", "shards"])
def test_a_retried_task_stores_every_id_exactly_once(settings, tmp_path, layout):
    ship_by_value()
    inner = SyntheticSource(40, mean_kb=4, name=f"spark-{uuid.uuid4().hex[:6]}")
    source = FailsFirstAttempt(inner, at=25)  # partition 1 of 3 (items 13..25) dies at its last item, once:
    # its retry writes all of it again, under the same keys and shard names
    options = {"layout": layout, "root": str(tmp_path / layout), "workers": 2}
    if layout == "shards":
        options["maxcount"] = 4

    summary = ingest_with_spark(source, "fs", settings, partitions=3, conf=QUIET, **options)

    assert (summary.samples, summary.partitions, summary.failed_attempts) == (40, 3, 1)
    backend = make_backend("fs", settings, inner.name, **options)
    stored = Counter(s.id for s in backend.scan())
    assert stored == Counter(s.id for s in inner)  # nothing missing, nothing twice
    assert backend.stored_ids() == {s.id for s in inner}
    assert verify(inner, backend).ok
    if layout == "shards":  # every partition numbered its shards in its own block
        names = [info.name for _, info in backend.layout.shard_keys()]
        blocks_used = {int(name[len("shard-"):-len(".tar")]) // PARTITION_BLOCK for name in names}
        assert blocks_used == {0, 1, 2}
    else:
        assert len(backend.layout.manifest("train")) == 40
    entry = read_catalog(settings, "fs", inner.name)["last_ingest"]
    assert (entry["engine"], entry["samples"], entry["failed_attempts"]) == ("spark", 40, 1)

    again = ingest_with_spark(inner, "fs", settings, partitions=2, conf=QUIET, **options)
    assert (again.samples, again.already_stored) == (0, 40)
    assert Counter(s.id for s in backend.scan()) == stored


@needs_spark
@pytest.mark.slow
def test_on_bad_fail_checks_every_partition_and_writes_nothing(settings, tmp_path):
    folder = tmp_path / "images" / "cats"
    folder.mkdir(parents=True)
    for i in range(6):
        (folder / f"ok{i}.jpg").write_bytes(SyntheticSource(6, mean_kb=2).sample(i).data)
    (folder / "broken.jpg").write_bytes(b"\xff\xd8\xff not a jpeg")
    root = tmp_path / "out"
    with pytest.raises(BadImagesError, match="1 bad image") as failure:
        ingest_with_spark(f"imagefolder:{tmp_path / 'images'}", "fs", settings, dataset="bad", partitions=3,
                          on_bad="fail", conf=QUIET, root=str(root))
    assert [line.split(":")[0] for line in failure.value.bad] == ["cats/broken.jpg"]
    assert make_backend("fs", settings, "bad", root=str(root)).stored_ids() == set()

    summary = ingest_with_spark(f"imagefolder:{tmp_path / 'images'}", "fs", settings, dataset="bad", partitions=3,
                                conf=QUIET, root=str(root))
    assert (summary.samples, len(summary.skipped_bad)) == (6, 1)


@pytest.fixture
def cli_settings(tmp_path, monkeypatch):
    """The CLI reads the process settings: a private state_dir for them."""
    monkeypatch.setenv("WORKBENCH_STATE_DIR", str(tmp_path / "state"))
    get_settings.cache_clear()
    yield get_settings()
    get_settings.cache_clear()


def test_cli_names_a_malformed_pair(cli_settings):
    result = CliRunner().invoke(app, ["ingest", "--engine", "spark", "--source", "synthetic:4", "-b", "fs",
                                  "--conf", "spark.ui.enabled"])
    assert isinstance(result.exception, WorkbenchError)
    assert "Spark setting 'spark.ui.enabled' is not KEY=VALUE" in str(result.exception)


@needs_spark
@pytest.mark.slow
def test_cli_ingests_and_prints_how_spark_ran(cli_settings, tmp_path):
    args = ["ingest", "--engine", "spark", "--source", "synthetic:6", "-b", "fs",
            "--dataset", "cli", "-o", f"root={tmp_path / 'cli'}",
            "--partitions", "2", "--conf", "spark.ui.enabled=false"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "fs: 6 samples" in result.output and "spark local[2]: 2 partition(s), 0 failed attempt(s)" in result.output
    assert read_catalog(cli_settings, "fs", "cli")["last_ingest"]["partitions"] == 2
