"""How much of a capped link each loader fills: the long-fat-network question as one figure.

Why a plot of its own: against a bandwidth cap, samples/s hides the question. What a user wants is the
share of the link a loader keeps busy at each round-trip time, next to what a native client fills through the
same link: a loader at 0.95 of the link is done, one at 0.3 has requests or connections to add. With
bandwidth_scope `link` the cap is the storage host's link (shared by every connection); with `connection`
it is toxiproxy's per-connection cap, so a share above 1 means the client spread over several connections.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from workbench.report.data import Context
from workbench.report.plots import Plot, new_figure, save_figure

BITS_PER_MB = 8e6


def link_fill(ctx: Context, out: Path) -> Plot:
    plot = Plot("link_fill", "Share of the capped link filled",
                "MB/s moved as a share of the bandwidth cap (median over repetitions, bars min..max) against the "
                "RTT, one panel per cap; dotted with crosses: the backend's native ceiling through the same "
                "link in this run.")
    summary = ctx.at_compute(ctx.summary, ctx.compute_free)
    caps = capped(ctx, summary)
    if not caps:
        plot.note = "skipped: the sweep set no bandwidth cap."
        return plot
    scope = str(ctx.runs["bandwidth_scope"].iloc[0]) if "bandwidth_scope" in ctx.runs.columns else "connection"
    fig = new_figure(5.2 * len(caps), 4.8)
    axes = np.atleast_1d(fig.subplots(1, len(caps), sharey=True, squeeze=False)[0])
    rows_of_table = []
    for ax, cap in zip(axes, caps, strict=True):
        at_cap = summary[summary["bandwidth_mbps"] == cap]
        for label, rows in ctx.series(at_cap, exclude=("bandwidth_mbps",)).items():
            rows = rows.sort_values("rtt_ms")
            share = rows["mb_per_s_median"] * 8 / cap
            low = (rows["mb_per_s_median"] - rows["mb_per_s_min"]) * 8 / cap
            high = (rows["mb_per_s_max"] - rows["mb_per_s_median"]) * 8 / cap
            ax.errorbar(rows["rtt_ms"], share, yerr=[low, high], capsize=3, marker="o", label=label,
                        color=ctx.colour(str(rows["loader"].iloc[0])))
            rows_of_table += [{"bandwidth cap Mbit/s": cap, "series": label, "RTT ms": rtt, "share of link": s}
                              for rtt, s in zip(rows["rtt_ms"], share, strict=True)]
            rows_of_table += _ceiling_line(ctx, ax, rows, cap)
        ax.axhline(1.0, color="0.3", linewidth=1, linestyle="--", label="the cap")
        ax.set_title(f"{cap:g} Mbit/s " + ("link (shared)" if scope == "link" else "per connection"), fontsize=10)
        ax.set_xlabel("RTT added by toxiproxy (ms)")
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("MB/s x 8 / cap")
    axes[-1].legend(fontsize=7, loc="best")
    plot.path = save_figure(fig, ctx, out, plot.name)
    plot.tables.append(("share of the link", pd.DataFrame(rows_of_table).round(3)))
    plot.note = ("The cap is each node's own link, tbf both ways, shared by all its connections."
                 if scope == "link" else
                 "The cap is toxiproxy's, per connection: a share above 1 means the client used several "
                 "connections at once.")
    return plot


def capped(ctx: Context, summary: pd.DataFrame) -> list[float]:
    """The bandwidth caps the sweep set (none: the figure and the headline skip)."""
    if "mb_per_s_median" not in summary.columns:
        return []
    return [cap for cap in ctx.values("bandwidth_mbps", summary) if cap and cap > 0]


def headline(ctx: Context) -> str:
    """Per cap, the loader that fills most of the link at the highest RTT, and how much ("" without a cap)."""
    summary = ctx.at_compute(ctx.summary, ctx.compute_free)
    parts = []
    for cap in capped(ctx, summary):
        rows = summary[(summary["bandwidth_mbps"] == cap) & summary["mb_per_s_median"].notna()]
        if rows.empty:
            continue
        high = rows[rows["rtt_ms"] == rows["rtt_ms"].max()]
        best = high.loc[high["mb_per_s_median"].idxmax()]
        parts.append(f"{cap:g} Mbit/s: {ctx.label(best)} {best['mb_per_s_median'] * 8 / cap:.2f}")
    if not parts:
        return ""
    return f"share of the capped link at {summary['rtt_ms'].max():g} ms RTT, best loader: " + "; ".join(parts)


def _ceiling_line(ctx: Context, ax, rows: pd.DataFrame, cap: float) -> list[dict]:
    """The native ceiling of the rows' backend at each RTT, as a share of the cap (bytes per sample from the
    loader's own rows: the same dataset); nothing when the run measured no ceiling."""
    if ctx.ceilings is None or not ctx.ceilings.in_run:
        return []
    backend = str(rows["backend"].iloc[0])
    bytes_per_sample = (rows["mb_per_s_median"] / rows["samples_per_s_median"]).median() * 1e6
    first = rows.iloc[0].to_dict()
    rtts = list(rows["rtt_ms"])
    shares = [ctx.ceilings.of(backend, rtt, point={**first, "rtt_ms": rtt}) * bytes_per_sample * 8 / (cap * 1e6)
              for rtt in rtts]
    if not any(math.isfinite(s) for s in shares):
        return []
    label = f"ceiling: {backend}"
    if label not in ax.get_legend_handles_labels()[1]:
        ax.plot(rtts, shares, linestyle=":", marker="x", color=ctx.colour(backend), label=label)
    return [{"bandwidth cap Mbit/s": cap, "series": label, "RTT ms": rtt, "share of link": s}
            for rtt, s in zip(rtts, shares, strict=True)]
