"""`workbench bench rss`: a loader's peak memory against the size of the dataset it reads.

Why: a loader that keeps something per sample (ids, delivered keys, a growing buffer) runs fine on a
benchmark's 2,000 samples and runs out of memory on a real dataset. Each loader reads one whole epoch of
datasets of different sizes (same sample size) on its batch path, each in a fresh process, so every peak
is that read's own; the row of the largest dataset says how its peak compares with the smallest's
(`rss_ratio`: 1.0 is flat).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from tqdm import tqdm

from workbench.bench.loaders import prepare_data
from workbench.concurrency import Concurrency
from workbench.config import Settings, get_settings
from workbench.environment import describe_environment
from workbench.errors import WorkbenchError
from workbench.loaders import loader_class, make_loader
from workbench.results import check_writable, write_results


def _status_mb(field: str) -> float:
    """A memory line of this process's /proc status in MB: VmRSS (now) or VmHWM (its peak).

    Not getrusage's ru_maxrss: Linux keeps that across exec, so a child would report its parent's peak.
    """
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    raise WorkbenchError(f"no {field} in /proc/self/status: peak RSS is measured on Linux only")


def read_epoch(loader_name: str, dataset: str, concurrency: Concurrency) -> dict:
    """In this process: one epoch of `dataset` on the batch path; samples, bytes, RSS before and peak after."""
    with make_loader(loader_name, get_settings(), dataset=dataset, concurrency=concurrency) as loader:
        start_mb = _status_mb("VmRSS")
        samples = nbytes = 0
        for batch in loader.batches():
            samples += len(batch)
            nbytes += batch.nbytes
        widest = max(getattr(loader, "window_history", None) or [0])
    peak_mb = _status_mb("VmHWM")
    return {"samples": samples, "bytes": nbytes, "start_rss_mb": start_mb, "peak_rss_mb": peak_mb,
            "widest_window": widest}


def measure(loader_name: str, dataset: str, concurrency: Concurrency, timeout_s: float) -> dict:
    """`read_epoch` in a fresh interpreter (a peak belongs to one read); its error line if it fails."""
    code = (f"import json; from workbench.bench.rss import read_epoch; "
            f"print(json.dumps(read_epoch({loader_name!r}, {dataset!r}, {concurrency!r})))")
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise WorkbenchError(f"{loader_name} did not read {dataset} within {timeout_s:.0f} s; "
                             "is the stack up (workbench stack status)?") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise WorkbenchError(f"{loader_name} reading {dataset} failed: {last}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def bench_rss(settings: Settings, loaders: list[str], counts: list[int], mean_kb: float, concurrency: Concurrency,
              repeats: int, results_dir: Path, timeout_s: float = 900.0) -> list[dict]:
    """Peak RSS of each loader reading each dataset size (median of `repeats` fresh processes; they take their
    settings from the environment and .env, as the command line does)."""
    check_writable(results_dir)
    counts = sorted(set(counts))
    if len(counts) < 2:
        raise WorkbenchError(f"--count {counts}: give at least two dataset sizes to compare (e.g. 2000 and 20000)")
    backends = sorted({loader_class(name).backend for name in loaders})
    datasets = {count: prepare_data(settings, backends, count, mean_kb) for count in counts}
    rows = []
    for name in tqdm(loaders, desc="bench rss", unit="loader"):
        for count in counts:
            runs = [measure(name, datasets[count], concurrency, timeout_s) for _ in range(repeats)]
            short = [r["samples"] for r in runs if r["samples"] < count]
            if short:
                raise WorkbenchError(f"{name} read {short[0]} of {count} samples of {datasets[count]}: not a whole "
                                     "epoch, so its peak would say nothing; check the dataset (workbench catalog)")
            peaks = [r["peak_rss_mb"] for r in runs]
            rows.append({"loader": name, "backend": loader_class(name).backend, "count": count,
                         "dataset": datasets[count], "mean_kb": mean_kb, "concurrency": concurrency,
                         "repeats": repeats, "samples": runs[0]["samples"], "bytes": runs[0]["bytes"],
                         "peak_rss_mb": statistics.median(peaks), "peak_rss_mb_min": min(peaks),
                         "peak_rss_mb_max": max(peaks),
                         "start_rss_mb": statistics.median(r["start_rss_mb"] for r in runs),
                         # requests in flight are memory too: an "auto" window that opened wider in a longer epoch
                         # (0: the loader keeps no window) explains growth that is not the dataset's
                         "widest_window": " ".join(str(r["widest_window"]) for r in runs)})
    add_rss_ratios(rows)
    write_results(results_dir, time.strftime("rss-%Y%m%d-%H%M%S"), rows, describe_environment(settings))
    return rows


def add_rss_ratios(rows: list[dict]) -> None:
    """`rss_ratio`: each row's peak over the same loader's peak on the smallest dataset (1.0: flat)."""
    smallest: dict[str, tuple[int, float]] = {}
    for row in rows:
        if row["loader"] not in smallest or row["count"] < smallest[row["loader"]][0]:
            smallest[row["loader"]] = (row["count"], row["peak_rss_mb"])
    for row in rows:
        row["rss_ratio"] = row["peak_rss_mb"] / smallest[row["loader"]][1]
