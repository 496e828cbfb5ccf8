"""Kind `rss`: each loader's peak RSS reading datasets of different sizes (`bench rss`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field
from rich.table import Table

from workbench.bench.rss import bench_rss
from workbench.config import Settings
from workbench.experiments.kind import Kind, LoadersField, Outcome
from workbench.loaders import default_loaders
from workbench.results import RUNS


class RssSpec(LoadersField):
    kind: Literal["rss"] = "rss"
    results_dir: Path = RUNS / "bench-rss"
    counts: list[Annotated[int, Field(ge=10)]] = Field([2000, 20000], min_length=1, description="dataset sizes")
    mean_kb: float = Field(110.0, ge=1, description="mean sample size")
    repeats: int = Field(3, ge=1, description="fresh processes per point; the median is reported")


def run(settings: Settings, spec: RssSpec) -> Outcome:
    rows = bench_rss(settings, spec.loaders or default_loaders(), spec.counts, spec.mean_kb, spec.concurrency,
                     spec.repeats, spec.results_dir)
    return Outcome(spec.results_dir, rows)


def summary(spec: RssSpec, outcome: Outcome) -> Table:
    table = Table("loader", "backend", "dataset size", "epochs", "peak RSS MB", "min", "max", "RSS before reading",
                  "/ smallest once", "/ smallest, same samples", "widest window",
                  title=f"peak RSS vs dataset size: {spec.mean_kb:.0f} KB samples, median of {spec.repeats} fresh "
                  "processes")
    for r in outcome.rows:
        same = r["rss_ratio_same_samples"]
        table.add_row(r["loader"], r["backend"], str(r["count"]), str(r["epochs"]), f"{r['peak_rss_mb']:.0f}",
                      f"{r['peak_rss_mb_min']:.0f}", f"{r['peak_rss_mb_max']:.0f}", f"{r['start_rss_mb']:.0f}",
                      f"{r['rss_ratio']:.2f}", "" if same is None else f"{same:.2f}", r["widest_window"])
    return table


KIND = Kind("rss", RssSpec, run, summary)
