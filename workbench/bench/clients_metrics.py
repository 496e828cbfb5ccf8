"""Pure arithmetic of `workbench bench clients`: what R reader ranks did together, and whether together they
read every sample exactly once.

Aggregate rate = all samples / the slowest rank's wall time (the epoch ends when the last rank does, as a
synchronous data-parallel step waits for its slowest rank). Accelerator utilisation (MLPerf Storage's AU)
is emulated compute / wall time per rank, the first step excluded (connection set-up and warm-up).
Start-up, as sweeps record it: the time until the last rank had its first batch, apart from the steady rate
after each rank's first batch (the samples after it over the longest time after it).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field

EXAMPLES = 5  # ids shown per kind of exactly-once failure


@dataclass
class RankResult:
    """One rank's epoch: what it read and how long it took, timed from its loader's creation."""

    rank: int
    shard_id: int
    host: str = ""
    samples: int = 0
    bytes: int = 0
    wall_s: float = 0.0
    steps: int = 0
    first_step_s: float = float("nan")  # from the start to the end of the first step (its compute included)
    first_batch_s: float = float("nan")  # from the start to the first batch in hand (connections, listing)
    first_batch_samples: int = 0
    compute_s: float = 0.0  # emulated compute of every step but the first
    ids: list[str] = field(default_factory=list, repr=False)

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.wall_s if self.wall_s > 0 else float("nan")

    @property
    def accelerator_utilisation(self) -> float:
        """Compute / wall after the first step; NaN without emulated compute or without a second step."""
        busy_wall = self.wall_s - self.first_step_s
        if self.compute_s <= 0 or not math.isfinite(busy_wall) or busy_wall <= 0:
            return float("nan")
        return self.compute_s / busy_wall

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class ExactlyOnce:
    """Ids the ranks read together against the ids the split holds."""

    expected: int
    read: int
    distinct: int
    missing: int  # expected ids no rank read
    duplicated: int  # reads beyond the first of an id (two ranks reading one id counts 1)
    unexpected: int  # ids read that the split does not hold
    examples: dict[str, list[str]]

    @property
    def ok(self) -> bool:
        return self.missing == 0 and self.duplicated == 0 and self.unexpected == 0 and self.expected > 0

    def line(self) -> str:
        """One line for an error message: what went wrong, with a few ids."""
        if self.ok:
            return f"exactly once: {self.read} reads of {self.expected} samples"
        if self.expected == 0:
            return "exactly-once check failed: the split holds no samples (was the dataset ingested?)"
        parts = [f"{n} {kind}" for kind, n in (("missing", self.missing), ("duplicated", self.duplicated),
                                               ("unexpected", self.unexpected)) if n]
        shown = "; ".join(f"{kind} e.g. {', '.join(ids)}" for kind, ids in self.examples.items() if ids)
        return f"exactly-once check failed: {', '.join(parts)} of {self.expected} samples ({shown})"


def exactly_once(expected: Iterable[str], per_rank: Sequence[Iterable[str]]) -> ExactlyOnce:
    """Compare the ranks' reads (any order, ranks in any order) with the expected ids."""
    wanted = set(expected)
    counts: Counter[str] = Counter()
    for ids in per_rank:
        counts.update(ids)
    read = sum(counts.values())
    missing = sorted(wanted - counts.keys())
    unexpected = sorted(counts.keys() - wanted)
    twice = sorted(i for i, n in counts.items() if n > 1)
    return ExactlyOnce(
        expected=len(wanted), read=read, distinct=len(counts), missing=len(missing),
        duplicated=read - len(counts), unexpected=len(unexpected),
        examples={"missing": missing[:EXAMPLES], "duplicated": twice[:EXAMPLES], "unexpected": unexpected[:EXAMPLES]})


def summarise_ranks(ranks: Sequence[RankResult]) -> dict:
    """The result row's rate columns: aggregate, the slowest rank's, and every rank's (ordered by rank)."""
    if not ranks:
        raise ValueError("no rank results to summarise")
    ordered = sorted(ranks, key=lambda r: r.rank)
    slowest = max(ordered, key=lambda r: r.wall_s)
    samples, nbytes = sum(r.samples for r in ordered), sum(r.bytes for r in ordered)
    wall = slowest.wall_s
    fastest_wall = min(r.wall_s for r in ordered)
    utilisations = [r.accelerator_utilisation for r in ordered]
    finite = [u for u in utilisations if math.isfinite(u)]
    return {
        "samples": samples,
        "bytes": nbytes,
        "seconds": wall,
        "samples_per_s": samples / wall if wall > 0 else float("nan"),
        "mb_per_s": nbytes / 1e6 / wall if wall > 0 else float("nan"),
        "slowest_rank": slowest.rank,
        "slowest_rank_samples_per_s": slowest.samples_per_s,
        "min_rank_samples_per_s": min((r.samples_per_s for r in ordered), key=_nan_last),
        "rank_imbalance": wall / fastest_wall if fastest_wall > 0 else float("nan"),
        "rank_samples": [r.samples for r in ordered],
        "rank_seconds": [round(r.wall_s, 4) for r in ordered],
        "rank_samples_per_s": [round(r.samples_per_s, 2) for r in ordered],
        "rank_hosts": [r.host for r in ordered],
        "rank_steps": [r.steps for r in ordered],  # few steps: the utilisation rests on little (first one excluded)
        "rank_first_step_s": [round(r.first_step_s, 4) if math.isfinite(r.first_step_s) else None for r in ordered],
        "rank_accelerator_utilisation": [round(u, 4) if math.isfinite(u) else None for u in utilisations],
        "accelerator_utilisation": sum(finite) / len(finite) if finite else float("nan"),
        "min_accelerator_utilisation": min(finite) if finite else float("nan"),
        **ranks_startup(ordered, wall),
    }


def ranks_startup(ranks: Sequence[RankResult], wall: float) -> dict:
    """time_to_first_batch_s (the last rank's first batch), steady_samples_per_s (samples after each rank's
    first batch over the longest reading time after it) and startup_fraction (the former over the run's wall
    time); NaN when no rank got a first batch."""
    started = [r for r in ranks if math.isfinite(r.first_batch_s)]
    if not started or wall <= 0:
        return {"time_to_first_batch_s": float("nan"), "steady_samples_per_s": float("nan"),
                "startup_fraction": float("nan")}
    first = max(r.first_batch_s for r in started)
    steady_time = max(r.wall_s - r.first_batch_s for r in started)
    steady_samples = sum(r.samples - r.first_batch_samples for r in started)
    return {"time_to_first_batch_s": first,
            "steady_samples_per_s": steady_samples / steady_time if steady_time > 0 and steady_samples > 0
            else float("nan"),
            "startup_fraction": first / wall}


def _nan_last(value: float) -> float:
    return value if math.isfinite(value) else math.inf
