"""The report of one sweep: PNG plots, summary.csv and one self-contained report.html.

    from workbench.report import build_report
    build_report(Path("results/my-sweep"))   # -> results/my-sweep/report/report.html

Failed runs (status "error") are left out of every plot and statistic and listed with their errors.
`build_index` writes results/index.html (every study, the GPU results, the other folders); `compare_runs` and
`write_comparison` check that two runs of one study repeat (workbench.report.repeat).
"""

from __future__ import annotations

from pathlib import Path

from workbench.report import html, plots, scaling
from workbench.report.data import GRID_COLUMNS, METRICS, Context, load, summarise
from workbench.report.index import build_index
from workbench.report.link_fill import link_fill
from workbench.report.plots import Plot
from workbench.report.repeat import Comparison, compare_runs, write_comparison
from workbench.results import write_atomically

__all__ = ["GRID_COLUMNS", "METRICS", "Comparison", "Context", "Plot", "build_index", "build_report", "compare_runs",
           "load", "make_report", "summarise", "write_comparison"]


def build_report(results_dir: Path) -> Path:
    """Read `<results_dir>/runs.parquet` (+ config.json, environment.json), write `<results_dir>/summary.csv`
    and `<results_dir>/report/` (one PNG per plot and report.html); returns the HTML's path."""
    return make_report(results_dir)[0]


def make_report(results_dir: Path) -> tuple[Path, list[Plot]]:
    """`build_report`, also returning every plot (title, PNG path or None, note) in the report's order."""
    results_dir = Path(results_dir)
    ctx = load(results_dir)
    out = results_dir / "report"
    out.mkdir(parents=True, exist_ok=True)
    _atomic(results_dir / "summary.csv", ctx.summary.to_csv(index=False))
    for stale in out.glob("*.png"):  # a plot skipped this time must not linger from an earlier build
        stale.unlink()
    made = [make(ctx, out) for make in (*plots.ALL_PLOTS, link_fill, *scaling.PLOTS)]
    page = out / "report.html"
    _atomic(page, html.render(ctx, made))
    return page, made


def _atomic(path: Path, text: str) -> None:
    write_atomically(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
