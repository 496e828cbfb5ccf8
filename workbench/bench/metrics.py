"""Pure measurement arithmetic: percentiles, accelerator utilisation (DLIO), start-up vs steady state."""

from __future__ import annotations

import json
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


STARTUP_LIMIT = 0.05  # start-up above this share of the measured time: the row's rate is not a steady one


@dataclass
class AcceleratorTrace:
    """One emulated accelerator's steps: the wait for each batch, its compute time, and when the step ended."""

    waits_s: list[float] = field(default_factory=list)
    computes_s: list[float] = field(default_factory=list)
    ends_s: list[float] = field(default_factory=list)  # perf_counter at the end of each step

    def record(self, wait_s: float, compute_s: float, end_s: float) -> None:
        self.waits_s.append(wait_s)
        self.computes_s.append(compute_s)
        self.ends_s.append(end_s)

    @property
    def busy_s(self) -> float:
        """Compute time of every step but the first (DLIO leaves the first step out of AU)."""
        return sum(self.computes_s[1:])

    @property
    def span_s(self) -> float:
        """Wall time from the end of the first step to the end of the last."""
        return self.ends_s[-1] - self.ends_s[0] if len(self.ends_s) > 1 else 0.0


def utilisation(busy_s: float, span_s: float) -> float:
    """AU = compute time / wall time (MLPerf Storage); NaN without emulated compute or a second step."""
    return busy_s / span_s if busy_s > 0 and span_s > 0 else float("nan")


@dataclass
class EpochTrace:
    """What one epoch did: the loader's output and first batch, and each emulated accelerator's steps."""

    samples: int = 0
    bytes: int = 0
    wall_s: float = 0.0
    first_batch_s: float = float("nan")  # from the loader's creation to its first batch (connections, listing)
    first_batch_samples: int = 0
    accelerators: list[AcceleratorTrace] = field(default_factory=list)

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.wall_s if self.wall_s > 0 else float("nan")

    @property
    def waits_s(self) -> list[float]:
        """Every step's wait for a batch, over all accelerators (the loader's share of a step)."""
        return [w for a in self.accelerators for w in a.waits_s]

    @property
    def accelerator_utilisation(self) -> list[float]:
        """AU of each accelerator in this epoch, its first step left out."""
        return [utilisation(a.busy_s, a.span_s) for a in self.accelerators]


def accelerator_utilisations(traces: Sequence[EpochTrace]) -> list[float]:
    """Each accelerator's AU over several epochs: its compute time / its wall time, summed over the epochs
    (each epoch's first step left out: a new loader's start-up is not the accelerator's)."""
    count = max((len(t.accelerators) for t in traces), default=0)
    return [utilisation(sum(t.accelerators[i].busy_s for t in traces if i < len(t.accelerators)),
                        sum(t.accelerators[i].span_s for t in traces if i < len(t.accelerators)))
            for i in range(count)]


def utilisation_columns(au: Sequence[float]) -> dict[str, object]:
    """au_per_accelerator (JSON list), au_min and au_mean over the N accelerators; accelerator_utilisation is
    au_mean (DLIO's definition, each accelerator's first step left out). NaN without emulated compute."""
    finite = [a for a in au if math.isfinite(a)]
    complete = bool(au) and len(finite) == len(au)
    mean = statistics.fmean(finite) if complete else float("nan")
    return {"au_min": min(finite) if complete else float("nan"), "au_mean": mean, "accelerator_utilisation": mean,
            "au_per_accelerator": json.dumps([round(a, 4) if math.isfinite(a) else None for a in au])}


@dataclass(frozen=True)
class Startup:
    """Start-up (each epoch's time to first batch) apart from the steady reading after it."""

    fraction: float  # start-up time / measured time
    steady_samples_per_s: float  # samples after each epoch's first batch / time after it

    @property
    def note(self) -> str:
        """Empty when start-up is under STARTUP_LIMIT of the measured time, else why the rate is not steady."""
        if not math.isfinite(self.fraction) or self.fraction < STARTUP_LIMIT:
            return ""
        return (f"start-up is {self.fraction:.0%} of the measured time (over {STARTUP_LIMIT:.0%}): this rate is "
                "not a steady one; raise data.count (and max_seconds_per_epoch) for longer epochs")


def startup(traces: Sequence[EpochTrace]) -> Startup:
    """The start-up share and the steady rate of a run of epochs (NaN when no epoch got past its first batch)."""
    started = [t for t in traces if math.isfinite(t.first_batch_s)]
    wall = sum(t.wall_s for t in started)
    first = sum(t.first_batch_s for t in started)
    steady_time = wall - first
    steady_samples = sum(t.samples - t.first_batch_samples for t in started)
    return Startup(first / wall if wall > 0 else float("nan"),
                   steady_samples / steady_time if steady_time > 0 and steady_samples > 0 else float("nan"))


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
