"""Kind `clients`: R reader ranks (torchrun or mpirun) read one epoch of their shards (`bench clients`): aggregate
and per-rank rates, accelerator utilisation, and a check that together they read every sample exactly once."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

from pydantic import Field
from rich.console import Group
from rich.table import Table
from rich.text import Text

from workbench.bench.clients import DEFAULT_RESULTS, bench_clients
from workbench.bench.clients_launch import LaunchPlan
from workbench.config import Settings
from workbench.experiments.kind import ConcurrencyField, Kind, LoaderName, Outcome


class ClientsSpec(ConcurrencyField):
    kind: Literal["clients"] = "clients"
    results_dir: Path = DEFAULT_RESULTS
    loader: LoaderName = Field(description="the registered loader each rank reads with")
    ranks: int | None = Field(None, ge=1, description="reader ranks (default: settings.client_ranks)")
    launcher: Literal["torchrun", "mpirun"] | None = Field(None, description="default: settings.launcher")
    dataset: str | None = Field(None, description="an ingested dataset (default: a synthetic one, ingested if "
                                                  "needed)")
    split: str = "train"
    count: int = Field(1000, ge=10, description="synthetic samples (without dataset)")
    mean_kb: float = Field(110.0, ge=1, description="synthetic JPEG size (without dataset)")
    compute_ms: float = Field(0.0, ge=0, description="emulated accelerator compute per batch")
    batch_size: int = Field(32, ge=1, description="samples per batch (one compute step)")
    via_proxy: bool = Field(True, description="through toxiproxy (as bench loaders) or straight to the servers")
    expected: Literal["split", "stored"] = Field("split", description="split: the split's ids from a scan of the "
                                                 "backend, after the timed run; stored: every stored id")
    max_seconds: float = Field(600.0, ge=1, description="longest a rank may read its shard")
    start_timeout: float = Field(120.0, ge=1, description="longest the ranks may take to start")
    nnodes: int = Field(1, ge=1, description="torchrun: hosts taking part (run this on each)")
    rdzv_endpoint: str | None = Field(None, description="torchrun on several hosts: HOST:PORT of the rendezvous")
    hosts: str | None = Field(None, description="mpirun -H, e.g. node1:2,node2:2 (rank 0's host first)")



def run(settings: Settings, spec: ClientsSpec) -> Outcome:
    plan = LaunchPlan(spec.launcher or settings.launcher, spec.ranks or settings.client_ranks, nnodes=spec.nnodes,
                      rdzv_endpoint=spec.rdzv_endpoint, hosts=spec.hosts, start_timeout_s=spec.start_timeout)
    config = {"split": spec.split, "batch_size": spec.batch_size, "concurrency": spec.concurrency}
    row = bench_clients(settings, spec.loader, plan.ranks, plan.launcher, dataset=spec.dataset, count=spec.count,
                        mean_kb=spec.mean_kb, compute_ms=spec.compute_ms, config=config, via_proxy=spec.via_proxy,
                        max_seconds=spec.max_seconds, plan=plan, expected_mode=spec.expected,
                        results_dir=spec.results_dir)
    return Outcome(spec.results_dir, [] if row is None else [row])


def _number(value: float, digits: int = 0) -> str:
    return f"{value:.{digits}f}" if value is not None and math.isfinite(value) else "-"


def row_summary(row: dict) -> Group:
    """Per-rank table, the aggregate line and the exactly-once verdict."""
    table = Table("rank", "host", "shard", "samples", "seconds", "samples/s", "accelerator util.",
                  title=f"{row['ranks']} {row['loader']} ranks ({row['launcher']}) on {row['dataset']}/{row['split']}, "
                        f"compute {row['compute_ms']:g} ms/batch")
    for rank, (host, shard, samples, seconds, rate, util) in enumerate(zip(
            row["rank_hosts"], row["shards"], row["rank_samples"], row["rank_seconds"], row["rank_samples_per_s"],
            row["rank_accelerator_utilisation"], strict=True)):
        table.add_row(str(rank), host, str(shard), str(samples), _number(seconds, 2), _number(rate),
                      _number(util, 3) if util is not None else "-")
    aggregate = Text(f"aggregate {_number(row['samples_per_s'])} samples/s ({_number(row['mb_per_s'], 1)} MB/s) "
                     f"over {_number(row['seconds'], 2)} s; slowest rank {row['slowest_rank']} at "
                     f"{_number(row['slowest_rank_samples_per_s'])} samples/s; imbalance "
                     f"{_number(row['rank_imbalance'], 2)}x")
    if row["exactly_once"]:
        verdict = Text(f"exactly once: {row['samples']} reads of {row['expected_samples']} samples "
                       f"(expected ids: {row['expected_from']})")
    else:
        verdict = Text(str(row["error"]), style="red")
    return Group(table, aggregate, verdict)


def summary(spec: ClientsSpec, outcome: Outcome) -> Group | Text:
    if not outcome.rows:
        return Text("this host's ranks finished; the host that ran rank 0 checks and writes the row")
    return row_summary(outcome.rows[0])


KIND = Kind("clients", ClientsSpec, run, summary)
