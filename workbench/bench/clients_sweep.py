"""The sweep's `clients` axis: a point read by R reader ranks (`run_clients`), as one row in the sweep's columns.

Why a module of its own: the rank runner writes rows of `bench clients` (lists per rank, a topology dict); a
sweep row is flat and shares its metric columns with in-process points (samples/s, start-up, AU, topology_*),
so the report reads both alike. Each rank is one emulated accelerator (DLIO's model), so the row's
`au_per_accelerator` is the ranks' AU and `au_min` the least busy rank's. The exactly-once check's counts
stay in the row, and a failed check makes its status "error" (the report leaves it out of every number and
lists it). The ids the ranks must read are asked of the backend once per dataset (`expected`), not per run.
"""

from __future__ import annotations

import json
import math
from typing import Any

from workbench.bench.clients import expected_ids, run_clients
from workbench.bench.metrics import Startup, utilisation_columns
from workbench.bench.points import SweepPoint
from workbench.bench.probes import ResourceProbe
from workbench.bench.sweep_config import SweepConfig
from workbench.config import Settings
from workbench.loaders import loader_class

# run_clients columns that hold one value per rank: JSON text in a sweep row (as batch_latencies_ms)
PER_RANK = ("shards", "rank_samples", "rank_seconds", "rank_samples_per_s", "rank_hosts", "rank_steps",
            "rank_first_step_s", "rank_accelerator_utilisation")
# run_clients columns the sweep row already has from its point (same values), or holds elsewhere
FROM_POINT = ("loader", "backend", "dataset", "compute_ms", "batch_size", "concurrency", "ranks", "topology")
Expected = dict[tuple[str, str, str], set[str]]  # (backend, dataset, split) -> the ids the ranks must read


def clients_point(settings: Settings, cfg: SweepConfig, point: SweepPoint, config: dict[str, Any],
                  expected: Expected) -> dict[str, Any]:
    """One run of `point.clients` ranks reading `config["dataset"]` with the point's loader: the row's
    measured columns (status "error" with the check's line when the ranks did not read every id exactly once).
    `expected` caches the ids per dataset over the sweep's runs."""
    cls = loader_class(point.loader)
    split = cls.Config(**config).split
    key = (cls.backend, config["dataset"], split)
    if key not in expected:
        expected[key] = expected_ids(settings, point.loader, config["dataset"], split, "split", progress=False)
    launcher = cfg.clients.launcher or settings.launcher
    with ResourceProbe() as probe:
        row = run_clients(settings, point.loader, config, int(point.clients), launcher, point.compute_ms,
                          cfg.clients.max_seconds, expected=expected[key], start_timeout_s=cfg.clients.start_timeout_s,
                          progress=False)
    assert row is not None  # one host: rank 0 runs here and writes the row
    return {**sweep_columns(row), "cpu_percent": probe.cpu_percent, "peak_rss_mb": probe.peak_rss_mb,
            "workers_peak_rss_mb": probe.children_peak_rss_mb}


def sweep_columns(row: dict[str, Any]) -> dict[str, Any]:
    """A `run_clients` row as a sweep row's measured columns: per-rank lists as JSON, the ranks' AU as the
    accelerators' (au_min, au_mean, au_per_accelerator), start-up apart from the steady rate, topology_*."""
    out = {k: v for k, v in row.items() if k not in FROM_POINT and k not in PER_RANK}
    out.update({k: json.dumps(row[k]) for k in PER_RANK if k in row})
    out.update({f"topology_{name}": value for name, value in row.get("topology", {}).items()})
    utilisations = [math.nan if u is None else u for u in row.get("rank_accelerator_utilisation", [])]
    out.update(utilisation_columns(utilisations))
    seconds = row.get("seconds") or math.nan
    out["batches_per_s"] = sum(row.get("rank_steps", [])) / seconds if seconds > 0 else math.nan
    out["first_epoch_samples_per_s"] = row.get("samples_per_s", math.nan)  # ranks read one epoch
    out["later_epochs_samples_per_s"] = math.nan
    out["startup_note"] = Startup(row.get("startup_fraction", math.nan), row.get("steady_samples_per_s", math.nan)).note
    return out
