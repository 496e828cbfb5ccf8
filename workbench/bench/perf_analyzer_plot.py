"""The plot of a perf_analyzer sweep (`workbench.bench.perf_analyzer`): throughput and latency per batch size.

Three panels: inferences/s against requests in flight (one line per model and batch size); latency p50
(solid), p90 (dashed) and p99 (dotted) against requests in flight; where the p50 request's time goes at
each point (the model's server queue, compute input/infer/output, and the rest: network, send and receive,
and for an ensemble the waits between its steps, which Triton counts in the composing models' queues, not
the ensemble's), so waiting that grows with concurrency is told apart from compute that does.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from workbench.errors import WorkbenchError
from workbench.results import write_atomically

_SHORT = {"ensemble": "ens", "cass_to_inference": "c2i"}
_PARTS = (("server_queue_ms", "server queue"), ("server_compute_input_ms", "compute input"),
          ("server_compute_infer_ms", "compute infer"), ("server_compute_output_ms", "compute output"))


def _series(rows: Sequence[dict]) -> dict[tuple[str, int], list[dict]]:
    series: dict[tuple[str, int], list[dict]] = {}
    for row in rows:
        series.setdefault((str(row["model"]), int(row["batch_size"])), []).append(row)
    return {key: sorted(points, key=lambda r: r["concurrency"]) for key, points in sorted(series.items())}


def plot_perf_analyzer(rows: Sequence[dict], out: Path, title: str | None = None) -> Path:
    """Draw `rows` (tidy rows of `sweep_perf_analyzer`, one or more models) into the PNG `out`."""
    if not rows:
        raise WorkbenchError("no perf_analyzer rows to plot: run the sweep first")
    series = _series(rows)
    figure = Figure(figsize=(15, 4.4), layout="constrained")
    FigureCanvasAgg(figure)
    throughput, latency, parts = figure.subplots(1, 3)
    colours = {key: f"C{i % 10}" for i, key in enumerate(series)}
    for key, points in series.items():
        label = f"{key[0]}, batch {key[1]}"
        x = [p["concurrency"] for p in points]
        throughput.plot(x, [p["inferences_per_s"] for p in points], marker="o", color=colours[key], label=label)
        for metric, style in (("latency_ms_p50", "-"), ("latency_ms_p90", "--"), ("latency_ms_p99", ":")):
            latency.plot(x, [p[metric] for p in points], style, marker="o", markersize=3, color=colours[key],
                         label=label if metric == "latency_ms_p50" else None)
    throughput.set(xlabel="requests in flight (perf_analyzer concurrency)", ylabel="inferences/s",
                   title="throughput")
    latency.set(xlabel="requests in flight", ylabel="latency (ms)", title="latency p50 — / p90 -- / p99 ···")
    labels, bottoms = [], []
    flat = [p for points in series.values() for p in points]
    for row in flat:
        labels.append(f"{_SHORT.get(row['model'], row['model'])} b{row['batch_size']} c{row['concurrency']}")
        bottoms.append(0.0)
    for i, (column, name) in enumerate(_PARTS):
        heights = [float(row.get(column, 0.0)) for row in flat]
        parts.bar(range(len(flat)), heights, bottom=bottoms, color=f"C{i}", label=name)
        bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
    rest = [max(0.0, float(row["latency_ms_p50"]) - b) for row, b in zip(flat, bottoms, strict=True)]
    parts.bar(range(len(flat)), rest, bottom=bottoms, color="0.75",
              label="rest of p50: network, client, waits inside the ensemble")
    parts.set_xticks(range(len(flat)), labels, rotation=60, ha="right", fontsize=7)
    parts.set(ylabel="ms", title="server time (means) within the p50 request")
    for axis in (throughput, latency, parts):
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    for axis in (throughput, latency):
        axis.set_xscale("log", base=2)
    environment = rows[0].get("environment") or {}
    machine = f"{environment.get('cpu', '?')} ({environment.get('cpu_count', '?')} cores)" if environment else ""
    figure.suptitle(title or f"Triton perf_analyzer, {rows[0].get('protocol', '')}"
                    f"{'; ' + machine if machine else ''}", fontsize=9)
    out.parent.mkdir(parents=True, exist_ok=True)
    return write_atomically(out, lambda tmp: figure.savefig(tmp, dpi=110, format="png"))
