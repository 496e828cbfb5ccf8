"""`workbench bench ingest`: MB/s of every backend's writer on the same synthetic samples.

Samples are generated before timing starts (in parallel processes) and held in memory, so the
numbers measure the writers and the storage systems, not JPEG encoding.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from workbench.backends import BACKENDS, make_backend
from workbench.config import Settings
from workbench.data import Sample, SyntheticSource
from workbench.environment import describe_environment
from workbench.ingest import ingest
from workbench.results import check_writable, write_results


@dataclass
class InMemorySource:
    """A list of already generated samples, served as a Source."""

    name: str
    samples: list[Sample]
    classes: list[str]

    def __len__(self) -> int:
        return len(self.samples)

    def __iter__(self) -> Iterator[Sample]:
        return iter(self.samples)


def _generate(args: tuple[int, int, float, int, int]) -> list[Sample]:
    count, seed, mean_kb, start, stop = args
    source = SyntheticSource(count, seed=seed, mean_kb=mean_kb)
    return [source.sample(i) for i in range(start, stop)]


def generate(count: int, mean_kb: float, seed: int = 0, processes: int = 2) -> InMemorySource:
    """`count` synthetic JPEGs, generated in chunks by `processes` worker processes."""
    source = SyntheticSource(count, seed=seed, mean_kb=mean_kb)
    chunk = 250
    jobs = [(count, seed, mean_kb, start, min(count, start + chunk)) for start in range(0, count, chunk)]
    samples: list[Sample] = []
    with ProcessPoolExecutor(processes) as pool, tqdm(total=count, unit="img", desc="generate") as bar:
        for part in pool.map(_generate, jobs):
            samples += part
            bar.update(len(part))
    return InMemorySource(source.name, samples, source.classes)


def bench_ingest(settings: Settings, backends: list[str], count: int, mean_kb: float, repeats: int,
                 results_dir: Path) -> list[dict]:
    """Ingest the same samples into each backend `repeats` times (a fresh dataset each time)."""
    check_writable(results_dir)
    data = generate(count, mean_kb)
    nbytes = sum(len(s.data) for s in data.samples)
    rows = []
    for name in backends:
        runs = []
        for repeat in range(repeats):
            dataset = f"bench_ingest_{int(time.time())}_{repeat}"
            backend = make_backend(name, settings, dataset)
            try:
                summary = ingest(InMemorySource(dataset, data.samples, data.classes), backend, check_images=False)
            finally:
                backend.drop()
            runs.append(summary)
        rates = [r.mb_per_s for r in runs]
        rows.append({
            "backend": name, "samples": count, "bytes": nbytes, "mean_kb": nbytes / count / 1000,
            "repeats": repeats, "mb_per_s_median": statistics.median(rates), "mb_per_s_min": min(rates),
            "mb_per_s_max": max(rates), "samples_per_s_median": statistics.median(r.samples / r.seconds for r in runs),
            "options": backend.options.model_dump(),
        })
    write_results(results_dir, time.strftime("ingest-%Y%m%d-%H%M%S"), rows, describe_environment(settings))
    return rows


ALL_BACKENDS = list(BACKENDS)
