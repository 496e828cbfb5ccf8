"""Pure measurement arithmetic: percentiles, accelerator utilisation, emulated accelerators kept busy."""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100); NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass
class EpochTrace:
    """What one epoch did: per-batch wait times (the loader's share) and compute times (emulated)."""

    samples: int = 0
    bytes: int = 0
    wall_s: float = 0.0
    first_batch_s: float = float("nan")
    waits_s: list[float] = field(default_factory=list)
    computes_s: list[float] = field(default_factory=list)

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.wall_s if self.wall_s > 0 else float("nan")

    @property
    def accelerator_utilisation(self) -> float:
        """AU = compute time / wall time (MLPerf Storage); NaN without emulated compute."""
        compute = sum(self.computes_s)
        return compute / self.wall_s if compute > 0 and self.wall_s > 0 else float("nan")


def max_accelerators(batches_per_s: float, compute_s_per_batch: float, target_au: float = 0.9) -> int:
    """How many emulated accelerators one loader keeps at >= target AU.

    Each accelerator consumes one batch per `compute_s_per_batch`; N of them stay at AU >= target
    while the loader supplies at least target * N / compute_s batches per second.
    """
    if compute_s_per_batch <= 0 or not math.isfinite(batches_per_s) or batches_per_s <= 0:
        return 0
    return int(batches_per_s * compute_s_per_batch / target_au + 1e-9)


class ComputeModel:
    """Emulated compute per batch: fixed, or drawn from a seeded normal distribution (never negative)."""

    def __init__(self, mean_ms: float, distribution: str = "fixed", stddev_fraction: float = 0.1, seed: int = 0):
        self.mean_s = mean_ms / 1000
        self.distribution = distribution
        self.stddev_s = self.mean_s * stddev_fraction
        self.rng = random.Random(seed)

    def draw(self) -> float:
        if self.mean_s <= 0:
            return 0.0
        if self.distribution == "normal":
            return max(0.0, self.rng.gauss(self.mean_s, self.stddev_s))
        return self.mean_s


def summarise(values: Sequence[float]) -> dict[str, float]:
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return {"median": float("nan"), "min": float("nan"), "max": float("nan")}
    return {"median": statistics.median(finite), "min": min(finite), "max": max(finite)}
