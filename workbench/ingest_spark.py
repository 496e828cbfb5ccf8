"""Ingest with Apache Spark: each backend's own writer runs inside Spark tasks, one partition of the source each.

As cassandra-dali-plugin ingests ImageNet with Spark: the driver lists the source's items (sample indices: the
sorted file listing of an image folder, the numbers of a synthetic set) and cuts them into contiguous partitions;
each task builds its own backend client and writes its partition through the backend's `write`, the write path
`workbench.ingest` drives. ``local[2]`` runs two tasks at once on this machine; a cluster URL (``spark://``,
``yarn``, ``k8s://``) runs them on executors, which need the workbench installed and the source readable at the
same path (an image folder on shared storage; a synthetic source is made from its seed), with
``PYSPARK_PYTHON`` naming that Python (local masters default it to this one).

Retries duplicate nothing: every attempt of a task writes the same thing under the same names. The driver
reads what is stored once, before any task (`stored_ids`); every attempt skips exactly that and writes the rest
of its partition. Ids are uuid5(dataset, sample name), and rows, entries and objects are keyed by them
(Cassandra upserts, Ignite puts, S3 keys from the sample's name), so a retry overwrites what its failed attempt
wrote. Shards: the driver reserves a block of shard numbers per partition (`ShardSet.free_blocks`) and every
attempt packs the same samples in the same order into byte-identical shards numbered from its block's start.
So a speculative copy of a task, or an attempt that outlives its executor, is harmless too. The steps over the
whole set (shard indexes, manifests, journal compaction) run once, on the driver, after every task: one plain
`write` of nothing. A failed attempt costs at most its partition again (ITEMS_PER_PARTITION by default).

Settings, credentials included, travel to the tasks in the task closure: on a shared cluster turn on Spark's
authentication and encryption (``spark.authenticate``, ``spark.network.crypto.enabled``, via ``conf``).
"""

from __future__ import annotations

import dataclasses
import math
import os
import pickle
import re
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

from workbench.backends import Backend, make_backend
from workbench.config import Settings
from workbench.data import IndexedSource, Sample, Source, parse_source
from workbench.errors import WorkbenchError
from workbench.ingest import (
    ON_BAD,
    BadImagesError,
    IngestSummary,
    _checked,
    bad_images,
    source_splits,
    write_catalog,
)
from workbench.layouts.objects import ObjectSet
from workbench.layouts.shards import ShardSet

ITEMS_PER_PARTITION = 10_000  # default partition size: what a failed task writes again at most
MAX_FAILURES = 4  # attempts per task (Spark's default on clusters; local masters get it as local[N,F])
_LOCAL = re.compile(r"^local(\[(\d+|\*)\])?$")
SPARK_MISSING = "pyspark is not installed: pip install 'workbench[spark]' (it needs Java 17 or newer)"


@dataclass
class SparkIngestSummary(IngestSummary):
    """An ingest's summary plus how Spark ran it (the catalog records both)."""

    engine: str = "spark"
    master: str = ""
    partitions: int = 0
    failed_attempts: int = 0  # task attempts that failed and were retried

    def line(self) -> str:
        return (f"{super().line()}; spark {self.master}: {self.partitions} partition(s), "
                f"{self.failed_attempts} failed attempt(s) retried")


@dataclass(frozen=True)
class _Job:
    """What every task needs: shipped in the task closure (the source and the stored ids go as broadcasts)."""

    backend: str
    settings: Settings
    dataset: str
    layout: dict[str, Any]
    check_images: bool
    shard_blocks: tuple[range, ...] | None  # shard numbers per partition, for the shard layout


class _Slice:
    """Samples start..stop-1 of an indexed source, as a Source (name and classes are the source's)."""

    def __init__(self, source: IndexedSource, start: int, stop: int) -> None:
        self.source, self.start, self.stop = source, start, stop
        self.name, self.classes = source.name, source.classes

    def __len__(self) -> int:
        return self.stop - self.start

    def __iter__(self) -> Iterator[Sample]:
        return (self.source.sample(i) for i in range(self.start, self.stop))


def blocks(count: int, partitions: int) -> list[tuple[int, int, int]]:
    """(partition, start, stop) of `count` items cut into at most `partitions` contiguous, near-equal blocks."""
    if count < 0 or partitions < 1:
        raise WorkbenchError(f"cannot cut {count} items into {partitions} partitions: use partitions >= 1")
    parts = min(partitions, count)
    return [(p, p * count // parts, (p + 1) * count // parts) for p in range(parts)]


def local_master(master: str, max_failures: int) -> str:
    """`master` with `max_failures` attempts per task: local masters ignore spark.task.maxFailures and take
    it as ``local[N,F]`` (a plain ``local[N]`` never retries)."""
    m = _LOCAL.match(master.replace(" ", ""))
    if m is None:
        return master
    return f"local[{m.group(2) or 1},{max_failures}]"


def _shared_layout(backend: Backend) -> ShardSet | ObjectSet | None:
    """The backend's layout when it keeps files over the whole set (shard indexes, manifests, a journal) that
    concurrent writers must leave to one final step; None for rows and entries keyed by id (Cassandra, Ignite)."""
    layout = getattr(backend, "layout", None)
    return layout if isinstance(layout, ShardSet | ObjectSet) else None


def _partitioned(backend: Backend, job: _Job, partition: int) -> Backend:
    """`backend` as the writer of one partition among several writing at once."""
    layout = _shared_layout(backend)
    if isinstance(layout, ObjectSet):
        layout.partitioned = True
    elif isinstance(layout, ShardSet) and job.shard_blocks is not None:
        layout.numbers = job.shard_blocks[partition]
    return backend


def _attempt() -> int:
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.attemptNumber() if context is not None else 0


def _source(shipped) -> IndexedSource:
    """The driver's source in a task. Broadcasts are plain pickles, so it travels as cloudpickle bytes: sources
    defined outside an installed module (a notebook's, a test's) reach the executors too."""
    return pickle.loads(shipped.value)


def _check_partition(job: _Job, shipped, stored, block: tuple[int, int, int]) -> list[str]:
    """``name: reason`` of the bad images in one partition (``on_bad=fail`` checks all before writing)."""
    _, start, stop = block
    return bad_images(_Slice(_source(shipped), start, stop), stored.value)


def _write_partition(job: _Job, shipped, stored, block: tuple[int, int, int]) -> dict:
    """One task: its own backend client writes the partition's samples that were not stored before the ingest."""
    partition, start, stop = block
    backend = _partitioned(make_backend(job.backend, job.settings, job.dataset, **job.layout), job, partition)
    part = _Slice(_source(shipped), start, stop)
    summary = IngestSummary(backend.name, part.name)

    def advance(samples: int, nbytes: int) -> None:
        summary.samples += samples
        summary.bytes += nbytes

    backend.write(_checked(part, backend, summary, stored.value, job.check_images), advance)
    return {"samples": summary.samples, "bytes": summary.bytes, "already_stored": summary.already_stored,
            "skipped_bad": summary.skipped_bad, "attempt": _attempt()}


def _spark_context(master: str, max_failures: int, conf: dict[str, str] | None):
    try:
        from pyspark import SparkConf, SparkContext
    except ImportError:
        raise WorkbenchError(SPARK_MISSING) from None
    spark_conf = SparkConf().setAppName("workbench-ingest").setMaster(local_master(master, max_failures))
    spark_conf.set("spark.task.maxFailures", str(max_failures))
    spark_conf.set("spark.ui.showConsoleProgress", "false")
    if _LOCAL.match(master.replace(" ", "")):  # local workers run this environment's workbench (clusters: set it)
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    for key, value in (conf or {}).items():
        spark_conf.set(key, str(value))
    try:
        return SparkContext(conf=spark_conf)
    except Exception as exc:  # py4j and the JVM raise many kinds; one line says which master failed
        raise WorkbenchError(f"cannot start Spark with master {master!r}: {str(exc).strip().splitlines()[0]} "
                             "(check the URL, Java 17+, and that no other SparkContext runs here)") from exc


def ingest_with_spark(
    source_spec: str | IndexedSource,
    backend_name: str,
    settings: Settings,
    dataset: str | None = None,
    master: str = "local[2]",
    partitions: int | None = None,
    on_bad: str = "skip",
    check_images: bool = True,
    max_failures: int = MAX_FAILURES,
    conf: dict[str, str] | None = None,
    **layout: Any,
) -> SparkIngestSummary:
    """Ingest `source_spec` (a CLI spec, or an indexed source) into `backend_name` with Spark tasks.

    Same results as `workbench.ingest.ingest` (skip what is stored, bad images per `on_bad`, the catalog entry),
    written by `partitions` tasks (default: one per ITEMS_PER_PARTITION items, at least Spark's parallelism).
    """
    if on_bad not in ON_BAD:
        raise WorkbenchError(f"unknown on_bad '{on_bad}': use {' or '.join(ON_BAD)}")
    if max_failures < 1:
        raise WorkbenchError(f"max_failures must be >= 1 (attempts per task), got {max_failures}")
    source: Source = parse_source(source_spec) if isinstance(source_spec, str) else source_spec
    spec = source_spec if isinstance(source_spec, str) else source.name
    if not isinstance(source, IndexedSource):
        raise WorkbenchError(f"source {spec} cannot be cut into Spark partitions: it has no sample(i); "
                             "use a synthetic or imagefolder source")
    total = len(source)
    if total == 0:
        raise WorkbenchError(f"source {source.name} is empty: nothing to ingest")
    backend = make_backend(backend_name, settings, dataset or source.name, **layout)
    backend.prepare(source_splits(source))  # once, here: tables, bucket and folders before any task runs
    stored = backend.stored_ids()
    start = time.perf_counter()
    with _spark_context(master, max_failures, conf) as sc:
        from pyspark import cloudpickle  # importable: the context started

        parts = blocks(total, partitions or max(sc.defaultParallelism, math.ceil(total / ITEMS_PER_PARTITION)))
        shards = _shared_layout(backend)
        job = _Job(backend_name, settings, backend.dataset, layout, check_images,
                   tuple(shards.free_blocks(len(parts))) if isinstance(shards, ShardSet) else None)
        shipped, skip = sc.broadcast(cloudpickle.dumps(source)), sc.broadcast(frozenset(stored))
        rdd = sc.parallelize(parts, len(parts))
        if check_images and on_bad == "fail":
            bad = [line for lines in rdd.map(partial(_check_partition, job, shipped, skip)).collect() for line in lines]
            if bad:
                raise BadImagesError(spec, bad)
            job = dataclasses.replace(job, check_images=False)  # every image was just checked
        results = rdd.map(partial(_write_partition, job, shipped, skip)).collect()
    if _shared_layout(backend) is not None:
        backend.write(iter(()), lambda samples, nbytes: None)  # indexes, manifests, journal: once, over all tasks
    summary = SparkIngestSummary(
        backend.name, source.name, samples=sum(r["samples"] for r in results),
        bytes=sum(r["bytes"] for r in results), seconds=time.perf_counter() - start,
        already_stored=sum(r["already_stored"] for r in results),
        skipped_bad=[line for r in results for line in r["skipped_bad"]],
        master=master, partitions=len(parts), failed_attempts=sum(r["attempt"] for r in results))
    write_catalog(backend, summary, spec)
    return summary
