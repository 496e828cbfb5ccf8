"""`workbench bench rss`: a loader's peak memory against the size of the dataset it reads.

Why: a loader that keeps something per sample (ids, delivered keys, a growing buffer) runs fine on a
benchmark's 2,000 samples and runs out of memory on a real dataset. Each loader reads one whole epoch of
datasets of different sizes (same sample size) on its batch path, each in a fresh process, so every peak
is that read's own; the row of the largest dataset says how its peak compares with the smallest's
(`rss_ratio`: 1.0 is flat).

One epoch of a bigger dataset is also a longer read, and a longer read may peak higher for reasons that are
not the dataset's: an "auto" window that a short epoch ends before it has opened, a heap that fragments
until it settles. So the smallest dataset is also read for as many epochs as each bigger one has samples,
and `rss_ratio_same_samples` compares the two reads of equal length: what is left is the dataset's size.
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


def read_epochs(loader_name: str, dataset: str, concurrency: Concurrency, epochs: int = 1) -> dict:
    """In this process: `epochs` epochs of `dataset` on the batch path; samples, bytes, RSS before and peak after."""
    with make_loader(loader_name, get_settings(), dataset=dataset, concurrency=concurrency) as loader:
        start_mb = _status_mb("VmRSS")
        samples = nbytes = 0
        for epoch in range(epochs):
            loader.set_epoch(epoch)
            for batch in loader.batches():
                samples += len(batch)
                nbytes += batch.nbytes
        widest = max(getattr(loader, "window_history", None) or [0])
    peak_mb = _status_mb("VmHWM")
    return {"samples": samples, "bytes": nbytes, "start_rss_mb": start_mb, "peak_rss_mb": peak_mb,
            "widest_window": widest}


def measure(loader_name: str, dataset: str, concurrency: Concurrency, epochs: int, timeout_s: float) -> dict:
    """`read_epochs` in a fresh interpreter (a peak belongs to one read); its error line if it fails."""
    code = (f"import json; from workbench.bench.rss import read_epochs; "
            f"print(json.dumps(read_epochs({loader_name!r}, {dataset!r}, {concurrency!r}, {epochs!r})))")
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
    """Peak RSS of each loader reading each dataset size once, and the smallest for as many samples as each
    bigger one (median of `repeats` fresh processes; they take their settings from the environment and .env, as
    the command line does)."""
    check_writable(results_dir)
    counts = sorted(set(counts))
    if len(counts) < 2:
        raise WorkbenchError(f"--count {counts}: give at least two dataset sizes to compare (e.g. 2000 and 20000)")
    backends = sorted({loader_class(name).backend for name in loaders})
    datasets = {count: prepare_data(settings, backends, count, mean_kb) for count in counts}
    # each dataset once, then the smallest for as many samples as each bigger one (the reads of equal length)
    reads = [(count, 1) for count in counts] + [(counts[0], same_samples_epochs(counts[0], c)) for c in counts[1:]]
    rows = []
    for name in tqdm(loaders, desc="bench rss", unit="loader"):
        for count, epochs in reads:
            runs = [measure(name, datasets[count], concurrency, epochs, timeout_s) for _ in range(repeats)]
            short = [r["samples"] for r in runs if r["samples"] < count * epochs]
            if short:
                raise WorkbenchError(f"{name} read {short[0]} of {count * epochs} samples of {datasets[count]} "
                                     f"({epochs} epochs): not whole epochs, so its peak would say nothing; check the "
                                     "dataset (workbench catalog)")
            peaks = [r["peak_rss_mb"] for r in runs]
            rows.append({"loader": name, "backend": loader_class(name).backend, "count": count, "epochs": epochs,
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


def same_samples_epochs(smallest: int, count: int) -> int:
    """Epochs of the smallest dataset that read at least as many samples as one epoch of `count`."""
    return -(-count // smallest)


def add_rss_ratios(rows: list[dict]) -> None:
    """`rss_ratio`: each row's peak over the same loader's peak reading the smallest dataset once (1.0: flat);
    `rss_ratio_same_samples` (one epoch of a bigger dataset): over the smallest read for as many samples
    (None where that read is not among the rows)."""
    smallest: dict[str, int] = {}
    for row in rows:
        smallest[row["loader"]] = min(row["count"], smallest.get(row["loader"], row["count"]))
    peaks = {(row["loader"], row["count"], row["epochs"]): row["peak_rss_mb"] for row in rows}
    for row in rows:
        least = smallest[row["loader"]]
        row["rss_ratio"] = row["peak_rss_mb"] / peaks[row["loader"], least, 1]
        same = peaks.get((row["loader"], least, same_samples_epochs(least, row["count"])))
        bigger_once = row["epochs"] == 1 and row["count"] > least
        row["rss_ratio_same_samples"] = row["peak_rss_mb"] / same if bigger_once and same else None
