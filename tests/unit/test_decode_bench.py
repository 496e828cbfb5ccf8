"""The input-pipeline benchmark and the process-fed DALI source, on the fs backend (no services, CPU DALI)."""

from __future__ import annotations

import hashlib
from collections import Counter

import pytest

from pipelines.decode_bench import bench
from workbench.adapters.dali import BatchSource, ProcessBatchSource
from workbench.backends.registry import make_backend
from workbench.config import Settings
from workbench.data import SyntheticSource
from workbench.errors import WorkbenchError
from workbench.ingest import ingest
from workbench.loaders import make_loader

N = 36


@pytest.fixture
def stored(tmp_path):
    """N small JPEGs in a private fs layout; returns (settings, dataset, the multiset of their bytes)."""
    settings = Settings(_env_file=None, state_dir=tmp_path / "state")
    source = SyntheticSource(N, mean_kb=4, seed=5)
    backend = make_backend("fs", settings, "decode_bench_t")
    ingest(source, backend, progress=False)
    return settings, "decode_bench_t", Counter(hashlib.blake2b(s.data).hexdigest() for s in source)


def digests(batches) -> Counter:
    """Each batch is (payload views, labels), as `epoch_batches` yields it."""
    return Counter(hashlib.blake2b(view.tobytes()).hexdigest() for views, _ in batches for view in views)


@pytest.mark.parametrize("workers", [0, 3])
def test_every_sample_once_per_epoch_in_or_out_of_process(stored, workers):
    settings, dataset, expected = stored
    with make_loader("fs", settings, dataset=dataset, batch_size=8) as loader:
        source = (ProcessBatchSource("fs", settings, workers, dataset=dataset, batch_size=8) if workers
                  else BatchSource(loader, 8))
        for epoch in range(2):
            batches = list(source.epoch_batches(epoch))
            assert digests(batches) == expected
            assert all(len(views) == len(labels) <= 8 for views, labels in batches)


@pytest.mark.parametrize("decode,workers", [("none", 0), ("cpu", 0), ("cpu", 2)])
def test_bench_row_counts_every_image_of_every_epoch(stored, decode, workers):
    settings, dataset, _ = stored
    row = bench("fs", dataset, decode=decode, epochs=2, size=32, threads=1, fetch_workers=workers,
                settings=settings, batch_size=8)
    assert row["images_per_epoch"] == N and row["epochs"] == 2 and row["fetch_workers"] == workers
    assert row["images_per_s_min"] <= row["images_per_s_median"] <= row["images_per_s_max"]
    assert row["tls"] is False and "python" in row["environment"]


def test_native_is_only_for_the_plugin(stored):
    settings, dataset, _ = stored
    with pytest.raises(WorkbenchError, match="use --loader cassandra-plugin"):
        bench("fs", dataset, native=True, settings=settings)


def test_worker_transport_bench_reads_every_sample_on_both_paths(stored):
    from pipelines.worker_transport_bench import bench as transport_bench

    settings, dataset, _ = stored
    rows = transport_bench("fs", dataset, workers=2, batch_size=8, repeats=1, settings=settings)
    assert [r["path"] for r in rows] == ["items", "batches"]
    assert all(r["samples"] == N and r["samples_per_s"] > 0 and r["main_cpu_us_per_sample"] > 0 for r in rows)
