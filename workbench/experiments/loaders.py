"""Kind `loaders`: every loader against its backend's native ceiling, at each round-trip time (`bench loaders`)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, NonNegativeFloat
from rich.table import Table

from workbench.bench.loaders import ROUND_SECONDS, WARMUP_EPOCHS, bench_loaders
from workbench.config import Settings
from workbench.experiments.kind import Kind, LoadersField, Outcome
from workbench.loaders import default_loaders
from workbench.results import RUNS


class LoadersSpec(LoadersField):
    kind: Literal["loaders"] = "loaders"
    results_dir: Path = RUNS / "bench-loaders"
    count: int = Field(1000, ge=10, description="synthetic samples")
    mean_kb: float = Field(110.0, ge=1, description="mean sample size")
    rtt_ms: list[NonNegativeFloat] = Field([0.0, 50.0], min_length=1, description="round-trip times added")
    repeats: int = Field(3, ge=1, description="paired rounds per backend; the median is reported")
    items: bool = Field(False, description="also each loader's per-item path, as <loader>[items]")
    warmup_epochs: int = Field(WARMUP_EPOCHS, ge=0, description="untimed epochs of each loader first")
    round_seconds: float = Field(ROUND_SECONDS, ge=0, description="each reader reads at least this long a round")


def run(settings: Settings, spec: LoadersSpec) -> Outcome:
    rows = bench_loaders(settings, spec.loaders or default_loaders(), spec.count, spec.mean_kb, spec.concurrency,
                         spec.rtt_ms, spec.repeats, spec.results_dir, items=spec.items,
                         warmup_epochs=spec.warmup_epochs, round_seconds=spec.round_seconds)
    return Outcome(spec.results_dir, rows)


def summary(spec: LoadersSpec, outcome: Outcome) -> Table:
    table = Table("loader", "backend", "RTT ms", "samples/s", "min", "max", "MB/s", "/ ceiling", "its min-max",
                  "/ own 0 ms", "CPU µs/sample", "window", "warm-up epochs",
                  title=f"loaders vs native ceilings: {spec.count} x {spec.mean_kb:.0f} KB, concurrency "
                  f"{spec.concurrency}, median of {spec.repeats} rounds of at least {spec.round_seconds:g} s each "
                  "(a ratio is taken within a round)")
    for r in outcome.rows:
        table.add_row(r["loader"], r["backend"], f"{r['rtt_ms']:.0f}", f"{r['samples_per_s']:.0f}",
                      f"{r['samples_per_s_min']:.0f}", f"{r['samples_per_s_max']:.0f}", f"{r['mb_per_s']:.1f}",
                      f"{r['ratio_to_ceiling']:.2f}",
                      f"{r['ratio_to_ceiling_min']:.2f}-{r['ratio_to_ceiling_max']:.2f}",
                      f"{r['ratio_to_0ms']:.2f}", f"{r['cpu_us_per_sample']:.0f}",
                      str(r.get("window") or ""), str(r.get("warmup_epochs") or ""))
    return table


KIND = Kind("loaders", LoadersSpec, run, summary)
