"""Run a sweep: every grid point, warm-up excluded, repeated, one tidy row per run (Parquet + CSV).

Each epoch's batches go to the point's N emulated accelerators at once (`workbench.bench.accelerators`);
rows record time to first batch apart from the steady rate after it, the AU of every accelerator, and the
topology (`topology_*`) and git commit the run measured. With `ceilings: true` the backends' ceilings follow
at every network point, through the same proxies (`workbench.bench.sweep_ceilings`). A point of the `clients`
axis is read by R reader ranks instead (`workbench.bench.clients_sweep`): aggregate and slowest rank's rates,
every rank's AU and the exactly-once check, whose failure makes the row's status "error".
A point that fails records its error in its row and the sweep goes on; nothing partial is written
as complete (results files are replaced atomically at the end of every point).
"""

from __future__ import annotations

import json
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tqdm import tqdm

from workbench.backends import backend_class, make_backend
from workbench.bench.accelerators import run_accelerators
from workbench.bench.clients_sweep import Expected, clients_point
from workbench.bench.metrics import (
    ComputeModel,
    EpochTrace,
    accelerator_utilisations,
    percentile,
    startup,
    utilisation_columns,
)
from workbench.bench.point_network import check_network, set_network
from workbench.bench.points import AXES, SweepPoint
from workbench.bench.probes import ResourceProbe
from workbench.bench.sweep_ceilings import CEILING_PREFIX, backend_of, ceiling_depth, ceiling_points, measure_ceiling
from workbench.bench.sweep_config import MAX_ACCELERATORS, SweepConfig
from workbench.config import Settings
from workbench.data import SyntheticSource
from workbench.environment import describe_environment
from workbench.errors import with_type
from workbench.ingest import ingest
from workbench.loaders import loader_class, make_loader
from workbench.net.toxiproxy import Toxiproxy
from workbench.results import PROGRESS_FILE, RUNS, check_writable, write_atomically


def dataset_name(cfg: SweepConfig, point: SweepPoint) -> str:
    kb = f"{cfg.data.mean_kb:g}".replace(".", "p")
    base = f"sweep_{cfg.data.count}_{kb}kb_s{cfg.data.seed}"
    if point.shard_maxcount is None:
        return base
    return f"{base}_mc{point.shard_maxcount}_ms{int(point.shard_maxsize)}"


def prepare_datasets(settings: Settings, cfg: SweepConfig, points: list[SweepPoint]) -> None:
    """Ingest the synthetic dataset into every layout the grid needs (idempotent, resumable), then run
    the preparation hook of every loader that keeps a layout of its own (e.g. a peer's MDS shards)."""
    source = SyntheticSource(cfg.data.count, seed=cfg.data.seed, mean_kb=cfg.data.mean_kb)
    layouts: dict[tuple[str, str], dict] = {}
    hooks: set[tuple[type, str]] = set()
    for point in points:
        cls = loader_class(point.loader)
        layout = {}
        if backend_class(cls.backend).sharded:
            layout = {"maxcount": point.shard_maxcount, "maxsize": point.shard_maxsize}
        layouts[(cls.backend, dataset_name(cfg, point))] = layout
        hooks.add((cls, dataset_name(cfg, point)))
    for (backend, dataset), layout in layouts.items():
        ingest(source, make_backend(backend, settings, dataset, **layout), check_images=False)
    for cls, dataset in hooks:
        cls.prepare_dataset(settings, dataset, source)


def _batches(point: SweepPoint, settings: Settings, config: dict,
             windows: list[list[int]] | None = None) -> Iterator[tuple[int, int]]:
    """(samples, bytes) per batch, from the loader in-process or through a torch DataLoader: the batch path
    the adapters take (`Loader.batches`; from workers, `BatchDataset` in shared memory).

    In-process, the loader's window history (what "auto" chose) is appended to `windows` when it ends.
    """
    if point.workers == 0 and not point.decode:
        with make_loader(point.loader, settings, **config) as loader:
            try:
                for batch in loader.batches():
                    yield len(batch), batch.nbytes
            finally:
                if windows is not None and getattr(loader, "window_history", None):
                    windows.append(loader.window_history)
        return
    from torch.utils.data import DataLoader

    from workbench.adapters.torch import BatchDataset, LoaderDataset, decode_transform, skip_none, worker_context

    workers = point.workers
    options = {"num_workers": workers, "prefetch_factor": point.prefetch_buffers if workers else None,
               "multiprocessing_context": worker_context(settings, workers)}
    if point.decode:  # per-sample decoding, a corrupt image skipped
        from torch.utils.data import default_collate

        dataset = LoaderDataset(point.loader, settings, transform=decode_transform(on_corrupt="skip"), **config)
        for images, _ in DataLoader(dataset, batch_size=point.batch_size, collate_fn=skip_none(default_collate),
                                    **options):
            yield len(images), images.numel()
        return
    for element in DataLoader(BatchDataset(point.loader, settings, **config), batch_size=None, **options):
        yield len(element["key"]), element["data"].numel()


def run_epoch(point: SweepPoint, settings: Settings, config: dict, computes: list[ComputeModel], max_s: float,
              max_batches: int | None = None, windows: list[list[int]] | None = None) -> EpochTrace:
    """One epoch timed from the loader's creation (connection set-up is in the time to first batch), its
    batches taken by one emulated accelerator per compute model, all at once."""
    batches = _batches(point, settings, config, windows)
    try:
        return run_accelerators(batches, computes, max_s, max_batches)
    finally:
        batches.close()  # an epoch cut short still closes its loader (and records its window) now


def run_point(settings: Settings, cfg: SweepConfig, point: SweepPoint, repetition: int,
              expected: Expected | None = None) -> dict[str, Any]:
    """One repetition of a loader point; with `point.clients`, read by that many ranks (`expected`: the ids
    they must read, cached per dataset over the sweep)."""
    cls = loader_class(point.loader)
    config = {
        "dataset": dataset_name(cfg, point),
        "concurrency": point.concurrency,
        "prefetch_buffers": point.prefetch_buffers,
        "batch_size": point.batch_size,
        "seed": repetition,
        "via_proxy": backend_class(cls.backend).proxy is not None,
    }
    computes = [ComputeModel(point.compute_ms, cfg.compute.distribution, cfg.compute.stddev_fraction,
                             seed=repetition * MAX_ACCELERATORS + i) for i in range(point.accelerators)]
    if cfg.warmup_batches:  # warms the servers' caches and JITs; thrown away, never measured
        run_epoch(point, settings, config, [ComputeModel(0)], cfg.max_seconds_per_epoch, cfg.warmup_batches)
    if point.clients is not None:
        return clients_point(settings, cfg, point, config, {} if expected is None else expected)
    traces = []
    windows: list[list[int]] = []  # per epoch, the window's history (in-process loaders only)
    with ResourceProbe() as probe:
        for epoch in range(cfg.epochs):  # a new seed per epoch: a new order, as set_epoch would give
            epoch_config = {**config, "seed": repetition + 1000 * epoch}
            traces.append(run_epoch(point, settings, epoch_config, computes, cfg.max_seconds_per_epoch,
                                    windows=windows))
    waits_ms = [w * 1000 for t in traces for w in t.waits_s]
    samples, nbytes = sum(t.samples for t in traces), sum(t.bytes for t in traces)
    wall = sum(t.wall_s for t in traces)
    later = traces[1:]
    later_rate = (sum(t.samples for t in later) / sum(t.wall_s for t in later)) if later else float("nan")
    steady = startup(traces)
    return {
        "samples": samples,
        "bytes": nbytes,
        "seconds": wall,
        "samples_per_s": samples / wall if wall else float("nan"),
        "mb_per_s": nbytes / 1e6 / wall if wall else float("nan"),
        "batches_per_s": len(waits_ms) / wall if wall else float("nan"),
        "first_epoch_samples_per_s": traces[0].samples_per_s,
        "later_epochs_samples_per_s": later_rate,
        "time_to_first_batch_s": traces[0].first_batch_s,
        "steady_samples_per_s": steady.steady_samples_per_s,
        "startup_fraction": steady.fraction,
        "startup_note": steady.note,
        "batch_p50_ms": percentile(waits_ms, 50),
        "batch_p95_ms": percentile(waits_ms, 95),
        "batch_p99_ms": percentile(waits_ms, 99),
        **utilisation_columns(accelerator_utilisations(traces)),
        "cpu_percent": probe.cpu_percent,
        "peak_rss_mb": probe.peak_rss_mb,
        "workers_peak_rss_mb": probe.children_peak_rss_mb,
        "gpu_util_percent": probe.gpu_util,
        "batch_latencies_ms": json.dumps([round(w, 3) for w in waits_ms]),
        "window": windows[-1][-1] if windows else None,  # the depth in use at the end of the last epoch
        "window_history": " ".join(map(str, windows[-1])) if windows else "",
    }


def run_sweep(
    settings: Settings, cfg: SweepConfig, results_root: Path = RUNS, progress: bool = True
) -> Path:
    """Run every point, then (with `ceilings`) every ceiling point; returns the folder with runs.parquet,
    runs.csv, config.json, environment.json and progress.json."""
    import pandas as pd

    folder = check_writable(results_root / cfg.name)
    points = cfg.points()
    prepare_datasets(settings, cfg, points)
    environment = {**describe_environment(settings), "topology": settings.topology()}
    runs = [(i, point, rep) for i, point in enumerate(points) for rep in range(cfg.repetitions)]
    ceilings = ceiling_points(points) if cfg.ceilings else []
    runs += [(i, point, rep) for i, point in enumerate(ceilings, start=len(points)) for rep in range(cfg.repetitions)]
    write_atomically(folder / "config.json", lambda tmp: tmp.write_text(cfg.model_dump_json(indent=2)))
    write_atomically(folder / "environment.json",
                     lambda tmp: tmp.write_text(json.dumps(environment, indent=2, default=str)))
    _write_progress(folder, 0, len(runs))
    common = {"jitter_ms": cfg.network.jitter_ms, "bandwidth_scope": cfg.network.bandwidth_scope,
              "data_count": cfg.data.count, "data_mean_kb": cfg.data.mean_kb,
              "epochs": cfg.epochs, "compute_distribution": cfg.compute.distribution,
              **{f"topology_{name}": value for name, value in settings.topology().items()}}
    if cfg.clients.ranks is not None:
        common["topology_launcher"] = cfg.clients.launcher or settings.launcher
    expected: Expected = {}  # the ids each dataset's ranks must read, asked of its backend once
    toxiproxy = Toxiproxy(settings)
    toxiproxy.ensure_proxies()
    rows: list[dict] = []
    try:
        for point_id, point, rep in tqdm(runs, desc=f"sweep {cfg.name}", unit="run", disable=not progress):
            backend = backend_of(point)
            row = {"sweep": cfg.name, "point_id": point_id, "repetition": rep, "backend": backend, **point.as_row(),
                   "dataset": dataset_name(cfg, point), **common, **point_topology(point),
                   "started": time.strftime("%Y-%m-%dT%H:%M:%S")}
            try:
                set_network(settings, toxiproxy, point, cfg.network.jitter_ms, cfg.network.bandwidth_scope)
                if point.loader.startswith(CEILING_PREFIX):
                    measured = measure_ceiling(settings, point, row["dataset"], ceiling_depth(point, rows))
                else:
                    measured = run_point(settings, cfg, point, rep, expected)
                check_network(settings, toxiproxy, backend, point, cfg.network.jitter_ms,
                              cfg.network.bandwidth_scope)
                row.update({"status": "ok", "error": "", **measured})  # ranks that failed their check say "error"
            except Exception as exc:  # a failing point is recorded and the sweep goes on
                row.update(status="error", error=with_type(exc) if str(exc) else traceback.format_exc(limit=1))
            rows.append(row)
            _write(folder, rows, environment, pd)
            _write_progress(folder, len(rows), len(runs))
    finally:
        toxiproxy.reset()
    return folder


def point_topology(point: SweepPoint) -> dict[str, Any]:
    """The topology columns a point's axes set (e.g. topology_client_ranks from `clients`), where set."""
    return {f"topology_{a.topology}": point[name] for name, a in AXES.items()
            if a.topology is not None and point[name] is not None}


def _write(folder: Path, rows: list[dict], environment: dict, pd) -> None:
    frame = pd.DataFrame(rows)
    if "concurrency" in frame and frame["concurrency"].map(type).nunique() > 1:  # numbers and "auto": one type
        frame["concurrency"] = frame["concurrency"].astype(str)
    frame["git_commit"] = environment.get("git_commit", "")
    frame["cpu_model"] = environment.get("cpu", "")
    frame["gpus"] = json.dumps(environment.get("gpus", []))
    frame["servers"] = json.dumps(environment.get("servers", {}))
    frame["packages"] = json.dumps(environment.get("packages", {}))
    write_atomically(folder / "runs.parquet", lambda tmp: frame.to_parquet(tmp, index=False))
    write_atomically(folder / "runs.csv", lambda tmp: frame.to_csv(tmp, index=False))


def _write_progress(folder: Path, done: int, total: int) -> None:
    """progress.json: rows are saved after every run, so a stopped sweep says it is incomplete."""
    status = {"runs_done": done, "runs_total": total, "complete": done == total}
    write_atomically(folder / PROGRESS_FILE, lambda tmp: tmp.write_text(json.dumps(status)))
