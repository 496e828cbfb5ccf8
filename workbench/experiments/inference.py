"""Kinds `inference` and `perf`: Triton fed from a loader (`inference sweep`: inferences/s, latency p50/p95/p99)
and Triton's perf_analyzer fed the dataset's samples (`inference perf`: the client/server breakdown)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, PositiveInt
from rich.console import Console
from rich.table import Table

from workbench.bench.inference import DEFAULT_RESULTS, sweep_inference
from workbench.config import Settings
from workbench.experiments.kind import Kind, LoaderName, Outcome
from workbench.experiments.spec import ExperimentSpec
from workbench.serving import MODELS, PROTOCOLS

Model = Literal[tuple(MODELS)]  # type: ignore[valid-type]  # the models the clients know how to feed
Protocol = Literal[PROTOCOLS]  # type: ignore[valid-type]
Positives = list[PositiveInt]  # each value a point


class TritonSpec(ExperimentSpec):
    """What both Triton kinds take: the model, the loader feeding it and the points measured."""

    results_dir: Path = DEFAULT_RESULTS
    dataset: str = Field(min_length=1, description="dataset name as ingested")
    model: Model = Field("ensemble", description="ensemble (client sends bytes) | cass_to_inference (client sends "
                                                 "UUIDs, Triton reads Cassandra) | preprocess")
    loader: LoaderName = Field("cassandra", description="registered loader feeding the client")
    split: str = "train"
    concurrency: Positives = Field([1, 4, 8], min_length=1, description="requests in flight, each a point")
    batch_size: Positives = Field([1, 8], min_length=1, description="samples per request, each a point")
    table: str | None = Field(None, description="cass_to_inference: keyspace.table (default: the catalog's)")
    loader_options: dict[str, Any] = Field({}, description="loader settings, e.g. {concurrency: 32}")
    via_proxy: bool = Field(False, description="talk to Triton through toxiproxy")
    name: str | None = Field(None, description="results file name (default: from the model, loader, dataset)")



def _line(row: dict) -> None:
    """One line per point as it ends: a sweep of Triton points runs for minutes."""
    Console().print(f"{row.get('protocol', '')} c={row['concurrency']} b={row['batch_size']}: "
                    f"{row['inferences_per_s']:.1f} inferences/s, p50 {row['latency_ms_p50']:.1f} ms", highlight=False)


class InferenceSpec(TritonSpec):
    kind: Literal["inference"] = "inference"
    protocol: list[Protocol] = Field(["grpc"], min_length=1, description="each a point")
    samples: int = Field(256, ge=1, description="inferences measured per point (after warm-up)")


def run_inference(settings: Settings, spec: InferenceSpec) -> Outcome:
    rows = sweep_inference(settings, spec.model, spec.loader, spec.dataset, spec.concurrency, spec.batch_size,
                           spec.protocol, split=spec.split, samples=spec.samples, loader_options=spec.loader_options,
                           table=spec.table, via_proxy=spec.via_proxy, results_dir=spec.results_dir, name=spec.name,
                           progress=_line)
    return Outcome(spec.results_dir, rows)


def inference_summary(spec: InferenceSpec, outcome: Outcome) -> Table:
    table = Table("protocol", "concurrency", "batch", "inferences/s", "p50 ms", "p95 ms", "p99 ms", "loader wait ms",
                  title=f"{spec.model} fed by {spec.loader} ({spec.dataset}/{spec.split})")
    for row in outcome.rows:
        table.add_row(row["protocol"], str(row["concurrency"]), str(row["batch_size"]),
                      f"{row['inferences_per_s']:.1f}", f"{row['latency_ms_p50']:.1f}", f"{row['latency_ms_p95']:.1f}",
                      f"{row['latency_ms_p99']:.1f}", f"{row['loader_wait_ms_mean']:.1f}")
    return table


class PerfSpec(TritonSpec):
    kind: Literal["perf"] = "perf"
    concurrency: Positives = Field([1, 2, 4], min_length=1, description="requests in flight, each a point")
    protocol: Protocol = "grpc"
    samples: int = Field(64, ge=1, description="samples in perf_analyzer's input data (sent round-robin)")
    mode: Literal["count_windows", "time_windows"] = "count_windows"
    request_count: int = Field(50, ge=1, description="count_windows: requests per measurement window")
    interval_ms: int = Field(5000, ge=1, description="time_windows: window length (ms)")
    stability: float = Field(10.0, gt=0, description="stable when windows differ by less than this (%)")
    max_trials: int = Field(10, ge=1, description="windows tried per point before giving up")
    timeout_s: float = Field(300.0, ge=1, description="limit of one perf_analyzer run (s)")


def run_perf(settings: Settings, spec: PerfSpec) -> Outcome:
    from workbench.bench.perf_analyzer import Measurement, sweep_perf_analyzer

    rows = sweep_perf_analyzer(
        settings, spec.model, spec.loader, spec.dataset, spec.concurrency, spec.batch_size, spec.protocol,
        split=spec.split, samples=spec.samples, loader_options=spec.loader_options,
        measurement=Measurement(spec.mode, spec.request_count, spec.interval_ms, spec.stability, spec.max_trials),
        table=spec.table, via_proxy=spec.via_proxy, timeout_s=spec.timeout_s, results_dir=spec.results_dir,
        name=spec.name, progress=_line)
    return Outcome(spec.results_dir, rows)


def perf_summary(spec: PerfSpec, outcome: Outcome) -> Table:
    table = Table("concurrency", "batch", "inferences/s", "p50 ms", "p90 ms", "p99 ms", "server queue ms",
                  "server compute ms", title=f"perf_analyzer: {spec.model} over {spec.protocol} "
                                             f"({spec.dataset}/{spec.split})")
    for row in outcome.rows:
        compute = sum(row.get(f"server_compute_{p}_ms", 0.0) for p in ("input", "infer", "output"))
        table.add_row(str(row["concurrency"]), str(row["batch_size"]), f"{row['inferences_per_s']:.1f}",
                      f"{row['latency_ms_p50']:.1f}", f"{row['latency_ms_p90']:.1f}", f"{row['latency_ms_p99']:.1f}",
                      f"{row.get('server_queue_ms', float('nan')):.1f}", f"{compute:.1f}")
    return table


INFERENCE = Kind("inference", InferenceSpec, run_inference, inference_summary)
PERF = Kind("perf", PerfSpec, run_perf, perf_summary)
