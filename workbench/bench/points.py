"""A sweep point: one frozen dataclass whose fields are the axes a sweep varies.

Each axis field says, in its metadata, where the sweep config lists its values (section and option),
how the report labels it, whether it gets a line of its own in plots (`series`), whether it applies
only to sharded backends, and which topology setting (`topology_*` column) it sets per point. A section
may leave an axis unset (None): every point then has None there (e.g. `clients`: no reader ranks, the
sweep reads in its own process). `SweepConfig.points()` is the product of those lists; the report reads
its columns, labels and series from here. Adding an axis is one field here plus its list in the config.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Axis:
    """How one sweep axis is configured and shown."""

    section: str  # the sweep config section that lists its values ("network", "loader", ...)
    option: str  # the option in that section
    label: str  # the report's column header
    series: str | None = None  # short name of a line of its own in plots (loader knobs), else None
    sharded_only: bool = False  # applies to shard-based backends only (None elsewhere)
    topology: str | None = None  # the topology setting this axis sets per point (its row's topology_<name>)


def axis(section: str, option: str, label: str, series: str | None = None, sharded_only: bool = False,
         topology: str | None = None) -> Any:
    return field(metadata={"axis": Axis(section, option, label, series, sharded_only, topology)})


@dataclass(frozen=True)
class SweepPoint:
    """One point of a sweep grid: the loader and a value of every axis."""

    loader: str
    rtt_ms: float = axis("network", "rtt_ms", "RTT ms")
    bandwidth_mbps: float = axis("network", "bandwidth_mbps", "bandwidth Mbit/s")
    shard_maxcount: int | None = axis("layout", "shard_maxcount", "shard maxcount", sharded_only=True)
    shard_maxsize: float | None = axis("layout", "shard_maxsize", "shard maxsize", sharded_only=True)
    concurrency: int | str = axis("loader", "concurrency", "conc", series="conc")  # a number or "auto"
    prefetch_buffers: int = axis("loader", "prefetch_buffers", "prefetch", series="prefetch")
    batch_size: int = axis("loader", "batch_size", "batch", series="batch")
    workers: int = axis("loader", "workers", "workers", series="workers")
    decode: bool = axis("loader", "decode", "decode", series="decode")
    compute_ms: float = axis("compute", "ms_per_batch", "compute ms")
    accelerators: int = axis("compute", "accelerators", "accelerators")  # emulated, consuming at once
    # R reader ranks started by a launcher, each reading its shard (workbench.bench.clients); None: in-process
    clients: int | None = axis("clients", "ranks", "client ranks", series="ranks", topology="client_ranks")

    def __getitem__(self, name: str) -> Any:
        """Read access by column name, as rows and result frames are read."""
        return getattr(self, name)

    def as_row(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


AXES: dict[str, Axis] = {f.name: f.metadata["axis"] for f in dataclasses.fields(SweepPoint) if "axis" in f.metadata}
# Loader knobs that get a line of their own when a sweep varies them, by their short names.
SERIES_KNOBS: dict[str, str] = {name: a.series for name, a in AXES.items() if a.series is not None}
# Topology settings an axis sets per point (setting -> axis): a sweep varies them within one run, on purpose.
AXIS_TOPOLOGY: dict[str, str] = {a.topology: name for name, a in AXES.items() if a.topology is not None}
