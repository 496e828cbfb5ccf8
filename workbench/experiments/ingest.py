"""Kind `ingest`: ingest MB/s per backend for the same in-memory synthetic samples (`bench ingest`)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from rich.table import Table

from workbench.backends import BACKENDS
from workbench.bench.ingest import bench_ingest
from workbench.config import Settings
from workbench.experiments.kind import BackendNames, Kind, Outcome
from workbench.experiments.spec import ExperimentSpec
from workbench.results import RUNS


class IngestSpec(ExperimentSpec):
    kind: Literal["ingest"] = "ingest"
    results_dir: Path = RUNS / "bench-ingest"
    backends: BackendNames = Field(default_factory=lambda: list(BACKENDS), min_length=1,
                                description="backends to ingest into (default: every registered one)")
    count: int = Field(10_000, ge=1, description="synthetic samples")
    mean_kb: float = Field(110.0, ge=1, description="mean JPEG size")
    repeats: int = Field(1, ge=1, description="fresh datasets per backend; median, min and max are reported")



def run(settings: Settings, spec: IngestSpec) -> Outcome:
    rows = bench_ingest(settings, spec.backends, spec.count, spec.mean_kb, spec.repeats, spec.results_dir)
    return Outcome(spec.results_dir, rows)


def summary(spec: IngestSpec, outcome: Outcome) -> Table:
    table = Table("backend", "samples", "MB", "MB/s median", "min", "max", "samples/s",
                  title=f"ingest, {spec.count} synthetic JPEGs, {spec.repeats} repeat(s)")
    for r in outcome.rows:
        table.add_row(r["backend"], str(r["samples"]), f"{r['bytes'] / 1e6:.0f}", f"{r['mb_per_s_median']:.1f}",
                      f"{r['mb_per_s_min']:.1f}", f"{r['mb_per_s_max']:.1f}", f"{r['samples_per_s_median']:.0f}")
    return table


KIND = Kind("ingest", IngestSpec, run, summary)
