"""A sweep's ceiling rows (`ceilings: true`): each backend's ceiling at every network point, in the same run.

Why: a loader's rate means little without what its backend can deliver under the same network, measured
in the same minutes on the same busy machine. For every backend of the sweep's loaders, every dataset
layout, network point (RTT x bandwidth) and concurrency of the grid, the backend's native ceiling program
(`workbench.bench.native_ceilings`) reads the sweep's dataset through the same toxiproxy path. A backend
without a compiled program gets the raw client loop its loaders offer (`Loader.raw_ceiling`: its
namesake loader's, else the first registered loader of that backend that has one). Rows are named
`ceiling:<backend>` and say which program measured them (`ceiling_program`). With concurrency "auto"
a ceiling runs at the widest window the backend's loaders ended with at that point (as `bench loaders`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from workbench.backends import backend_class
from workbench.bench.loader_process import timed
from workbench.bench.loaders import raw_ceiling_loader
from workbench.bench.native_ceilings import cpu_columns, run_native_ceiling
from workbench.bench.points import AXES, SweepPoint
from workbench.concurrency import AUTO, REFERENCE_DEPTH
from workbench.config import Settings
from workbench.loaders import loader_class

CEILING_PREFIX = "ceiling:"
# The axes a ceiling shares with the loaders it bounds: the network, the dataset's layout and the concurrency.
# Every other axis (batch size, workers, compute, ...) does not apply to it and is None in its rows.
CEILING_AXES = (*(name for name, a in AXES.items() if a.section in ("network", "layout")), "concurrency")


def backend_of(point: SweepPoint) -> str:
    """The backend a sweep point reads: its loader's, or the one a ceiling point names."""
    if point.loader.startswith(CEILING_PREFIX):
        return point.loader.removeprefix(CEILING_PREFIX)
    return loader_class(point.loader).backend


def ceiling_points(points: Iterable[SweepPoint]) -> list[SweepPoint]:
    """One ceiling point per backend x layout x network x concurrency among `points`, in their order."""
    unused = {name: None for name in AXES if name not in CEILING_AXES}
    found: dict[SweepPoint, None] = {}
    for point in points:
        found.setdefault(dataclasses.replace(point, loader=CEILING_PREFIX + backend_of(point), **unused))
    return list(found)


def ceiling_depth(ceiling: SweepPoint, rows: list[dict]) -> int:
    """The requests in flight of a ceiling: the grid's number, or with "auto" the widest window the backend's
    loaders ended with at the same network point and layout (REFERENCE_DEPTH when none recorded one)."""
    if ceiling.concurrency != AUTO:
        return int(ceiling.concurrency)
    windows = [int(row["window"]) for row in rows
               if row.get("status") == "ok" and row.get("window") is not None
               and row["backend"] == backend_of(ceiling) and not str(row["loader"]).startswith(CEILING_PREFIX)
               and all(row.get(name) == ceiling[name] for name in CEILING_AXES)]
    return max(windows, default=REFERENCE_DEPTH)


def measure_ceiling(settings: Settings, ceiling: SweepPoint, dataset: str, depth: int) -> dict[str, Any]:
    """One run of the ceiling of `ceiling`'s backend over `dataset` at `depth` requests in flight."""
    backend = backend_of(ceiling)
    config = {"dataset": dataset, "concurrency": depth, "via_proxy": backend_class(backend).proxy is not None}
    cpu: list[float] = []
    if backend_class(backend).native_ceiling is not None:
        run = run_native_ceiling(settings, backend, config)
        cpu.append(run.cpu_s)
        result, program, connect = (run.seconds, run.samples, run.bytes), run.program, run.connect_seconds
    else:
        name = raw_ceiling_loader(backend)
        cls = loader_class(name)
        validated = cls.Config(**config)
        result = timed(lambda: cls.raw_ceiling(settings, validated), cpu)
        program, connect = f"python/{name}.raw_ceiling", float("nan")
    seconds, samples, nbytes = result
    return {
        "samples": samples, "bytes": nbytes, "seconds": seconds,
        "samples_per_s": samples / seconds if seconds > 0 else float("nan"),
        "mb_per_s": nbytes / 1e6 / seconds if seconds > 0 else float("nan"),
        "connect_seconds": connect, "ceiling_program": program, "window": depth, "window_history": str(depth),
        **cpu_columns([result], cpu),
    }
