"""Repeatability: two runs of the same study, point by point: both medians, their ratio, a flag past 10%.

    from workbench.report.repeat import compare_runs, write_comparison
    table = compare_runs(Path("results/studies/latency-hiding"), Path("results/runs/latency-hiding"))
    write_comparison(table, Path("results/studies/latency-hiding/repeatability"), ...)

Ceiling rows are points too: a ceiling that moved says the machine changed, not the loader.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape
from pathlib import Path

import numpy as np
import pandas as pd

from workbench.errors import WorkbenchError
from workbench.report.data import METRICS, grid_columns, load, summarise
from workbench.report.html import STYLE, fmt
from workbench.results import write_atomically

TOLERANCE = 0.10  # medians further apart than this (larger / smaller - 1) are flagged


@dataclass
class Comparison:
    """The per-point table and what it was made from."""

    table: pd.DataFrame  # grid columns, median_a, median_b, ratio (b / a), difference, flag
    first: Path
    second: Path
    metric: str
    tolerance: float

    @property
    def compared(self) -> pd.DataFrame:
        return self.table[self.table["difference"].notna()]

    @property
    def flagged(self) -> pd.DataFrame:
        return self.table[self.table["differs"]]

    def summary(self) -> str:
        """One sentence: how many points agree, the median and the largest difference."""
        compared = self.compared
        if compared.empty:
            return "No point was measured successfully in both runs."
        worst = compared.loc[compared["difference"].idxmax()]
        keys = [c for c in self.table.columns if c not in VALUE_COLUMNS and self.table[c].nunique() > 1]
        where = ", ".join(f"{k} {worst[k]}" for k in keys if worst[k] != "")
        unmatched = len(self.table) - len(compared)
        return (f"{len(compared) - len(self.flagged)} of {len(compared)} points agree within {self.tolerance:.0%} "
                f"({self.metric} medians); median difference {compared['difference'].median():.1%}, largest "
                f"{worst['difference']:.1%} ({where})."
                + (f" {unmatched} point(s) were not measured successfully in both runs." if unmatched else ""))


VALUE_COLUMNS = ("median_a", "median_b", "ratio", "difference", "differs")


def _key(value: object) -> str:
    """Grid values as text that compares equal across folders (32, 32.0 and "32" alike; missing as "")."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, bool | np.bool_):
        return "yes" if value else "no"
    try:
        return f"{float(value):g}"  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return str(value)


def _medians(folder: Path, metric: str) -> tuple[str, pd.DataFrame]:
    ctx = load(folder)
    if f"{metric}" not in ctx.runs.columns:
        raise WorkbenchError(f"{folder}: its runs have no column '{metric}': compare one of "
                             f"{', '.join(m for m in METRICS if m in ctx.runs.columns)}")
    summary = summarise(ctx.runs)  # ceiling rows included: they are points of the run too
    keys = [c for c in grid_columns(ctx.runs) if c in summary.columns]
    frame = summary[keys].map(_key)
    frame["median"] = summary[f"{metric}_median"].to_numpy()
    return ctx.name, frame


def compare_runs(first: Path, second: Path, metric: str = "samples_per_s", tolerance: float = TOLERANCE,
                 any_study: bool = False) -> Comparison:
    """Join two results folders on their grid points; `any_study` allows folders of differently named studies."""
    if not 0 < tolerance < 1:
        raise WorkbenchError(f"tolerance {tolerance} must be between 0 and 1 (0.1 = 10%)")
    name_a, a = _medians(Path(first), metric)
    name_b, b = _medians(Path(second), metric)
    if name_a != name_b and not any_study:
        raise WorkbenchError(f"{first} holds study '{name_a}' and {second} study '{name_b}': compare two runs of the "
                             "same study (or pass --any-study)")
    keys = [c for c in a.columns if c in b.columns and c != "median"]
    table = a.merge(b, on=keys, how="outer", suffixes=("_a", "_b"), sort=False)
    table["ratio"] = table["median_b"] / table["median_a"]
    low = table[["median_a", "median_b"]].min(axis=1, skipna=False)
    high = table[["median_a", "median_b"]].max(axis=1, skipna=False)
    table["difference"] = (high / low - 1).where(low > 0)
    table["differs"] = table["difference"] > tolerance + 1e-12
    return Comparison(table[[*keys, *VALUE_COLUMNS]].fillna({k: "" for k in keys}), Path(first), Path(second),
                      metric, tolerance)


def write_comparison(comparison: Comparison, out: Path) -> tuple[Path, Path]:
    """repeatability.csv and repeatability.html (flagged rows highlighted) in `out`; returns both paths."""
    out.mkdir(parents=True, exist_ok=True)
    csv, page = out / "repeatability.csv", out / "repeatability.html"
    write_atomically(csv, lambda tmp: comparison.table.to_csv(tmp, index=False))
    write_atomically(page, lambda tmp: tmp.write_text(render(comparison), encoding="utf-8"))
    return csv, page


def render(comparison: Comparison) -> str:
    table = comparison.table
    keys = [c for c in table.columns if c not in VALUE_COLUMNS]
    headers = [*keys, "run A median", "run B median", "B / A", "difference", ""]
    head = "".join(f'<th class="{"text" if i < len(keys) else ""}">{escape(h)}</th>' for i, h in enumerate(headers))
    rows = []
    for _, row in table.iterrows():
        cells = "".join(f'<td class="text">{escape(str(row[k]))}</td>' for k in keys)
        cells += "".join(f"<td>{escape(fmt(row[c], 1))}</td>" for c in ("median_a", "median_b"))
        cells += f"<td>{escape(fmt(row['ratio'], 3))}</td>"
        difference = row["difference"]
        cells += f"<td>{'–' if pd.isna(difference) else f'{difference:.1%}'}</td>"
        flag = (f"⚠ differs by more than {comparison.tolerance:.0%}" if row["differs"]
                else "not in both runs" if pd.isna(difference) else "")
        cells += f'<td class="text">{escape(flag)}</td>'
        rows.append(f'<tr class="{"differs" if row["differs"] else ""}">{cells}</tr>')
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>repeatability: {escape(comparison.first.name)}</title>
<style>{STYLE} tr.differs td {{ background: #fff1d6 !important; }}</style></head><body>
<h1>Repeatability of {escape(comparison.metric)}</h1>
<p>Run A: <code>{escape(str(comparison.first))}</code><br>Run B: <code>{escape(str(comparison.second))}</code></p>
<p><b>{escape(comparison.summary())}</b></p>
<p class="caption">Per point, the median over each run's successful repetitions; difference = larger / smaller - 1,
flagged above {comparison.tolerance:.0%}. The same numbers are in <a href="repeatability.csv">repeatability.csv</a>.
</p>
<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>
</body></html>
"""
