"""`bench clients` against the real servers: 2 torchrun ranks (gloo on the CPU) read a two-split dataset
through the normal loaders, and together deliver every id of the split exactly once; two ranks on the same
shard fail the check with the duplicated and missing counts."""

from __future__ import annotations

import json
import uuid

import pytest
from shared_sources import TwoSplits

from workbench.backends import make_backend
from workbench.bench.clients import expected_ids, run_clients
from workbench.data import SyntheticSource
from workbench.ingest import ingest

pytestmark = pytest.mark.services

LAYOUTS = {"cassandra": {}, "s3-shards": {"maxcount": 4}, "ignite": {}}


@pytest.fixture(scope="module")
def dataset(stack):
    """A 48-sample dataset (36 train, 12 val) in every backend under one name; the train ids."""
    source = TwoSplits(SyntheticSource(48, mean_kb=8, seed=3, name=f"clients_{uuid.uuid4().hex[:8]}"))
    backends = [make_backend(b, stack, source.name, **opts) for b, opts in LAYOUTS.items()]
    for backend in backends:
        ingest(source, backend, progress=False)
    yield source.name, {str(s.id) for s in source if s.split == "train"}
    for backend in backends:
        backend.drop()


@pytest.mark.parametrize("loader", ["cassandra", "s3-shards", "ignite"])
def test_two_ranks_read_every_sample_exactly_once(stack, dataset, loader):
    name, train = dataset
    assert expected_ids(stack, loader, name, "train", progress=False) == train  # the backend's own view of the split
    row = run_clients(stack, loader, {"dataset": name, "batch_size": 8, "concurrency": 4}, 2, compute_ms=2,
                      expected=train, progress=False)
    assert row["status"] == "ok", row["error"]
    assert (row["samples"], row["missing"], row["duplicated"], row["unexpected"]) == (len(train), 0, 0, 0)
    assert all(n > 0 for n in row["rank_samples"]) and row["shards"] == [0, 1]
    assert row["samples_per_s"] > 0 and row["slowest_rank"] in (0, 1)
    assert row["topology"]["client_ranks"] == 2 and row["topology"]["cassandra_nodes"] == stack.cassandra_nodes


def test_two_ranks_on_one_shard_are_caught(stack, dataset):
    name, train = dataset
    row = run_clients(stack, "s3-shards", {"dataset": name}, 2, shards=[0, 0], progress=False)
    assert row["status"] == "error" and not row["exactly_once"]
    assert row["duplicated"] == row["rank_samples"][0] and row["missing"] == len(train) - row["rank_samples"][0]
    assert "missing" in row["error"] and "duplicated" in row["error"]


@pytest.mark.slow
def test_a_sweep_with_a_clients_axis_checks_every_point(stack, tmp_path):
    """`clients: [1, 2]` in a sweep: every row is R ranks' run with the aggregate and slowest rank's rates,
    one AU per rank, the topology it ran and a passed exactly-once check; the scaling figure draws them."""
    import pandas as pd

    from workbench.bench.sweep import run_sweep
    from workbench.bench.sweep_config import load_sweep_config
    from workbench.report import load
    from workbench.report.scaling import throughput_vs_clients

    cfg = load_sweep_config({
        "name": "clients-axis", "loaders": ["s3-shards", "cassandra"],
        "data": {"count": 48, "mean_kb": 8, "seed": 17}, "network": {"rtt_ms": [0]},
        "layout": {"shard_maxcount": [6]}, "loader": {"batch_size": [8], "concurrency": [4]},
        "compute": {"ms_per_batch": [2]}, "clients": [1, 2], "repetitions": 1, "warmup_batches": 1})
    folder = run_sweep(stack, cfg, tmp_path, progress=False)
    runs = pd.read_parquet(folder / "runs.parquet")
    assert sorted(zip(runs.loader, runs.clients, strict=True)) == [("cassandra", 1), ("cassandra", 2),
                                                                   ("s3-shards", 1), ("s3-shards", 2)]
    assert (runs.status == "ok").all(), runs.error.tolist()
    assert runs.exactly_once.all() and (runs.samples == 48).all() and (runs.expected_samples == 48).all()
    assert (runs[["missing", "duplicated", "unexpected"]] == 0).all().all()
    assert (runs.topology_client_ranks == runs.clients).all()
    assert (runs.topology_launcher == stack.launcher).all()
    for _, row in runs.iterrows():
        per_rank = json.loads(row.rank_samples)
        assert len(per_rank) == row.clients and sum(per_rank) == 48 and all(per_rank)
        assert len(json.loads(row.au_per_accelerator)) == row.clients  # one emulated accelerator per rank
        assert row.samples_per_s > 0 and row.slowest_rank_samples_per_s > 0
        assert row.time_to_first_batch_s < row.seconds
    out = folder / "report"
    out.mkdir()
    plot = throughput_vs_clients(load(folder), out)
    assert plot.path is not None and "4 of 4 run(s) passed" in plot.note
