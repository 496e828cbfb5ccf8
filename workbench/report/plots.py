"""The report's figures: matplotlib's object API on the Agg canvas (no pyplot, no global backend change).

Each function takes the report context and the output folder and returns a `Plot`: the PNG written (or
None with a note saying why it was skipped) plus any table that belongs with it.
"""

from __future__ import annotations

import json
import math
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter, NullLocator

from workbench.bench.metrics import max_accelerators
from workbench.report.data import Context, is_local_backend, is_missing

LINESTYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
DEFAULT_COMPUTE_MS = 100.0
MAX_ACCELERATORS = 32
TARGET_AU = 0.9


@dataclass
class Plot:
    name: str  # file stem
    title: str
    description: str
    path: Path | None = None
    note: str = ""  # why it was skipped, or what to keep in mind
    tables: list[tuple[str, pd.DataFrame]] = field(default_factory=list)


def _figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Figure, ctx: Context, out: Path, name: str) -> Path:
    fig.text(0.0, 0.0, textwrap.fill(ctx.caption(), 150), fontsize=7, color="0.3", ha="left", va="top",
             transform=fig.transFigure)
    path = out / f"{name}.png"
    fig.savefig(path, dpi=100, bbox_inches="tight", pad_inches=0.15)
    return path


def _legend(fig: Figure, axes: Any, inside: int = 10, **options: Any) -> None:
    """One legend: inside the first panel when short, else beside the figure (labels deduplicated)."""
    entries: dict[str, Any] = {}
    for ax in np.atleast_1d(axes):
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            entries.setdefault(label, handle)
    if not entries:
        return
    if len(entries) <= inside:
        np.atleast_1d(axes)[0].legend(list(entries.values()), list(entries), fontsize=7, **options)
    else:
        fig.legend(list(entries.values()), list(entries), fontsize=7, loc="outside right upper",
                   ncols=1 if len(entries) <= 40 else 2)


def _fmt_tick(value: float, _pos: Any = None) -> str:
    return f"{value:g}"


def _rtt_axis(ax: Any, rtts: list[float]) -> str:
    """Log-like x axis when RTTs span a decade or more; 0 ms stays visible on a symlog axis."""
    positive = [r for r in rtts if r > 0]
    spread = max(positive) / min(positive) if len(positive) >= 2 else 1.0
    note = ""
    if spread >= 10:
        if len(positive) < len(rtts):
            ax.set_xscale("symlog", linthresh=min(positive), linscale=0.6)
            note = (f"x axis is symlog: linear from 0 to {min(positive):g} ms, logarithmic above, "
                    "so that the 0 ms point shows")
        else:
            ax.set_xscale("log")
    ax.set_xticks(rtts)
    ax.xaxis.set_major_formatter(FuncFormatter(_fmt_tick))
    ax.xaxis.set_minor_locator(NullLocator())
    return note


def _log_y_if_wide(ax: Any, values: Any, factor: float = 20) -> bool:
    finite = [v for v in np.asarray(values, dtype=float).ravel() if math.isfinite(v) and v > 0]
    if finite and max(finite) / min(finite) > factor:
        ax.set_yscale("log")
        return True
    return False


def _errors(rows: pd.DataFrame, metric: str) -> tuple[np.ndarray, np.ndarray]:
    median = rows[f"{metric}_median"].to_numpy(dtype=float)
    low = np.clip(median - rows[f"{metric}_min"].to_numpy(dtype=float), 0, None)
    high = np.clip(rows[f"{metric}_max"].to_numpy(dtype=float) - median, 0, None)
    return median, np.vstack([np.nan_to_num(low), np.nan_to_num(high)])


def _styles(ctx: Context, labels: list[str]) -> dict[str, dict]:
    """Colour per loader, line style per variant of the same loader."""
    seen: dict[str, int] = {}
    styles = {}
    for label in labels:
        loader = label.split(" [")[0]
        index = seen.get(loader, 0)
        seen[loader] = index + 1
        styles[label] = {"color": ctx.colour(loader), "linestyle": LINESTYLES[index % len(LINESTYLES)],
                         "marker": MARKERS[index % len(MARKERS)]}
    return styles


def _slice_text(ctx: Context, compute: bool = True, layout: bool = True) -> str:
    parts = []
    if compute and ctx.compute_free is not None and len(ctx.values("compute_ms")) > 1:
        parts.append(f"emulated compute {ctx.compute_free:g} ms/batch")
    if len(ctx.values("bandwidth_mbps")) > 1:
        bandwidth = ctx.bandwidth
        parts.append("bandwidth " + ("unlimited" if not bandwidth else f"{bandwidth:g} Mbit/s"))
    count, size = ctx.layout
    if layout and (len(ctx.values("shard_maxcount")) > 1 or len(ctx.values("shard_maxsize")) > 1):
        parts.append(f"shard layout maxcount {count:g}, maxsize {size / 1e6:g} MB")
    return ("Points shown: " + ", ".join(parts) + ".") if parts else ""


def _local_note(ctx: Context, frame: pd.DataFrame) -> str:
    local = sorted({b for b in frame.get("backend", pd.Series(dtype=str)).tolist() if is_local_backend(b)})
    if not local:
        return ""
    return (f"{', '.join(local)} reads local files, not through toxiproxy: the RTT does not apply to it "
            "(its points show the run-to-run spread).")


def _usable(frame: pd.DataFrame, metric: str) -> pd.DataFrame:
    if f"{metric}_median" not in frame.columns:
        return frame.iloc[0:0]
    return frame[frame[f"{metric}_median"].notna()]


# --- 1. throughput vs RTT ------------------------------------------------------------------------------

def throughput_vs_rtt(ctx: Context, out: Path) -> Plot:
    plot = Plot("throughput_vs_rtt", "Throughput vs round-trip time",
                "Samples/s per loader (median over repetitions, bars from min to max) against the RTT toxiproxy "
                "adds to every request; below, each loader's rate as a fraction of its own 0 ms rate.")
    data = _usable(ctx.baseline(ctx.summary), "samples_per_s")
    if data.empty:
        plot.note = "no successful runs: nothing to plot"
        return plot
    rtts = ctx.values("rtt_ms", data)
    fig = _figure(9, 7.5)
    ax, ratio_ax = fig.subplots(2, 1, sharex=True, height_ratios=[3, 2])
    groups = ctx.series(data)
    styles = _styles(ctx, list(groups))
    base_rtt = 0.0 if 0.0 in rtts else rtts[0]
    for label, rows in groups.items():
        rows = rows.sort_values("rtt_ms")
        median, yerr = _errors(rows, "samples_per_s")
        ax.errorbar(rows["rtt_ms"], median, yerr=yerr, capsize=3, label=label, **styles[label])
        base = rows[rows["rtt_ms"] == base_rtt]["samples_per_s_median"]
        if len(base) and base.iloc[0] > 0:
            ratio_ax.plot(rows["rtt_ms"], median / base.iloc[0], **styles[label])
    note = _rtt_axis(ratio_ax, rtts)
    log_y = _log_y_if_wide(ax, data["samples_per_s_median"])
    ax.set_ylabel("samples/s" + (" (log)" if log_y else ""))
    ax.set_title(f"Throughput vs RTT: median of {_reps(ctx)} run(s), bars min..max")
    ax.grid(True, alpha=0.3)
    _legend(fig, ax, inside=12)
    ratio_ax.axhline(1.0, color="0.5", linewidth=0.8)
    ratio_ax.set_ylabel(f"ratio to own {base_rtt:g} ms rate")
    ratio_ax.set_xlabel("round-trip time added by toxiproxy (ms)" + (", symlog" if "symlog" in note else ""))
    ratio_ax.grid(True, alpha=0.3)
    plot.path = _save(fig, ctx, out, plot.name)
    plot.note = " ".join(n for n in (_slice_text(ctx), note + "." if note else "", _local_note(ctx, data)) if n)
    if base_rtt != 0.0:
        plot.note += f" The sweep has no 0 ms point: ratios are to each loader's {base_rtt:g} ms rate."
    return plot


def _reps(ctx: Context) -> str:
    return str(ctx.config.get("repetitions") or (ctx.runs["repetition"].nunique() if "repetition" in ctx.runs else "?"))


# --- 2. throughput vs shard size -----------------------------------------------------------------------

def throughput_vs_shard_size(ctx: Context, out: Path) -> Plot:
    plot = Plot("throughput_vs_shard_size", "Throughput vs shard size",
                "Samples/s of the shard-based loaders against the shard layout (median, bars min..max), "
                "one line per loader and RTT.")
    frame = ctx.at_compute(ctx.at_bandwidth(ctx.summary), ctx.compute_free)
    has = pd.Series(False, index=frame.index)
    for column in ("shard_maxcount", "shard_maxsize"):
        if column in frame.columns:
            has |= frame[column].notna()
    frame = _usable(frame[has], "samples_per_s")
    if frame.empty:
        plot.note = "skipped: no shard-based loader ran successfully in this sweep."
        return plot
    dims = [(c, label, scale) for c, label, scale in (
        ("shard_maxcount", "shard_maxcount (samples per shard)", 1.0),
        ("shard_maxsize", "shard_maxsize (MB per shard)", 1e6)) if len(ctx.values(c, frame)) > 1]
    if not dims:
        count, size = ctx.layout
        plot.note = (f"skipped: the sweep did not vary the shard layout (every shard-based point used maxcount "
                     f"{count:g}, maxsize {size / 1e6:g} MB).")
        return plot
    fig = _figure(6.5 * len(dims), 5)
    axes = np.atleast_1d(fig.subplots(1, len(dims), squeeze=False)[0])
    rtts = ctx.values("rtt_ms", frame)
    colours = _rtt_colours(rtts)
    loaders = list(ctx.series(frame))
    count, size = ctx.layout
    for ax, (column, axis_label, scale) in zip(axes, dims, strict=True):
        other = "shard_maxsize" if column == "shard_maxcount" else "shard_maxcount"
        fixed = size if other == "shard_maxsize" else count
        rows_dim = frame[frame[other].map(lambda v, fixed=fixed: is_missing(v) or v == fixed)] \
            if other in frame.columns and fixed is not None else frame
        for index, (label, rows) in enumerate(ctx.series(rows_dim).items()):
            for rtt in rtts:
                line = rows[rows["rtt_ms"] == rtt].sort_values(column)
                if line.empty:
                    continue
                median, yerr = _errors(line, "samples_per_s")
                ax.errorbar(line[column] / scale, median, yerr=yerr, capsize=3, color=colours[rtt],
                            marker=MARKERS[loaders.index(label) % len(MARKERS)] if label in loaders else "o",
                            linestyle=LINESTYLES[index % len(LINESTYLES)], label=f"{label}, RTT {rtt:g} ms")
        xs = [v / scale for v in ctx.values(column, frame)]
        if xs and min(xs) > 0 and max(xs) / min(xs) >= 10:
            ax.set_xscale("log")
        ax.set_xticks(xs)
        ax.xaxis.set_major_formatter(FuncFormatter(_fmt_tick))
        ax.xaxis.set_minor_locator(NullLocator())
        log_y = _log_y_if_wide(ax, frame["samples_per_s_median"])
        ax.set_xlabel(axis_label)
        ax.set_ylabel("samples/s" + (" (log)" if log_y else ""))
        fixed_text = f"maxsize {size / 1e6:g} MB" if other == "shard_maxsize" else f"maxcount {count:g}"
        ax.set_title(f"vs {column} ({fixed_text})", fontsize=10)
        ax.grid(True, alpha=0.3)
    _legend(fig, axes, inside=12)
    plot.path = _save(fig, ctx, out, plot.name)
    plot.note = _slice_text(ctx, layout=False)
    return plot


def _rtt_colours(rtts: list[float]) -> dict[float, Any]:
    import matplotlib

    cmap = matplotlib.colormaps["viridis"]
    return {rtt: cmap(0.85 * i / max(1, len(rtts) - 1)) for i, rtt in enumerate(rtts)}


# --- 3. batch latency CDFs -----------------------------------------------------------------------------

def _latencies(rows: pd.DataFrame) -> np.ndarray:
    values: list[float] = []
    for text in rows.get("batch_latencies_ms", pd.Series(dtype=object)).tolist():
        if isinstance(text, str) and text:
            try:
                values.extend(float(v) for v in json.loads(text))
            except (ValueError, TypeError):
                continue
        elif isinstance(text, list | np.ndarray):
            values.extend(float(v) for v in text)
    return np.asarray(sorted(values), dtype=float)


def latency_cdfs(ctx: Context, out: Path) -> Plot:
    plot = Plot("batch_latency_cdf", "Batch latency CDFs",
                "Distribution of the time the training loop waited for each batch (all repetitions pooled), "
                "per loader, one panel per RTT.")
    runs = ctx.baseline(ctx.ok)
    if runs.empty or "batch_latencies_ms" not in runs.columns:
        plot.note = "no successful runs with per-batch latencies: nothing to plot"
        return plot
    rtts = ctx.values("rtt_ms", runs)
    shown = rtts if len(rtts) <= 4 else [rtts[0], rtts[-1]]
    ncols = min(2, len(shown))
    nrows = math.ceil(len(shown) / ncols)
    fig = _figure(6.2 * ncols, 4.4 * nrows)
    axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False, sharey=True).ravel())
    groups = ctx.series(runs)
    styles = _styles(ctx, list(groups))
    per_panel = len(groups) <= 8  # percentiles in each panel's legend; else one legend beside the figure
    drawn = 0
    for ax, rtt in zip(axes, shown, strict=False):
        for label, rows in groups.items():
            values = _latencies(rows[rows["rtt_ms"] == rtt])
            if not len(values):
                continue
            fraction = np.arange(1, len(values) + 1) / len(values)
            style = {k: v for k, v in styles[label].items() if k != "marker"}
            p50, p99 = np.percentile(values, 50), np.percentile(values, 99)
            text = f" (p50 {p50:.1f}, p99 {p99:.1f} ms)" if per_panel else ""
            ax.step(np.clip(values, 1e-3, None), fraction, where="post", label=label + text, **style)
            drawn += 1
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(FuncFormatter(_fmt_tick))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_title(f"RTT {rtt:g} ms", fontsize=10)
        ax.set_xlabel("wait for the next batch (ms, log)")
        ax.set_ylabel("fraction of batches")
        ax.set_ylim(0, 1.02)
        ax.grid(True, alpha=0.3, which="both")
        if per_panel and ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="lower right")
    for ax in axes[len(shown):]:
        ax.set_visible(False)
    if not per_panel:
        _legend(fig, axes[:len(shown)], inside=0)
    if not drawn:
        plot.note = "the successful runs recorded no batch latencies: nothing to plot"
        return plot
    plot.path = _save(fig, ctx, out, plot.name)
    extra = f"Showing the lowest and highest of {len(rtts)} RTTs." if len(shown) < len(rtts) else ""
    plot.note = " ".join(n for n in (extra, _slice_text(ctx)) if n)
    return plot


# --- 4. accelerator utilisation vs emulated accelerators -----------------------------------------------

def accelerator_utilisation(ctx: Context, out: Path) -> Plot:
    plot = Plot("accelerator_utilisation", "Accelerator utilisation vs number of emulated accelerators",
                "From each loader's compute-free batch rate R (batches/s, runs with compute_ms = 0) and a compute "
                "time c per batch, N accelerators sharing the loader stay busy AU(N) = min(1, R·c/N) of the time. "
                f"The dotted line is the {TARGET_AU:.0%} target of MLPerf Storage; markers at N = 1 are the AU "
                "measured in runs with emulated compute.")
    layout = ctx.at_layout(ctx.summary)
    free = _usable(ctx.at_compute(layout, 0.0), "batches_per_s")
    computes = [c for c in ctx.values("compute_ms") if c > 0]
    notes = []
    if not computes:
        computes = [DEFAULT_COMPUTE_MS]
        notes.append(f"The sweep emulated no compute: the model uses a default c = {DEFAULT_COMPUTE_MS:g} ms/batch")
    measured = _usable(layout[layout["compute_ms"] > 0], "accelerator_utilisation") \
        if "compute_ms" in layout.columns else layout.iloc[0:0]
    rtts = ctx.values("rtt_ms", pd.concat([free, measured]) if len(measured) else free)
    if free.empty and measured.empty:
        plot.note = "no compute-free runs (compute_ms = 0) and no measured AU: nothing to plot"
        return plot
    if free.empty:
        notes.append("No compute-free runs (compute_ms = 0): only the measured AU is shown")
    shown = sorted({rtts[0], rtts[-1]})
    fig = _figure(6.2 * len(shown), 4.8)
    axes = np.atleast_1d(fig.subplots(1, len(shown), squeeze=False, sharey=True)[0])
    n = np.arange(1, MAX_ACCELERATORS + 1)
    table = []
    free_groups = ctx.series(free)
    styles = _styles(ctx, list(dict.fromkeys([*free_groups, *ctx.series(measured)])))
    for ax, rtt in zip(axes, shown, strict=True):
        for label, rows in free_groups.items():
            at = rows[rows["rtt_ms"] == rtt]
            if at.empty:
                continue
            rate = float(at["batches_per_s_median"].iloc[0])
            for ci, c in enumerate(computes):
                au = np.minimum(1.0, rate * c / 1000 / n) * 100
                linestyle = LINESTYLES[ci % len(LINESTYLES)] if len(computes) > 1 else styles[label]["linestyle"]
                ax.plot(n, au, color=styles[label]["color"], linestyle=linestyle,
                        label=f"{label}, c = {c:g} ms" if len(computes) > 1 else label)
                table.append({"loader": label, "rtt_ms": rtt, "compute_ms": c, "batches_per_s (R)": rate,
                              "max_accelerators at 90%": max_accelerators(rate, c / 1000, TARGET_AU),
                              "model AU(1)": min(1.0, rate * c / 1000), "measured AU(1)": float("nan")})
        for label, rows in ctx.series(measured).items():
            for ci, (_, row) in enumerate(rows[rows["rtt_ms"] == rtt].sort_values("compute_ms").iterrows()):
                value = float(row["accelerator_utilisation_median"])
                marker = MARKERS[computes.index(row["compute_ms"]) % len(MARKERS)] \
                    if row["compute_ms"] in computes else MARKERS[ci % len(MARKERS)]
                ax.plot([1], [value * 100], linestyle="none", marker=marker, markersize=8, markerfacecolor="none",
                        markeredgewidth=1.6, color=styles[label]["color"])
                ax.plot([], [], linestyle="none", marker=marker, markersize=8, markerfacecolor="none",
                        markeredgewidth=1.6, color="black", label=f"measured AU at N = 1, c = {row['compute_ms']:g} ms")
                hit = [t for t in table if t["loader"] == label and t["rtt_ms"] == rtt
                       and t["compute_ms"] == row["compute_ms"]]
                if hit:
                    hit[0]["measured AU(1)"] = value
                else:
                    table.append({"loader": label, "rtt_ms": rtt, "compute_ms": row["compute_ms"],
                                  "batches_per_s (R)": float("nan"), "max_accelerators at 90%": float("nan"),
                                  "model AU(1)": float("nan"), "measured AU(1)": value})
        ax.axhline(TARGET_AU * 100, color="0.3", linestyle=":", linewidth=1.2, label=f"{TARGET_AU:.0%} target")
        ax.set_xscale("log", base=2)
        ax.set_xticks([1, 2, 4, 8, 16, 32])
        ax.xaxis.set_major_formatter(FuncFormatter(_fmt_tick))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_ylim(0, 105)
        ax.set_xlabel("emulated accelerators N (log2)")
        ax.set_ylabel("accelerator utilisation (%)")
        compute_text = f", c = {computes[0]:g} ms/batch" if len(computes) == 1 else ""
        ax.set_title(f"RTT {rtt:g} ms{compute_text}", fontsize=10)
        ax.grid(True, alpha=0.3)
    _legend(fig, axes, inside=12, loc="upper right")
    plot.path = _save(fig, ctx, out, plot.name)
    plot.note = " ".join(n for n in ("; ".join(notes) + ("." if notes else ""), _slice_text(ctx, compute=False)) if n)
    if table:
        frame = pd.DataFrame(table).sort_values(["rtt_ms", "loader", "compute_ms"], kind="stable")
        plot.tables.append(("Emulated accelerators kept at >= 90% AU (max_accelerators) per loader and RTT", frame))
    return plot


# --- 5. loaders vs their backend's ceiling and vs their peers ------------------------------------------

def loaders_vs_ceiling(ctx: Context, out: Path) -> Plot:
    plot = Plot("loaders_by_backend", "Loaders grouped by backend, against the raw ceiling and the peers",
                "Samples/s per loader (median, bars min..max), grouped by the backend it reads, one panel per RTT. "
                "Dashed black lines: the backend's raw ceiling (the best plain client loop, no framework), "
                "when ceiling results are available; the label on a bar is its fraction of that ceiling.")
    data = _usable(ctx.baseline(ctx.summary), "samples_per_s")
    if data.empty:
        plot.note = "no successful runs: nothing to plot"
        return plot
    rtts = ctx.values("rtt_ms", data)
    shown = rtts if len(rtts) <= 6 else [rtts[0], rtts[len(rtts) // 2], rtts[-1]]
    groups = ctx.series(data)
    backends = list(dict.fromkeys(str(rows["backend"].iloc[0]) for rows in groups.values()))
    width = min(20.0, max(6.0, 1.2 + 0.5 * len(groups)))
    ncols = min(max(1, int(20 // width)), 3, len(shown))
    nrows = math.ceil(len(shown) / ncols)
    fig = _figure(width * ncols, 4.6 * nrows)
    axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False, sharey=True).ravel())
    table = []
    for ax, rtt in zip(axes, shown, strict=False):
        position, ticks, tick_labels, centres = 0.0, [], [], []
        ceiling_seen = False
        fastest = data[data["rtt_ms"] == rtt]["samples_per_s_median"].max()
        for backend in backends:
            start = position
            members = {lab: rows for lab, rows in groups.items() if rows["backend"].iloc[0] == backend}
            bars = {}
            for label, rows in members.items():
                at = rows[rows["rtt_ms"] == rtt]
                if at.empty:
                    continue
                median, yerr = _errors(at, "samples_per_s")
                ax.bar(position, median[0], width=0.8, yerr=yerr, capsize=3, color=ctx.colour(label.split(" [")[0]),
                       edgecolor="black", linewidth=0.4)
                ceiling = ctx.ceilings.of(backend, rtt, at["concurrency"].iloc[0] if "concurrency" in at else None) \
                    if ctx.ceilings else float("nan")
                bars[label] = (position, float(median[0]), float(median[0] + yerr[1][0]), ceiling)
                ticks.append(position)
                tick_labels.append(label)
                position += 1
            if not bars:
                continue
            ceilings = [c for *_, c in bars.values() if math.isfinite(c)]
            for x, _, _, ceiling in bars.values():
                if math.isfinite(ceiling):
                    ax.hlines(ceiling, x - 0.45, x + 0.45, colors="black", linestyles="--", linewidth=1.4,
                              label=None if ceiling_seen else "raw ceiling")
                    ceiling_seen = True
            for label, (x, value, top, ceiling) in bars.items():
                peers = [v for other, (_, v, _, _) in bars.items() if other != label]
                ratio = value / ceiling if math.isfinite(ceiling) and ceiling > 0 else float("nan")
                if math.isfinite(ratio):
                    ax.annotate(f"{ratio:.2f}×", (x, top), textcoords="offset points", xytext=(0, 2),
                                ha="center", va="bottom", fontsize=7)
                table.append({"loader": label, "backend": backend, "rtt_ms": rtt, "samples_per_s": value,
                              "vs best same-backend peer": value / max(peers) if peers and max(peers) > 0
                              else float("nan"),
                              "vs fastest loader at this RTT": value / fastest if fastest > 0 else float("nan"),
                              "ceiling samples/s": ceiling, "ratio to ceiling": ratio})
            centres.append(((start + position - 1) / 2, backend))
            if ceilings or len(backends) > 1:
                ax.axvline(position - 0.25, color="0.8", linewidth=0.8)
            position += 0.5
        top_axis = ax.secondary_xaxis("top")
        top_axis.set_xticks([c for c, _ in centres], labels=[b for _, b in centres], fontsize=8, style="italic")
        top_axis.tick_params(length=0)
        ax.set_xticks(ticks)
        ax.set_xticklabels(tick_labels, rotation=30, ha="right", fontsize=8)
        log_y = _log_y_if_wide(ax, data["samples_per_s_median"])
        ax.set_ylabel("samples/s" + (" (log)" if log_y else ""))
        ax.set_title(f"RTT {rtt:g} ms", fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
        if ceiling_seen:
            if not log_y:
                ax.set_ylim(top=ax.get_ylim()[1] * 1.12)  # room for the legend above the ceiling lines
            ax.legend(fontsize=7, loc="upper right")
    for ax in axes[len(shown):]:
        ax.set_visible(False)
    plot.path = _save(fig, ctx, out, plot.name)
    notes = [_slice_text(ctx)]
    if ctx.ceilings is None:
        notes.append("No ceiling rows were found (in this folder or in ../bench-loaders/*.json): run "
                     "`workbench bench loaders` for ratios to each backend's raw ceiling.")
    else:
        notes.append(f"Ceilings from {ctx.ceilings.source}" + (f", {ctx.ceilings.note}" if ctx.ceilings.note else "")
                     + ": possibly measured on other data than this sweep.")
    if len(shown) < len(rtts):
        notes.append(f"Showing {len(shown)} of {len(rtts)} RTTs.")
    plot.note = " ".join(n for n in notes if n)
    if table:
        plot.tables.append(("Each loader against its peers and its backend's ceiling",
                            pd.DataFrame(table).sort_values(["rtt_ms", "backend", "loader"], kind="stable")))
    return plot


ALL_PLOTS = (throughput_vs_rtt, throughput_vs_shard_size, latency_cdfs, accelerator_utilisation, loaders_vs_ceiling)
