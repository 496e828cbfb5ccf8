"""The scaling figure: samples/s against client ranks (the sweep's `clients` axis), one line per loader and
storage node count, with the slowest rank's rate beside it and the exactly-once check of every point.

Why apart from plots.py: a study over topologies (nodes x ranks) is read differently from the network
plots, which hold the topology fixed. The node count of a line is its backend's own (`topology_<service>_nodes`,
found through the backend's proxy path, so no backend is named here). Rows are the successful runs; failed
runs (a failed exactly-once check among them) are counted per point in the table.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from workbench.backends import BACKENDS, backend_class
from workbench.config import NODE_COUNTS
from workbench.report.data import Context, is_missing
from workbench.report.plots import LINESTYLES, MARKERS, Plot, new_figure, place_legend, save_figure

RATES = (("samples_per_s", "aggregate samples/s (all ranks)"),
         ("slowest_rank_samples_per_s", "slowest rank's samples/s"))


def nodes_column(backend: str) -> str | None:
    """The topology column with the node count of the service a backend reads (None: local, or unknown)."""
    path = backend_class(backend).proxy if backend in BACKENDS else None
    return f"topology_{NODE_COUNTS[path]}" if path in NODE_COUNTS else None


def with_nodes(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame with a `nodes` column: each row's node count of its own backend's service (1 when unrecorded)."""
    def nodes(row: Any) -> int:
        column = nodes_column(str(row["backend"]))
        value = row.get(column) if column else None
        return 1 if value is None or is_missing(value) else int(value)

    return frame.assign(nodes=frame.apply(nodes, axis=1) if len(frame) else pd.Series(dtype=int))


def scaling_table(ctx: Context) -> pd.DataFrame:
    """One row per loader x nodes x ranks: median/min/max of both rates over the successful runs, the least
    busy rank's AU, and how many runs passed and failed (a failed exactly-once check is a failed run)."""
    runs = ctx.runs[ctx.runs["loader"].astype(str).map(lambda n: not n.startswith("ceiling:"))]
    if "clients" not in runs.columns or runs["clients"].dropna().empty:
        return pd.DataFrame()
    runs = with_nodes(runs[runs["clients"].notna()])
    keys = ["loader", "backend", "nodes", "clients"]
    ok = runs[runs["status"].astype(str) == "ok"].copy()
    parts = []
    for key, group in runs.groupby(keys, sort=True):
        good = ok.loc[ok.index.intersection(group.index)]
        entry = dict(zip(keys, key, strict=True))
        for metric, _ in RATES:
            values = pd.to_numeric(good.get(metric, pd.Series(dtype=float)), errors="coerce").dropna()
            entry[f"{metric}_median"] = values.median() if len(values) else math.nan
            entry[f"{metric}_min"] = values.min() if len(values) else math.nan
            entry[f"{metric}_max"] = values.max() if len(values) else math.nan
        au = pd.to_numeric(good.get("au_min", pd.Series(dtype=float)), errors="coerce").dropna()
        entry["au_min_median"] = au.median() if len(au) else math.nan
        once = group.get("exactly_once", pd.Series(dtype=object))
        entry["exactly_once_passed"] = int((once == True).sum())  # noqa: E712 (NaN rows: neither)
        entry["exactly_once_failed"] = int((once == False).sum())  # noqa: E712
        entry["runs_ok"], entry["runs_failed"] = len(good), len(group) - len(good)
        parts.append(entry)
    return pd.DataFrame(parts)


def headline(ctx: Context) -> str:
    """Exactly once in how many runs, and each line's aggregate rate at the most vs the fewest ranks ("" without
    a clients axis)."""
    table = scaling_table(ctx)
    if table.empty or table["clients"].nunique() < 2:
        return ""
    passed, failed = int(table["exactly_once_passed"].sum()), int(table["exactly_once_failed"].sum())
    low, high = table["clients"].min(), table["clients"].max()
    parts = []
    for (loader, nodes), rows in table.groupby(["loader", "nodes"], sort=True):
        rates = rows.set_index("clients")["samples_per_s_median"]
        if low in rates and high in rates and rates[low] > 0:
            parts.append(f"{loader} on {nodes} node(s) {rates[high] / rates[low]:.2f}")
    return (f"exactly once in {passed}/{passed + failed} runs; samples/s at {high:g} vs {low:g} ranks: "
            + ", ".join(parts))


def throughput_vs_clients(ctx: Context, out) -> Plot:
    """Aggregate and slowest rank's samples/s against client ranks, a line per loader and node count."""
    plot = Plot("throughput_vs_clients", "Samples/s vs client ranks, per backend and node count",
                "R reader ranks (torchrun or mpirun processes) each read their shard of the dataset for one epoch "
                "through the normal loader. Left: all samples over the slowest rank's time (the epoch ends with "
                "the last rank); right: the slowest rank's own rate. Median over repetitions, bars min..max; "
                "colour per loader, line style per storage node count. Every run checks that the ranks together "
                "read each sample exactly once; a failed check is a failed run (table).")
    table = scaling_table(ctx)
    if table.empty:
        plot.note = "this sweep has no clients axis (no reader ranks): nothing to plot"
        return plot
    nodes = sorted(table["nodes"].unique())
    fig = new_figure(12.4, 4.8)
    axes = np.atleast_1d(fig.subplots(1, len(RATES), squeeze=False).ravel())
    for ax, (metric, label) in zip(axes, RATES, strict=True):
        for (loader, count), rows in table.groupby(["loader", "nodes"], sort=False):
            rows = rows.sort_values("clients")
            median = rows[f"{metric}_median"].to_numpy(dtype=float)
            if not np.isfinite(median).any():
                continue
            low = np.nan_to_num(np.clip(median - rows[f"{metric}_min"].to_numpy(dtype=float), 0, None))
            high = np.nan_to_num(np.clip(rows[f"{metric}_max"].to_numpy(dtype=float) - median, 0, None))
            style = nodes.index(count)
            ax.errorbar(rows["clients"].to_numpy(dtype=float), median, yerr=np.vstack([low, high]), capsize=3,
                        color=ctx.colour(str(loader)), linestyle=LINESTYLES[style % len(LINESTYLES)],
                        marker=MARKERS[style % len(MARKERS)], label=f"{loader}, {count} node(s)")
        ranks = sorted(table["clients"].unique())
        ax.set_xticks(ranks)
        ax.set_xticklabels([f"{int(r)}" for r in ranks])
        ax.set_xlabel("client ranks")
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
    place_legend(fig, axes, inside=12)
    plot.path = save_figure(fig, ctx, out, plot.name)
    failed = int(table["exactly_once_failed"].sum())
    checked = failed + int(table["exactly_once_passed"].sum())
    plot.note = (f"Exactly-once check: {checked - failed} of {checked} run(s) passed"
                 + (f"; {failed} FAILED (left out of the lines, listed with the failed runs)." if failed else ".")
                 + (f" Node counts measured: {', '.join(str(n) for n in nodes)}." if len(nodes) > 1 else ""))
    shown = table.rename(columns={"clients": "ranks", "samples_per_s_median": "samples/s",
                                  "slowest_rank_samples_per_s_median": "slowest rank samples/s",
                                  "au_min_median": "least busy rank AU"})
    plot.tables.append(("Samples/s by loader, node count and client ranks (median over repetitions)",
                        shown[["loader", "backend", "nodes", "ranks", "samples/s", "slowest rank samples/s",
                               "least busy rank AU", "exactly_once_passed", "exactly_once_failed", "runs_ok",
                               "runs_failed"]]))
    return plot


PLOTS = (throughput_vs_clients,)  # the report draws these after plots.ALL_PLOTS
