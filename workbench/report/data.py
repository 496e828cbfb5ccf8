"""A sweep's results as the report sees them: runs, one summary row per grid point, the slices plotted.

Only runs with status "ok" feed numbers and plots; failed runs are counted per point and listed.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from workbench.backends import BACKENDS, backend_class
from workbench.bench.points import AXES, SERIES_KNOBS
from workbench.errors import WorkbenchError
from workbench.results import PROGRESS_FILE

# Every knob a sweep varies: the point's fields (workbench.bench.points) plus what run_sweep adds per point
# (`accelerators`, N emulated accelerators at once, when the points do not have it as an axis yet).
GRID_COLUMNS = ("loader", "backend", *AXES, *(c for c in ("jitter_ms", "accelerators") if c not in AXES))
TOPOLOGY_PREFIX = "topology_"  # topology columns (settings.topology()); grid columns when a sweep varies them
METRICS = ("samples_per_s", "mb_per_s", "batches_per_s", "first_epoch_samples_per_s", "later_epochs_samples_per_s",
           "time_to_first_batch_s", "steady_samples_per_s", "startup_fraction", "batch_p50_ms", "batch_p95_ms",
           "batch_p99_ms", "accelerator_utilisation", "au_min", "au_mean", "cpu_percent", "peak_rss_mb",
           "workers_peak_rss_mb", "gpu_util_percent")
STATS = ("median", "min", "max")
STARTUP_LIMIT = 0.05  # start-up (time to first batch) at or above this share of the measured time is flagged
NETWORK_COLUMNS = ("rtt_ms", "bandwidth_mbps", "jitter_ms")


def grid_columns(frame: pd.DataFrame) -> list[str]:
    """The grid columns of this frame: GRID_COLUMNS it has, plus the topology columns it varies."""
    keys = [c for c in GRID_COLUMNS if c in frame.columns]
    topology = [c for c in frame.columns if str(c).startswith(TOPOLOGY_PREFIX)
                and frame[c].astype(str).nunique(dropna=False) > 1]
    return keys + topology


def is_local_backend(name: str) -> bool:
    """A backend read with no toxiproxy in between (its descriptor's proxy is None): RTT does not apply to it.

    A name the registry no longer knows (results of an older version) counts as remote.
    """
    return name in BACKENDS and backend_class(name).is_local()
CEILING_PREFIX = "ceiling:"


def summarise(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per grid point: median/min/max of every metric over the point's successful repetitions.

    `runs_ok` and `runs_failed` count the repetitions; a point whose runs all failed keeps its row
    with NaN metrics. Rows are in sweep order (point_id) when the frame has it.
    """
    keys = grid_columns(frame)
    if not keys:
        raise ValueError("no grid columns (loader, rtt_ms, ...) in the results frame")
    data = frame.copy()
    ok = data["status"].eq("ok") if "status" in data.columns else pd.Series(True, index=data.index)
    metrics = [m for m in METRICS if m in data.columns]
    for metric in metrics:
        data[metric] = pd.to_numeric(data[metric], errors="coerce").where(ok)
    data["_ok"], data["_failed"] = ok.astype(int), (~ok).astype(int)
    aggregations: dict[str, tuple[str, str]] = {}
    if "point_id" in data.columns:
        aggregations["point_id"] = ("point_id", "min")
    aggregations["runs_ok"] = ("_ok", "sum")
    aggregations["runs_failed"] = ("_failed", "sum")
    for metric in metrics:
        for stat in STATS:
            aggregations[f"{metric}_{stat}"] = (metric, stat)
    summary = data.groupby(keys, dropna=False, sort=False).agg(**aggregations).reset_index()
    order = ["point_id", *keys] if "point_id" in summary.columns else keys
    summary = summary[order + [c for c in summary.columns if c not in order]]
    if "point_id" in summary.columns:
        summary = summary.sort_values("point_id", kind="stable")
    return summary.reset_index(drop=True)


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _equal(a: Any, b: Any) -> bool:
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-9)
    except (TypeError, ValueError):
        return a == b


def is_missing(value: Any) -> bool:
    try:
        return value is None or bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


@dataclass
class Ceilings:
    """Native ceilings (rows named ceiling:<backend>) and where they came from: this sweep, or another run."""

    rows: pd.DataFrame
    source: str
    note: str = ""

    @property
    def in_run(self) -> bool:
        """Measured in this sweep, at its own network points (else another run: other data, other time)."""
        return self.source == THIS_SWEEP

    @property
    def backends(self) -> list[str]:
        return sorted(set(self.rows["backend"].astype(str)))

    def _ok(self) -> pd.DataFrame:
        rows = self.rows
        if "status" in rows.columns:
            rows = rows[rows["status"].astype(str) == "ok"]
        return rows[pd.to_numeric(rows["samples_per_s"], errors="coerce").notna()]

    def of(self, backend: str, rtt_ms: float, concurrency: Any = None, point: Any = None) -> float:
        """The backend's ceiling at this network point (samples/s, median over repetitions), NaN without one.

        Network columns must match (a column the ceiling rows lack, or a missing value, matches any); the same
        concurrency and shard layout are preferred when measured, else the best ceiling measured at that point.
        """
        wanted = {"rtt_ms": rtt_ms, "concurrency": concurrency}
        if point is not None:
            wanted |= {c: point[c] for c in (*NETWORK_COLUMNS, "concurrency", "shard_maxcount", "shard_maxsize")
                       if c in point}
        rows = self._ok()
        rows = rows[rows["backend"].astype(str) == backend]
        for column in NETWORK_COLUMNS:
            value = wanted.get(column)
            if column in rows.columns and not is_missing(value):
                rows = rows[rows[column].map(lambda v, value=value: is_missing(v) or _equal(v, value))]
        for column in ("concurrency", "shard_maxcount", "shard_maxsize"):
            value = wanted.get(column)
            if column in rows.columns and not is_missing(value):
                same = rows[rows[column].map(lambda v, value=value: _equal(v, value))]
                rows = same if not same.empty else rows
        if rows.empty:
            return float("nan")
        keys = [c for c in ("concurrency", "shard_maxcount", "shard_maxsize") if c in rows.columns]
        rates = pd.to_numeric(rows["samples_per_s"], errors="coerce")
        if not keys:
            return float(rates.median())
        return float(rates.groupby([rows[k].astype(str) for k in keys], dropna=False).median().max())

    def program(self, backend: str) -> str:
        """What measured the ceiling (`ceiling_program`, e.g. go/minio-go), or "" when the rows do not say."""
        if "ceiling_program" not in self.rows.columns:
            return ""
        values = self.rows[self.rows["backend"].astype(str) == backend]["ceiling_program"].dropna().astype(str)
        return ", ".join(sorted({v for v in values if v}))

    def table(self) -> pd.DataFrame:
        """One row per measured ceiling point: median/min/max samples/s and the repetitions."""
        rows = self._ok().copy()
        rows["samples_per_s"] = pd.to_numeric(rows["samples_per_s"], errors="coerce")
        keys = [c for c in ("backend", "ceiling_program", *NETWORK_COLUMNS, "concurrency", "shard_maxcount")
                if c in rows.columns]
        if rows.empty:
            return pd.DataFrame(columns=[*keys, "samples/s"])
        out = rows.groupby(keys, dropna=False, sort=True)["samples_per_s"].agg(["median", "min", "max", "count"])
        return out.rename(columns={"median": "samples/s", "min": "min", "max": "max", "count": "runs"}).reset_index()


THIS_SWEEP = "this sweep"


def _ceiling_frame(rows: list[dict]) -> pd.DataFrame | None:
    picked = [r for r in rows if isinstance(r, dict) and str(r.get("loader", "")).startswith(CEILING_PREFIX)
              and "samples_per_s" in r and "rtt_ms" in r]
    if not picked:
        return None
    frame = pd.DataFrame(picked)
    if "backend" not in frame.columns:
        frame["backend"] = frame["loader"].str.slice(len(CEILING_PREFIX))
    return frame


def load_ceilings(results_dir: Path, frame: pd.DataFrame) -> Ceilings | None:
    """Ceiling rows from the sweep itself; without them (older sweeps), a bench-loaders JSON in its folder or
    the newest in ../bench-loaders, which is another run (`Ceilings.in_run` is False and the report says so)."""
    if "loader" in frame.columns:
        own = _ceiling_frame(frame[frame["loader"].astype(str).str.startswith(CEILING_PREFIX)].to_dict("records"))
        if own is not None:
            return Ceilings(own, THIS_SWEEP)
    skip = {"config.json", "environment.json", PROGRESS_FILE}
    here = sorted((p for p in results_dir.glob("*.json") if p.name not in skip), key=lambda p: p.stat().st_mtime)
    sibling = results_dir.parent / "bench-loaders"
    there = sorted(sibling.glob("*.json"), key=lambda p: p.stat().st_mtime) if sibling.is_dir() else []
    for path in [*reversed(here), *reversed(there)]:
        data = _read_json(path)
        rows = data.get("rows", []) if isinstance(data, dict) else data if isinstance(data, list) else []
        found = _ceiling_frame(rows)
        if found is not None:
            details = []
            for column, label in (("dataset", "dataset"), ("concurrency", "concurrency")):
                if column in found.columns:
                    details.append(f"{label} {', '.join(str(v) for v in found[column].dropna().unique())}")
            note = f"measured by `workbench bench loaders` on {'; '.join(details)}" if details else ""
            return Ceilings(found, str(path), note)
    return None


@dataclass
class Context:
    """Everything the plots and the page need, computed once."""

    results_dir: Path
    runs: pd.DataFrame  # every row, failed ones included
    ok: pd.DataFrame  # status == "ok", ceiling rows excluded
    failed: pd.DataFrame
    summary: pd.DataFrame  # summarise(runs) without ceiling rows
    config: dict
    environment: dict
    ceilings: Ceilings | None
    notes: list[str] = field(default_factory=list)  # warnings shown at the top of the page (INCOMPLETE, ...)
    remarks: list[str] = field(default_factory=list)  # what to keep in mind when reading the numbers

    @property
    def name(self) -> str:
        if self.config.get("name"):
            return str(self.config["name"])
        if "sweep" in self.runs.columns and len(self.runs):
            return str(self.runs["sweep"].iloc[0])
        return self.results_dir.name

    @property
    def question(self) -> str:
        """The one question a study answers (its config's `question:`), "" for a plain sweep."""
        return str(self.config.get("question") or "").strip()

    def values(self, column: str, frame: pd.DataFrame | None = None) -> list:
        """The distinct non-missing values of a column, sorted."""
        frame = self.summary if frame is None else frame
        if column not in frame.columns:
            return []
        return sorted({v for v in frame[column].tolist() if not is_missing(v)})

    # --- the slices each plot shows -------------------------------------------------------------------

    @property
    def rtts(self) -> list[float]:
        return self.values("rtt_ms")

    @property
    def compute_free(self) -> float | None:
        """The compute time the throughput plots show: 0 (no emulated compute) when the sweep has it."""
        values = self.values("compute_ms")
        return values[0] if values else None

    @property
    def layout(self) -> tuple[Any, Any]:
        """The shard layout the non-layout plots show: the config's first values (else the smallest)."""
        layout = self.config.get("layout", {}) if isinstance(self.config.get("layout"), dict) else {}
        counts, sizes = self.values("shard_maxcount"), self.values("shard_maxsize")
        count = (layout.get("shard_maxcount") or [None])[0]
        size = (layout.get("shard_maxsize") or [None])[0]
        return _pick(count, counts), _pick(size, sizes)

    @property
    def bandwidth(self) -> Any:
        """The bandwidth limit the plots show: the config's first value (0 = unlimited), else the smallest."""
        network = self.config.get("network", {}) if isinstance(self.config.get("network"), dict) else {}
        return _pick((network.get("bandwidth_mbps") or [None])[0], self.values("bandwidth_mbps"))

    @property
    def series_knobs(self) -> list[str]:
        """Loader knobs this sweep varies: each value gets its own line."""
        return [k for k in SERIES_KNOBS if len(self.values(k)) > 1]

    @property
    def accelerators(self) -> list:
        """The numbers of emulated accelerators running at once that this sweep measured (empty: none)."""
        return self.values("accelerators")

    @property
    def topology_columns(self) -> list[str]:
        """Topology columns this sweep varies (nodes, ranks, ...): each value is a point of its own."""
        return [c for c in self.summary.columns if str(c).startswith(TOPOLOGY_PREFIX)]

    def setup(self, accelerators: bool = True) -> tuple[tuple[str, Any], ...]:
        """What the non-scaling plots hold fixed: the fewest accelerators and the first topology."""
        fixed = [(c, self.values(c)[0]) for c in self.topology_columns if self.values(c)]
        if accelerators and self.accelerators:
            fixed.append(("accelerators", self.accelerators[0]))
        return tuple(fixed)

    def at_layout(self, frame: pd.DataFrame, accelerators: bool = True) -> pd.DataFrame:
        """Rows of the baseline bandwidth and shard layout (rows without a layout always pass that test)."""
        count, size = self.layout
        return self._at(self.at_bandwidth(frame, accelerators), (("shard_maxcount", count), ("shard_maxsize", size)))

    def at_bandwidth(self, frame: pd.DataFrame, accelerators: bool = True) -> pd.DataFrame:
        return self._at(frame, (("bandwidth_mbps", self.bandwidth), *self.setup(accelerators)))

    @staticmethod
    def _at(frame: pd.DataFrame, fixed: tuple[tuple[str, Any], ...]) -> pd.DataFrame:
        keep = pd.Series(True, index=frame.index)
        for column, value in fixed:
            if column in frame.columns and value is not None:
                keep &= frame[column].map(lambda v, value=value: is_missing(v) or _equal(v, value))
        return frame[keep]

    def at_compute(self, frame: pd.DataFrame, compute_ms: float | None) -> pd.DataFrame:
        if compute_ms is None or "compute_ms" not in frame.columns:
            return frame
        return frame[frame["compute_ms"].map(lambda v: _equal(v, compute_ms))]

    def baseline(self, frame: pd.DataFrame) -> pd.DataFrame:
        """The baseline layout and no (or the least) emulated compute."""
        return self.at_compute(self.at_layout(frame), self.compute_free)

    def label(self, row: Any, exclude: tuple[str, ...] = ()) -> str:
        """A line's name: the loader, plus the varied loader knobs (but those in `exclude`)."""
        knobs = [f"{SERIES_KNOBS[k]}={_fmt_knob(row[k])}" for k in self.series_knobs if k in row and k not in exclude]
        return f"{row['loader']}" + (f" [{', '.join(knobs)}]" if knobs else "")

    def series(self, frame: pd.DataFrame, exclude: tuple[str, ...] = ()) -> dict[str, pd.DataFrame]:
        """The frame split into lines (label -> rows), in loader order; `exclude`: knobs that are not lines."""
        if frame.empty:
            return {}
        labels = frame.apply(self.label, axis=1, exclude=exclude)
        order = {name: i for i, name in enumerate(self.loaders)}
        knobs = [k for k in self.series_knobs if k in frame.columns and k not in exclude]
        first = frame.groupby(labels, sort=False).first()

        def key(label: str) -> tuple:
            row = first.loc[label]
            return (order.get(row["loader"], len(order)), row["loader"], *(_sortable(row[k]) for k in knobs))

        return {label: frame[labels == label] for label in sorted(first.index, key=key)}

    @property
    def loaders(self) -> list[str]:
        configured = [n for n in self.config.get("loaders", []) if isinstance(n, str)]
        seen = list(dict.fromkeys(self.summary["loader"].tolist())) if "loader" in self.summary.columns else []
        return [*[n for n in configured if n in seen], *[n for n in seen if n not in configured]]

    def colour(self, loader: str) -> Any:
        import matplotlib

        palette = matplotlib.colormaps["tab10"]
        index = self.loaders.index(loader) if loader in self.loaders else len(self.loaders)
        return palette(index % 10)

    # --- the caption ----------------------------------------------------------------------------------

    def caption(self) -> str:
        cfg, env = self.config, self.environment
        data = cfg.get("data", {}) if isinstance(cfg.get("data"), dict) else {}
        count = data.get("count", _first(self.runs, "data_count"))
        mean_kb = data.get("mean_kb", _first(self.runs, "data_mean_kb"))
        loader_cfg = cfg.get("loader", {}) if isinstance(cfg.get("loader"), dict) else {}

        def knob(name: str) -> str:
            values = loader_cfg.get(name) or self.values(name, self.runs)
            return "/".join(_fmt_knob(v) for v in values) if values else "?"

        repetitions = cfg.get("repetitions", self.runs["repetition"].nunique() if "repetition" in self.runs else "?")
        epochs = cfg.get("epochs", _first(self.runs, "epochs"))
        gpus = env.get("gpus", _first(self.runs, "gpus"))
        if isinstance(gpus, str):
            try:
                gpus = json.loads(gpus)
            except ValueError:
                gpus = [gpus]
        gpu_text = ", ".join(str(g) for g in gpus) if gpus else "none"
        cpu = env.get("cpu") or _first(self.runs, "cpu_model") or "unknown CPU"
        cores = f" ({env['cpu_count']} cores)" if env.get("cpu_count") else ""
        commit = env.get("git_commit") or _first(self.runs, "git_commit") or "unknown"
        return (f"sweep {self.name}: {count} samples x {_fmt_num(mean_kb)} KB mean, concurrency {knob('concurrency')}, "
                f"batch {knob('batch_size')}, workers {knob('workers')}, {epochs} epoch(s) x {repetitions} "
                f"repetition(s); machine: {cpu}{cores}, GPUs: {gpu_text}; git {commit}")


def _sortable(value: Any) -> tuple:
    try:
        return (0, float(value), "")
    except (TypeError, ValueError):
        return (1, 0.0, str(value))


def _pick(preferred: Any, values: list) -> Any:
    """`preferred` if the data has it, else the smallest value (None without values)."""
    if preferred is not None and any(_equal(preferred, v) for v in values):
        return preferred
    return values[0] if values else None


def _first(frame: pd.DataFrame, column: str) -> Any:
    if column in frame.columns:
        values = frame[column].dropna()
        if len(values):
            return values.iloc[0]
    return None


def _fmt_num(value: Any) -> str:
    try:
        return f"{float(value):g}"
    except (TypeError, ValueError):
        return str(value)


def _fmt_knob(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def load(results_dir: Path) -> Context:
    """Read one sweep folder (runs.parquet, else runs.csv; config.json and environment.json if there)."""
    results_dir = Path(results_dir)
    parquet, csv = results_dir / "runs.parquet", results_dir / "runs.csv"
    if parquet.exists():
        runs = pd.read_parquet(parquet)
    elif csv.exists():
        runs = pd.read_csv(csv)
    else:
        raise WorkbenchError(f"no runs.parquet or runs.csv in {results_dir}: run a sweep first (`workbench sweep`)")
    if "status" not in runs.columns:
        runs["status"] = "ok"
    if "error" not in runs.columns:
        runs["error"] = ""
    for column in ("loader", "backend"):
        if column not in runs.columns:
            runs[column] = "?"
    remarks = []
    if "startup_fraction" not in runs.columns and {"time_to_first_batch_s", "seconds"} <= set(runs.columns):
        seconds = pd.to_numeric(runs["seconds"], errors="coerce")
        runs["startup_fraction"] = pd.to_numeric(runs["time_to_first_batch_s"], errors="coerce") / seconds
        remarks.append("These results predate the start-up columns: the start-up share is estimated as the first "
                       "epoch's time to first batch over the run's measured time (later epochs' start-ups are "
                       "not counted).")
    if "steady_samples_per_s" not in runs.columns:
        remarks.append("These results record no steady-state rate (samples/s after the first batch): their rates "
                       "include start-up.")
    is_ceiling = runs["loader"].astype(str).str.startswith(CEILING_PREFIX)
    loaders = runs[~is_ceiling]
    ok = loaders[loaders["status"] == "ok"].copy()
    failed = runs[runs["status"] != "ok"].copy()
    summary = summarise(loaders) if len(loaders) else summarise(runs.head(0))
    context = Context(results_dir, runs, ok, failed, summary, _read_json(results_dir / "config.json"),
                      _read_json(results_dir / "environment.json"), None)
    context.ceilings = load_ceilings(results_dir, runs)
    context.remarks.extend(remarks)
    progress = _read_json(results_dir / PROGRESS_FILE)
    if isinstance(progress, dict) and not progress.get("complete", True):
        context.notes.append(f"INCOMPLETE: the sweep stopped after {progress.get('runs_done')} of "
                             f"{progress.get('runs_total')} runs; these numbers are partial")
    return context
