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
from workbench.report import little
from workbench.report.data import STARTUP_LIMIT, Context, is_local_backend, is_missing

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


def new_figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig: Figure, ctx: Context, out: Path, name: str) -> Path:
    fig.text(0.0, 0.0, textwrap.fill(ctx.caption(), 150), fontsize=7, color="0.3", ha="left", va="top",
             transform=fig.transFigure)
    path = out / f"{name}.png"
    fig.savefig(path, dpi=100, bbox_inches="tight", pad_inches=0.15)
    return path


def place_legend(fig: Figure, axes: Any, inside: int = 10, **options: Any) -> None:
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
    for column, value in ctx.setup(accelerators=compute):
        if len(ctx.values(column)) > 1:
            name = "emulated accelerators" if column == "accelerators" else column.removeprefix("topology_")
            parts.append(f"{name} {_fmt_tick(value) if isinstance(value, int | float) else value}")
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


def _rates(ctx: Context, plot: Plot) -> tuple[pd.DataFrame, list]:
    """The baseline points with a median samples/s and their RTTs; when there are none, the plot's note says so."""
    data = _usable(ctx.baseline(ctx.summary), "samples_per_s")
    if data.empty:
        plot.note = "no successful runs: nothing to plot"
    return data, ctx.values("rtt_ms", data)


# --- 1. throughput vs RTT ------------------------------------------------------------------------------

AUTO_MARKER = "*"


def _is_auto(rows: pd.DataFrame) -> bool:
    return "concurrency" in rows.columns and bool(len(rows)) and rows["concurrency"].astype(str).eq("auto").all()


def throughput_vs_rtt(ctx: Context, out: Path) -> Plot:
    plot = Plot("throughput_vs_rtt", "Throughput vs round-trip time",
                "Samples/s (median over repetitions, bars from min to max) against the RTT toxiproxy adds to every "
                "request. Dashed: Little's law, at most (requests in flight x samples per request) / RTT, in the "
                "colour of the line it bounds (grey when it bounds several); dotted with crosses: the backend's "
                "native ceiling measured in this run; stars: concurrency 'auto' (w = the window it settled on). "
                "Below, each line's rate as a fraction of its own 0 ms rate. One panel per loader when the sweep "
                "varies a loader knob.")
    data, rtts = _rates(ctx, plot)
    if data.empty:
        return plot
    groups = ctx.series(data)
    loaders = list(dict.fromkeys(str(rows["loader"].iloc[0]) for rows in groups.values()))
    per_loader = len(loaders) > 1 and len(groups) > len(loaders)
    panels = [{k: v for k, v in groups.items() if v["loader"].iloc[0] == loader} for loader in loaders] \
        if per_loader else [groups]
    ncols = min(3, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    fig = new_figure(9 if not per_loader else 5.4 * ncols, 7.5 if not per_loader else 6.2 * nrows)
    figures = list(np.atleast_1d(fig.subfigures(nrows, ncols, squeeze=False).ravel())) if per_loader else [fig]
    windows = _auto_windows(ctx)
    base_rtt = 0.0 if 0.0 in rtts else rtts[0]
    drawn, axis_note, ceiling_missing = [], "", []
    for sub, members in zip(figures, panels, strict=False):
        ax, ratio_ax = sub.subplots(2, 1, sharex=True, height_ratios=[3, 2])
        styles = _variant_styles(members) if per_loader else _styles(ctx, list(members))
        for label, rows in members.items():
            rows = rows.sort_values("rtt_ms")
            median, yerr = _errors(rows, "samples_per_s")
            style = dict(styles[label])
            if _is_auto(rows):
                style.update(marker=AUTO_MARKER, markersize=11)
            name = _knobs_only(label) if per_loader else label
            ax.errorbar(rows["rtt_ms"], median, yerr=yerr, capsize=3, label=name, **style)
            for rtt, value in zip(rows["rtt_ms"], median, strict=True):
                if (label, rtt) in windows:
                    ax.annotate(f"w={windows[label, rtt]:g}", (rtt, value), textcoords="offset points",
                                xytext=(5, 4), fontsize=7, color=style["color"])
            base = rows[rows["rtt_ms"] == base_rtt]["samples_per_s_median"]
            if len(base) and base.iloc[0] > 0:
                ratio_ax.plot(rows["rtt_ms"], median / base.iloc[0], **style)
        axis_note = _rtt_axis(ratio_ax, rtts)
        ceiling_missing += _ceiling_lines(ctx, ax, pd.concat(members.values()), rtts,
                                          colour=None if not per_loader else "black")
        if per_loader:
            ax.set_title(str(next(iter(members.values()))["loader"].iloc[0]), fontsize=11)
        ratio_ax.axhline(1.0, color="0.5", linewidth=0.8)
        ratio_ax.set_ylabel(f"ratio to own {base_rtt:g} ms rate")
        ratio_ax.set_xlabel("RTT added by toxiproxy (ms)" + (", symlog" if "symlog" in axis_note else ""))
        ratio_ax.grid(True, alpha=0.3)
        drawn.append((ax, members, styles))
    bottom = min(a.get_ylim()[0] for a, _, _ in drawn)
    top = max(a.get_ylim()[1] for a, _, _ in drawn)
    log_y = _log_y_if_wide(drawn[0][0], [*data["samples_per_s_median"], bottom, top])
    texts, hidden = [], []
    for ax, members, styles in drawn:
        if log_y:
            ax.set_yscale("log")
        ax.set_ylim(*(ax.get_ylim() if not per_loader else (max(bottom, 1e-3) if log_y else bottom, top)))
        found_texts, found_hidden = _little_lines(ctx, ax, members, styles, rtts)
        texts += found_texts
        hidden += found_hidden
        ax.set_ylabel("samples/s" + (" (log)" if log_y else ""))
        ax.grid(True, alpha=0.3)
        if per_loader:
            ax.legend(fontsize=7, loc="lower left")
    if not per_loader:
        drawn[0][0].set_title(f"Throughput vs RTT: median of {_reps(ctx)} run(s), bars min..max")
        place_legend(fig, drawn[0][0], inside=14)
    else:
        fig.suptitle(f"Throughput vs RTT per loader: median of {_reps(ctx)} run(s), bars min..max")
    plot.path = save_figure(fig, ctx, out, plot.name)
    bound_note = ("Little's-law lines: " + "; ".join(texts) + ". ") if texts else ""
    bound_note += "A request is, per loader: " + little.describe(loaders) + "."
    if hidden:
        bound_note += f" Above the plotted range everywhere (not binding here): {', '.join(hidden)}."
    ceiling_note = _ceiling_note(ctx, sorted(set(ceiling_missing)))
    plot.note = " ".join(n for n in (_slice_text(ctx), axis_note + "." if axis_note else "", _local_note(ctx, data),
                                     bound_note, ceiling_note) if n)
    if base_rtt != 0.0:
        plot.note += f" The sweep has no 0 ms point: ratios are to each loader's {base_rtt:g} ms rate."
    return plot


def _knobs_only(label: str) -> str:
    return label.split(" [", 1)[1].rstrip("]") if " [" in label else label


def _variant_styles(members: dict[str, pd.DataFrame]) -> dict[str, dict]:
    """Within one loader's panel: a colour and marker per variant (concurrency 8, 32, ...)."""
    import matplotlib

    palette = matplotlib.colormaps["tab10"]
    return {label: {"color": palette(i % 10), "linestyle": "-", "marker": MARKERS[i % len(MARKERS)]}
            for i, label in enumerate(members)}


def _auto_windows(ctx: Context) -> dict[tuple[str, float], float]:
    """(line label, RTT) -> the median final window of the 'auto' runs there (the depth auto settled on)."""
    runs = ctx.baseline(ctx.ok)
    if "window" not in runs.columns or "concurrency" not in runs.columns:
        return {}
    out = {}
    for label, rows in ctx.series(runs).items():
        if not _is_auto(rows):
            continue
        for rtt, at in rows.groupby("rtt_ms"):
            window = pd.to_numeric(at["window"], errors="coerce").median()
            if math.isfinite(window):
                out[label, float(rtt)] = float(window)
    return out


def _little_lines(ctx: Context, ax: Any, groups: dict[str, pd.DataFrame], styles: dict[str, dict],
                  rtts: list[float]) -> tuple[list[str], list[str]]:
    """One dashed line per distinct samples-in-flight W·k, y = W·k / RTT, in the colour of the line it bounds
    (grey when several share it); returns what each line is and which are above the plotted range."""
    positive = [r for r in rtts if r > 0]
    bounds: dict[float, tuple[little.Bound, list[str]]] = {}
    for label, rows in groups.items():
        found = little.bound(_point_row(ctx, rows.iloc[0]))
        if found is not None and positive:
            bounds.setdefault(found.samples_in_flight, (found, []))[1].append(label)
    bottom, top = ax.get_ylim()
    x = np.geomspace(min(positive), max(positive), 200) if positive else np.array([])
    texts, hidden, labelled = [], [], False
    for samples, (found, labels) in sorted(bounds.items()):
        y = samples / (x / 1000)
        words = f"{found.in_flight} in flight x {found.per_request:g} sample(s) per request"
        texts.append(f"{words} ({', '.join(labels)}): {samples:g} samples / RTT")
        if y[-1] > top:
            hidden.append(f"{samples:g} samples / RTT")
            continue
        colour = styles[labels[0]]["color"] if len(labels) == 1 else "0.45"
        ax.plot(x, y, color=colour, linestyle=(0, (5, 3)), linewidth=1.1,
                marker="_" if len(x) and x[0] == x[-1] else None, markersize=18)
        if not labelled:  # one grey legend entry for all the bounds
            ax.plot([], [], color="0.45", linestyle=(0, (5, 3)), linewidth=1.1, label="Little's law: W x k / RTT")
            labelled = True
        visible = np.flatnonzero(y <= top)
        at = x[visible[0]] if len(visible) else x[-1]
        ax.annotate(f"{found.in_flight}x{found.per_request:g}/RTT", (at, min(samples / (at / 1000), top)),
                    textcoords="offset points", xytext=(3, -9), fontsize=7, color=colour)
    ax.set_ylim(bottom, top)
    return texts, hidden


def _point_row(ctx: Context, row: pd.Series) -> dict:
    """A summary row plus the data description the bound needs (count, mean size: config, else the runs)."""
    data = ctx.config.get("data", {}) if isinstance(ctx.config.get("data"), dict) else {}
    out = dict(row)
    for column, key in (("data_count", "count"), ("data_mean_kb", "mean_kb")):
        if key in data:
            out.setdefault(column, data[key])
        elif column in ctx.runs.columns:
            out.setdefault(column, ctx.runs[column].dropna().iloc[0] if ctx.runs[column].notna().any() else None)
    return out


def _ceiling_lines(ctx: Context, ax: Any, data: pd.DataFrame, rtts: list[float], colour: Any = None) -> list[str]:
    """Each backend's native ceiling against RTT, when measured in this run; returns the backends without one."""
    backends = list(dict.fromkeys(data["backend"].astype(str)))
    if ctx.ceilings is None or not ctx.ceilings.in_run:
        return backends
    missing = []
    for backend in backends:
        first = data[data["backend"].astype(str) == backend].iloc[0].to_dict()
        values = [ctx.ceilings.of(backend, rtt, point={**first, "rtt_ms": rtt}) for rtt in rtts]
        if not any(math.isfinite(v) for v in values):
            missing.append(backend)
            continue
        program = ctx.ceilings.program(backend)
        ax.plot(rtts, values, color=colour or ctx.colour(backend), linestyle=":", linewidth=1.2, marker="x",
                markersize=7, label=f"ceiling: {backend}" + (f" ({program})" if program else ""))
    return missing


def _ceiling_note(ctx: Context, missing: list[str]) -> str:
    if ctx.ceilings is None or not ctx.ceilings.in_run:
        other = f" (ceilings of another run, {ctx.ceilings.source}, are in the by-backend plot)" if ctx.ceilings \
            else ""
        return f"This sweep measured no native ceilings (no ceiling:<backend> rows){other}."
    return "Native ceilings measured in this run" + (f"; none for {', '.join(missing)}." if missing else ".")


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
    fig = new_figure(6.5 * len(dims), 5)
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
    place_legend(fig, axes, inside=12)
    plot.path = save_figure(fig, ctx, out, plot.name)
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
    fig = new_figure(6.2 * ncols, 4.4 * nrows)
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
        place_legend(fig, axes[:len(shown)], inside=0)
    if not drawn:
        plot.note = "the successful runs recorded no batch latencies: nothing to plot"
        return plot
    plot.path = save_figure(fig, ctx, out, plot.name)
    extra = f"Showing the lowest and highest of {len(rtts)} RTTs." if len(shown) < len(rtts) else ""
    plot.note = " ".join(n for n in (extra, _slice_text(ctx)) if n)
    return plot


# --- 3b. start-up vs steady state ----------------------------------------------------------------------

def startup_flags(ctx: Context) -> pd.DataFrame:
    """Points whose start-up (time to first batch) is >= STARTUP_LIMIT of their measured time, with the note the
    sweep recorded; their rates include connection set-up, not only steady reading."""
    summary = ctx.summary
    if "startup_fraction_median" not in summary.columns:
        return summary.iloc[0:0]
    flagged = summary[summary["startup_fraction_median"] >= STARTUP_LIMIT]
    columns = [c for c in ("point_id", "loader", "backend", "rtt_ms", "bandwidth_mbps", "concurrency", "accelerators",
                           "shard_maxcount", "compute_ms") if c in flagged.columns and len(ctx.values(c)) > 0]
    out = flagged[columns].copy()
    metric = {"time_to_first_batch_s_median": "TTFB s", "startup_fraction_median": "start-up share",
              "samples_per_s_median": "samples/s", "steady_samples_per_s_median": "steady samples/s"}
    for column, header in metric.items():
        if column in flagged.columns:
            out[header] = flagged[column]
    if "startup_note" in ctx.ok.columns and "point_id" in flagged.columns:
        notes = ctx.ok.groupby("point_id")["startup_note"].agg(  # the first repetition's that has one
            lambda v: next((n for n in v if isinstance(n, str) and n), ""))
        out["note"] = flagged["point_id"].map(notes).fillna("")
    return out.reset_index(drop=True)


def startup(ctx: Context, out: Path) -> Plot:
    plot = Plot("startup", "Start-up vs steady state",
                "Left: time to the first batch (connection set-up, listing, the first round trips). Right: that "
                f"start-up as a share of the run's measured time; at or above the {STARTUP_LIMIT:.0%} line a point's "
                "rate says more about start-up than about steady reading (ringed, and listed below).")
    data = _usable(ctx.baseline(ctx.summary), "startup_fraction")
    if data.empty:
        plot.note = "skipped: these results record no time to first batch."
        return plot
    rtts = ctx.values("rtt_ms", data)
    fig = new_figure(12, 4.6)
    ttfb_ax, share_ax = fig.subplots(1, 2, sharex=True)
    groups = ctx.series(data)
    styles = _styles(ctx, list(groups))
    for label, rows in groups.items():
        rows = rows.sort_values("rtt_ms")
        if "time_to_first_batch_s_median" in rows.columns:
            median, yerr = _errors(rows, "time_to_first_batch_s")
            ttfb_ax.errorbar(rows["rtt_ms"], median, yerr=yerr, capsize=3, label=label, **styles[label])
        share = rows["startup_fraction_median"].to_numpy(dtype=float) * 100
        share_ax.plot(rows["rtt_ms"], share, **styles[label])
        high = share >= STARTUP_LIMIT * 100
        share_ax.plot(rows["rtt_ms"][high], share[high], linestyle="none", marker="o", markersize=13,
                      markerfacecolor="none", markeredgecolor="red", markeredgewidth=1.3)
    share_ax.axhline(STARTUP_LIMIT * 100, color="red", linestyle="--", linewidth=1,
                     label=f"{STARTUP_LIMIT:.0%} of measured time")
    for ax in (ttfb_ax, share_ax):
        note = _rtt_axis(ax, rtts)
        ax.set_xlabel("round-trip time added by toxiproxy (ms)")
        ax.grid(True, alpha=0.3)
    log_y = _log_y_if_wide(ttfb_ax, data.get("time_to_first_batch_s_median", pd.Series(dtype=float)))
    ttfb_ax.set_ylabel("time to first batch (s" + (", log)" if log_y else ")"))
    share_ax.set_ylabel("start-up share of measured time (%)")
    share_ax.set_ylim(bottom=0)
    place_legend(fig, [ttfb_ax, share_ax], inside=12)
    plot.path = save_figure(fig, ctx, out, plot.name)
    flagged = startup_flags(ctx)
    total = len(_usable(ctx.summary, "startup_fraction"))
    plot.note = " ".join(n for n in (
        f"{len(flagged)} of {total} point(s) spent >= {STARTUP_LIMIT:.0%} of their measured time starting up."
        if total else "", _slice_text(ctx), note + "." if note else "") if n)
    if len(flagged):
        plot.tables.append((f"Points whose start-up is >= {STARTUP_LIMIT:.0%} of the measured time", flagged))
    return plot


# --- 4. accelerator utilisation vs emulated accelerators -----------------------------------------------

def accelerator_utilisation(ctx: Context, out: Path) -> Plot:
    """Measured AU against N when the sweep ran N emulated accelerators at once; else the formula's estimate."""
    if not measured_au_rows(ctx).empty:
        return measured_accelerator_utilisation(ctx, out)
    return estimated_accelerator_utilisation(ctx, out)


def measured_au_rows(ctx: Context) -> pd.DataFrame:
    frame = ctx.at_layout(ctx.summary, accelerators=False)
    if "accelerators" not in frame.columns:
        return frame.iloc[0:0]
    frame = _usable(frame[frame["accelerators"].notna()], "au_min")
    return frame


def largest_n(rows: pd.DataFrame, target: float = TARGET_AU) -> float:
    """The largest N whose AU (the least busy accelerator's, median over repetitions) is >= target; 0 if none."""
    ok = rows[rows["au_min_median"] >= target - 1e-9]
    return float(ok["accelerators"].max()) if len(ok) else 0.0


def measured_accelerator_utilisation(ctx: Context, out: Path) -> Plot:
    plot = Plot("accelerator_utilisation", "Accelerator utilisation vs number of emulated accelerators (measured)",
                "N emulated accelerators ran at once, each taking batches from the one loader and computing for "
                "c ms per batch; AU = compute time / wall time per accelerator, its first step excluded (DLIO, "
                "MLPerf Storage). Solid: the least busy accelerator (au_min, median over repetitions, bars "
                f"min..max); dotted: the mean over the N. The grey line is the {TARGET_AU:.0%} target.")
    frame = measured_au_rows(ctx)
    rtts = ctx.values("rtt_ms", frame)
    computes = ctx.values("compute_ms", frame) or [None]
    shown = rtts if len(rtts) <= 4 else [rtts[0], rtts[-1]]
    ncols = min(2, len(shown))
    fig = new_figure(6.2 * ncols, 4.6 * math.ceil(len(shown) / ncols))
    axes = np.atleast_1d(fig.subplots(math.ceil(len(shown) / ncols), ncols, squeeze=False, sharey=True).ravel())
    groups = ctx.series(frame, exclude=("accelerators",))
    styles = _styles(ctx, list(groups))
    ns = ctx.values("accelerators", frame)
    table = []
    for ax, rtt in zip(axes, shown, strict=False):
        for label, rows in groups.items():
            for ci, compute in enumerate(computes):
                line = rows[rows["rtt_ms"] == rtt]
                if compute is not None:
                    line = line[line["compute_ms"] == compute]
                line = line.sort_values("accelerators")
                if line.empty:
                    continue
                name = label + (f", c = {compute:g} ms" if len(computes) > 1 else "")
                median, yerr = _errors(line, "au_min")
                style = {**styles[label], "linestyle": LINESTYLES[ci % len(LINESTYLES)]}
                ax.errorbar(line["accelerators"], median * 100, yerr=yerr * 100, capsize=3, label=name, **style)
                if "au_mean_median" in line.columns:
                    ax.plot(line["accelerators"], line["au_mean_median"] * 100, color=style["color"], linestyle=":",
                            linewidth=0.9, marker=".")
        ax.axhline(TARGET_AU * 100, color="0.3", linestyle=":", linewidth=1.2, label=f"{TARGET_AU:.0%} target")
        ax.set_xscale("log", base=2)
        ax.set_xticks(ns)
        ax.xaxis.set_major_formatter(FuncFormatter(_fmt_tick))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_ylim(0, 105)
        ax.set_xlabel("emulated accelerators N running at once (log2)")
        ax.set_ylabel("accelerator utilisation (%)")
        ax.set_title(f"RTT {rtt:g} ms" + (f", c = {computes[0]:g} ms/batch" if len(computes) == 1
                                          and computes[0] is not None else ""), fontsize=10)
        ax.grid(True, alpha=0.3)
    for ax in axes[len(shown):]:
        ax.set_visible(False)
    for label, rows in groups.items():
        for (rtt, compute), line in rows.groupby(["rtt_ms", "compute_ms"] if "compute_ms" in rows else ["rtt_ms"]):
            best = largest_n(line)
            at_best = line[line["accelerators"] == best] if best else line.nsmallest(1, "accelerators")
            table.append({"loader": label, "rtt_ms": rtt, "compute_ms": compute,
                          f"largest N with AU >= {TARGET_AU:.0%}": int(best) if best else "none",
                          "AU (least busy) there" if best else "AU (least busy) at smallest N":
                              float(at_best["au_min_median"].iloc[0]),
                          "N measured": "/".join(_fmt_tick(n) for n in sorted(line["accelerators"]))})
    place_legend(fig, axes[:len(shown)], inside=12, loc="lower left")
    plot.path = save_figure(fig, ctx, out, plot.name)
    extra = f"Showing the lowest and highest of {len(rtts)} RTTs." if len(shown) < len(rtts) else ""
    plot.note = " ".join(n for n in (extra, _slice_text(ctx, compute=False)) if n)
    frame_table = pd.DataFrame(table).sort_values(["rtt_ms", "loader"], kind="stable")
    plot.tables.append((f"Largest N with AU >= {TARGET_AU:.0%} per loader (measured)", frame_table))
    return plot


def estimated_accelerator_utilisation(ctx: Context, out: Path) -> Plot:
    plot = Plot("accelerator_utilisation",
                "Accelerator utilisation vs number of emulated accelerators (estimate, not measured)",
                "An ESTIMATE, because this sweep ran no N accelerators at once. From each loader's compute-free "
                "batch rate R (batches/s, runs with compute_ms = 0) and a compute "
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
    fig = new_figure(6.2 * len(shown), 4.8)
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
    place_legend(fig, axes, inside=12, loc="upper right")
    plot.path = save_figure(fig, ctx, out, plot.name)
    plot.note = " ".join(n for n in ("; ".join(notes) + ("." if notes else ""), _slice_text(ctx, compute=False)) if n)
    if table:
        frame = pd.DataFrame(table).sort_values(["rtt_ms", "loader", "compute_ms"], kind="stable")
        plot.tables.append(("Estimated emulated accelerators kept at >= 90% AU (formula, not measured)", frame))
    return plot


# --- 5. loaders vs their backend's ceiling and vs their peers ------------------------------------------

def loaders_vs_ceiling(ctx: Context, out: Path) -> Plot:
    plot = Plot("loaders_by_backend", "Loaders grouped by backend, against the native ceiling and the peers",
                "Samples/s per loader (median, bars min..max), grouped by the backend it reads, one panel per RTT. "
                "Dashed black lines: the backend's native ceiling (a compiled client program, or the plainest "
                "client loop where none exists), measured in the same run when the sweep has ceiling rows; the "
                "label on a bar is its fraction of that ceiling.")
    data, rtts = _rates(ctx, plot)
    if data.empty:
        return plot
    shown = rtts if len(rtts) <= 6 else [rtts[0], rtts[len(rtts) // 2], rtts[-1]]
    groups = ctx.series(data)
    backends = list(dict.fromkeys(str(rows["backend"].iloc[0]) for rows in groups.values()))
    width = min(20.0, max(6.0, 1.2 + 0.5 * len(groups)))
    ncols = min(max(1, int(20 // width)), 3, len(shown))
    nrows = math.ceil(len(shown) / ncols)
    fig = new_figure(width * ncols, 4.6 * nrows)
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
                ax.bar([position], [median[0]], width=0.8, yerr=yerr.tolist(), capsize=3,
                       color=ctx.colour(label.split(" [")[0]), edgecolor="black", linewidth=0.4)
                ceiling = ctx.ceilings.of(backend, rtt, point=at.iloc[0].to_dict()) if ctx.ceilings \
                    else float("nan")
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
                              label=None if ceiling_seen else _ceiling_label(ctx))
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
    plot.path = save_figure(fig, ctx, out, plot.name)
    notes = [_slice_text(ctx)]
    if ctx.ceilings is None:
        notes.append("This sweep has no ceiling rows and no other ceiling result was found (../bench-loaders/*.json):"
                     " run the sweep with `ceilings: true` for ratios to each backend's native ceiling.")
    elif ctx.ceilings.in_run:
        lacking = sorted(set(backends) - set(ctx.ceilings.backends))
        notes.append("Ceilings measured in this run, at the same network points"
                     + (f"; none for {', '.join(lacking)}" if lacking else "") + ".")
    else:
        notes.append("This sweep has no ceiling rows: the dashed lines are ceilings of ANOTHER run, "
                     f"{ctx.ceilings.source}" + (f" ({ctx.ceilings.note})" if ctx.ceilings.note else "")
                     + ", on other data at another time; the ratios are indicative only.")
    if len(shown) < len(rtts):
        notes.append(f"Showing {len(shown)} of {len(rtts)} RTTs.")
    plot.note = " ".join(n for n in notes if n)
    if table:
        plot.tables.append(("Each loader against its peers and its backend's ceiling",
                            pd.DataFrame(table).sort_values(["rtt_ms", "backend", "loader"], kind="stable")))
    if ctx.ceilings is not None and ctx.ceilings.in_run:
        plot.tables.append(("Native ceilings measured in this run (median, min, max over repetitions)",
                            ctx.ceilings.table()))
    return plot


def _ceiling_label(ctx: Context) -> str:
    return "native ceiling, this run" if ctx.ceilings is not None and ctx.ceilings.in_run \
        else "ceiling of another run"


ALL_PLOTS = (throughput_vs_rtt, throughput_vs_shard_size, latency_cdfs, startup, accelerator_utilisation,
             loaders_vs_ceiling)
