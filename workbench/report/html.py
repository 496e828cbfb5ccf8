"""One self-contained HTML page: figures embedded as base64 PNG (and linked to their files), tables, errors.

The stylesheet is written once here (`_CSS`) and embedded in every page the report package writes (the report,
results/index.html, the repeatability page) as one compact line (`STYLE`, `page_head`): each page still opens on
its own, wherever it is copied. The run's config.json and environment.json are linked, not copied into the page;
the page says what varies and on which machine.
"""

from __future__ import annotations

import base64
import math
import numbers
from html import escape
from typing import Any

import numpy as np
import pandas as pd

from workbench.bench.points import AXES
from workbench.report.data import STARTUP_LIMIT, TOPOLOGY_PREFIX, Context, is_missing
from workbench.report.plots import Plot

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 1400px;
       color: #222; padding: 0 1em; }
h1 { margin-bottom: 0.2em; } h2 { border-bottom: 1px solid #ccc; padding-bottom: 0.2em; margin-top: 2em; }
.caption { color: #555; font-size: 0.9em; } .note { color: #7a5a00; font-size: 0.9em; }
figure { margin: 1em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { font-size: 0.9em; color: #444; max-width: 1000px; }
table { border-collapse: collapse; font-size: 0.82em; margin: 0.8em 0; }
th, td { border: 1px solid #ddd; padding: 3px 6px; text-align: right; white-space: nowrap; }
th { background: #f3f3f3; position: sticky; top: 0; } td.text, th.text { text-align: left; }
td.error { text-align: left; white-space: normal; max-width: 700px; font-family: monospace; }
tr:nth-child(even) td { background: #fafafa; }
.failed { color: #a00; } td.warn { background: #fff1d6 !important; }
.question { font-size: 1.1em; }
"""
STYLE = " ".join(line.strip() for line in _CSS.splitlines() if line.strip())  # one line in every page


def page_head(title: str, extra_css: str = "") -> str:
    """The start of every page up to <body>: charset, title and the stylesheet (plus a page's own rules)."""
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>\n'
            f"<style>{STYLE} {extra_css}</style></head><body>")

# summary column -> header in the all-points table (metric columns: "<metric>_median" etc.)
POINT_METRICS = (
    ("samples_per_s", "samples/s", 1),
    ("mb_per_s", "MB/s", 1),
    ("batch_p50_ms", "p50 ms", 2),
    ("batch_p95_ms", "p95 ms", 2),
    ("batch_p99_ms", "p99 ms", 2),
    ("time_to_first_batch_s", "TTFB s", 3),
    ("steady_samples_per_s", "steady samples/s", 1),
    ("startup_fraction", "start-up share", 3),
    ("first_epoch_samples_per_s", "1st epoch samples/s", 1),
    ("later_epochs_samples_per_s", "later epochs samples/s", 1),
    ("accelerator_utilisation", "AU", 3),
    ("au_min", "AU least busy", 3),
    ("au_mean", "AU mean", 3),
    ("cpu_percent", "CPU %", 0),
    ("peak_rss_mb", "peak RSS MB", 0),
)


def fmt(value: Any, digits: int = 2) -> str:
    """Numbers with `digits` decimals (integers without), thousands separated; missing values as a dash."""
    if is_missing(value):
        return "–"
    if isinstance(value, bool | np.bool_):
        return "yes" if value else "no"
    if isinstance(value, numbers.Number):
        number = float(value)
        if not math.isfinite(number):
            return "–"
        if number.is_integer() and abs(number) < 1e15:
            return f"{int(number):,}"
        return f"{number:,.{max(0, digits)}f}"
    return str(value)


def _cell(value: Any, digits: int = 2, cls: str = "") -> str:
    text = escape(fmt(value, digits))
    if not cls and isinstance(value, str):
        cls = "text"
    return f'<td class="{cls}">{text}</td>' if cls else f"<td>{text}</td>"


def frame_table(frame: pd.DataFrame, digits: int = 2) -> str:
    """A generic table: numbers right-aligned, text left-aligned."""
    head = "".join(f'<th class="{"" if pd.api.types.is_numeric_dtype(frame[c]) else "text"}">{escape(str(c))}</th>'
                   for c in frame.columns)
    body = []
    for row in frame.itertuples(index=False):
        body.append("<tr>" + "".join(_cell(v, digits) for v in row) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _grid_columns(ctx: Context) -> list[tuple[str, str]]:
    """Grid columns worth a column in the points table: always loader/backend/RTT, else those varied."""
    columns = [("point_id", "point"), ("loader", "loader"), ("backend", "backend"), ("rtt_ms", "RTT ms")]
    optional = [(name, a.label) for name, a in AXES.items() if name != "rtt_ms"] + [("jitter_ms", "jitter ms")]
    optional += [("accelerators", "accelerators")] if "accelerators" not in AXES else []
    optional += [(c, c.removeprefix(TOPOLOGY_PREFIX).replace("_", " ")) for c in ctx.topology_columns]
    for column, label in optional:
        varied = len(ctx.values(column)) > 1
        layout = column in AXES and AXES[column].sharded_only and bool(ctx.values(column))
        if varied or layout:
            columns.append((column, label))
    return [(c, label) for c, label in columns if c in ctx.summary.columns]


def axis_text(column: str, value: Any) -> str:
    """A grid value as the tables show it: shard sizes in MB, RTT with one decimal, other numbers whole."""
    if column == "shard_maxsize" and not is_missing(value):
        return f"{float(value) / 1e6:g} MB"
    return fmt(value, 1 if column == "rtt_ms" else 0)


def points_table(ctx: Context) -> str:
    summary = ctx.summary
    grid = _grid_columns(ctx)
    head = [f'<th class="text">{escape(label)}</th>' for _, label in grid]
    head += ["<th>runs ok</th>", "<th>failed</th>"]
    metrics = [(m, label, d) for m, label, d in POINT_METRICS if f"{m}_median" in summary.columns]
    for metric, label, _ in metrics:
        head.append(f"<th>{escape(label)}</th>")
        if metric == "samples_per_s":
            head += ["<th>samples/s min</th>", "<th>samples/s max</th>"]
    rows = []
    for _, row in summary.iterrows():
        cells = []
        for column, _ in grid:
            cells.append(_cell(axis_text(column, row[column]), cls="text"))
        failed = int(row.get("runs_failed", 0) or 0)
        cells += [_cell(int(row.get("runs_ok", 0) or 0), 0), _cell(failed, 0, "failed" if failed else "")]
        for metric, _, digits in metrics:
            value = row[f"{metric}_median"]
            if metric == "startup_fraction" and not is_missing(value) and value >= STARTUP_LIMIT:
                cells.append(f'<td class="warn" title="start-up >= {STARTUP_LIMIT:.0%} of the measured time">'
                             f"{escape(fmt(value, digits))} ⚠</td>")
                continue
            cells.append(_cell(value, digits))
            if metric == "samples_per_s":
                cells += [_cell(row["samples_per_s_min"], digits), _cell(row["samples_per_s_max"], digits)]
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return (f"<table><thead><tr>{''.join(head)}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
            "<p class=\"caption\">Medians over each point's successful repetitions (samples/s also min and max). "
            "TTFB: time to the first measured batch of the first epoch; steady: the rate after the first batch; "
            f"start-up share: TTFB over the measured time (⚠ at or above {STARTUP_LIMIT:.0%}: the rate includes "
            "start-up); AU: accelerator utilisation with emulated compute (least busy and mean of N "
            "accelerators running at once, when measured).</p>")


def failed_table(ctx: Context) -> str:
    failed = ctx.failed
    if failed.empty:
        return "<p>No run failed.</p>"
    columns = [c for c in ("point_id", "repetition", "loader", "backend", "rtt_ms", "bandwidth_mbps",
                           "shard_maxcount", "concurrency", "batch_size", "compute_ms") if c in failed.columns]
    head = "".join(f'<th class="text">{escape(c)}</th>' for c in columns) + '<th class="text">error</th>'
    rows = []
    for _, row in failed.iterrows():
        cells = "".join(_cell(row[c], 0 if c != "rtt_ms" else 1, "text") for c in columns)
        rows.append(f'<tr>{cells}<td class="error">{escape(str(row.get("error", "")))}</td></tr>')
    return (f'<p class="failed">{len(failed)} run(s) failed; they are excluded from every plot and statistic.</p>'
            f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>")


def _figure(plot: Plot) -> str:
    parts = [f'<h2 id="{escape(plot.name)}">{escape(plot.title)}</h2>']
    if plot.path is not None:
        data = base64.b64encode(plot.path.read_bytes()).decode("ascii")
        parts.append(
            f'<figure><img src="data:image/png;base64,{data}" alt="{escape(plot.title)}">'
            f"<figcaption>{escape(plot.description)} "
            f'(<a href="{escape(plot.path.name)}">{escape(plot.path.name)}</a>)</figcaption></figure>'
        )
    if plot.note:
        parts.append(f'<p class="note">{escape(plot.note)}</p>')
    for title, frame in plot.tables:
        parts.append(f"<h3>{escape(title)}</h3>{frame_table(frame)}")
    return "".join(parts)


def setup_section(ctx: Context) -> str:
    """What varies over the sweep, the machine and the packages, and links to the two files that say it all."""
    varied = [(label, ", ".join(axis_text(column, v) for v in ctx.values(column)))
              for column, label in _grid_columns(ctx) if column != "point_id" and len(ctx.values(column)) > 1]
    rows = "".join(f'<tr><td class="text">{escape(label)}</td><td class="text">{escape(values)}</td></tr>'
                   for label, values in varied)
    axes = f"<table><thead><tr><th class=\"text\">varies</th><th class=\"text\">values</th></tr></thead>" \
           f"<tbody>{rows}</tbody></table>" if rows else "<p>Every point has the same setup.</p>"
    env = ctx.environment
    packages = env.get("packages") if isinstance(env.get("packages"), dict) else {}
    machine = [f"Python {env['python']}" if env.get("python") else "", str(env.get("platform") or ""),
               f"{env['memory_gib']} GiB memory" if env.get("memory_gib") else "",
               f"packages: {', '.join(f'{k} {v}' for k, v in packages.items())}" if packages else ""]
    links = [f'<a href="../{name}">{name}</a>' if (ctx.results_dir / name).exists() else f"(no {name})"
             for name in ("config.json", "environment.json")]
    return (f"{axes}<p class=\"caption\">{escape('; '.join(m for m in machine if m))}</p>"
            f"<p>The whole configuration: {links[0]}; the machine: {links[1]}.</p>")


def render(ctx: Context, plots: list[Plot]) -> str:
    runs, failed = len(ctx.runs), len(ctx.failed)
    loaders = ", ".join(ctx.loaders) or "none"
    toc = " · ".join(f'<a href="#{escape(p.name)}">{escape(p.title)}</a>' for p in plots)
    sections = "".join(_figure(p) for p in plots)  # the plots on one line: base64 images are no text to read
    return f"""{page_head(f"workbench sweep {ctx.name}")}
<h1>Sweep {escape(ctx.name)}</h1>
{"".join(f'<p class="failed"><b>{escape(note)}</b></p>' for note in ctx.notes)}
{f'<p class="question">Question: {escape(ctx.question)}</p>' if ctx.question else ""}
<p class="caption">{escape(ctx.caption())}</p>
{"".join(f'<p class="note">{escape(remark)}</p>' for remark in ctx.remarks)}
<p>{runs} run(s) over {len(ctx.summary)} point(s), <span class="{'failed' if failed else ''}">{failed} failed</span>.
Loaders: {escape(loaders)}. Source: <code>{escape(str(ctx.results_dir))}</code>;
per-point statistics in <a href="../summary.csv">summary.csv</a>.</p>
<p>{toc} · <a href="#points">all points</a> · <a href="#failed">failed runs</a> · <a href="#setup">setup</a></p>
{sections}
<h2 id="points">All points</h2>{points_table(ctx)}
<h2 id="failed">Failed runs</h2>{failed_table(ctx)}
<h2 id="setup">Configuration and environment</h2>{setup_section(ctx)}
</body></html>
"""
