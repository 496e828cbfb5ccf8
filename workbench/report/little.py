"""Little's law on the latency-hiding plot: what one request is per loader, and how many are in flight.

A reader with W requests in flight, each carrying k samples and taking at least one round trip, delivers at most
W·k / RTT samples/s (throughput = requests in flight / time per request). The bound is honest only if W and k
are what the loader really does, so both come from the loader's class (`Loader.request_model`: a new loader
brings its own), and the plot's note says them in words: the sweep's `concurrency` is not the window of every
loader (s3-shards keeps `parallel_shards` shard GETs in flight, "auto" by default, webdataset one stream per
reader, s3-naive one GET at a time), and one request is one sample for the object loaders but a whole shard, or
a get_all of several keys, for others. Each DataLoader worker has its own loader, so its own window.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from workbench.loaders.base import RequestModel
from workbench.loaders.registry import loader_class

SHARD_ENTRY_OVERHEAD = 2048  # tar headers and padding per sample in a shard (3 members x 512 B, rounded up)


def request_model(loader: str) -> RequestModel | None:
    """What one request of `loader` is: its class says (`Loader.request_model`); None for an unknown loader
    or one whose module does not import here."""
    try:
        return loader_class(loader).request_model
    except Exception:  # an unknown loader, a loader whose module does not import here
        return None


@dataclass(frozen=True)
class Bound:
    """W requests in flight x k samples each: at most in_flight x per_request / RTT samples/s."""

    in_flight: int
    per_request: float
    what: str

    @property
    def samples_in_flight(self) -> float:
        return self.in_flight * self.per_request

    def at(self, rtt_ms: float) -> float:
        return self.samples_in_flight / (rtt_ms / 1000) if rtt_ms > 0 else math.inf


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def config_default(loader: str, name: str) -> Any:
    """A loader config field's default (the loader's own module is its home), None when unknown."""
    try:
        return loader_class(loader).Config.model_fields[name].default
    except Exception:  # an unknown loader, a loader whose module does not import here, a field it lacks
        return None


def samples_per_shard(row: Any) -> float | None:
    """About how many samples one shard holds: maxcount, or fewer when maxsize is reached first."""
    maxcount, maxsize = _number(row.get("shard_maxcount")), _number(row.get("shard_maxsize"))
    mean_kb, count = _number(row.get("data_mean_kb")), _number(row.get("data_count"))
    if maxcount is None:
        return None
    samples = maxcount
    if maxsize is not None and mean_kb:
        samples = min(samples, max(1.0, maxsize // (mean_kb * 1024 + SHARD_ENTRY_OVERHEAD)))
    if count:
        samples = min(samples, count)
    return samples


def bound(row: Any) -> Bound | None:
    """The loader's Little's-law bound at this point, None when it has none (local, auto window, unknown)."""
    model = request_model(str(row.get("loader")))
    if model is None or model.per_request is None:
        return None
    if model.window == "concurrency":
        window = _number(row.get("concurrency"))  # None for "auto": its window is measured, not set
    elif isinstance(model.window, str):  # the row's own setting, else the default; None for "auto" (measured)
        window = _number(row.get(model.window)) or _number(config_default(str(row["loader"]), model.window))
    else:
        window = float(model.window)
    if model.per_request == "sample":
        per_request = 1.0
    elif model.per_request == "shard":
        per_request = samples_per_shard(row)
    else:
        per_request = _number(config_default(str(row["loader"]), model.per_request))
    if window is None or per_request is None:
        return None
    workers = _number(row.get("workers")) or 0
    return Bound(int(window * max(1, workers)), per_request, model.what)


def describe(loaders: list[str]) -> str:
    """One sentence per loader: what a request is, or why it gets no bound."""
    parts = []
    for loader in loaders:
        model = request_model(loader)
        if model is None:
            parts.append(f"{loader}: no bound (no request model for this loader)")
        elif model.per_request is None:
            parts.append(f"{loader}: no bound ({model.what})")
        else:
            window = f"{model.window} in flight" if isinstance(model.window, int) else f"`{model.window}` in flight"
            parts.append(f"{loader}: {model.what}, {window}")
    return "; ".join(parts)
