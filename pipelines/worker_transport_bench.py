"""How DataLoader workers hand samples to the training process: pickled bytes vs batches in shared memory.

    python -m pipelines.worker_transport_bench --loader fs --dataset D --workers 2 --repeats 3

`items`: `LoaderDataset` + `collate_raw`, every sample's bytes pickled through the worker's pipe.
`batches`: `BatchDataset` with `batch_size=None`, one uint8 tensor per batch passed in shared memory.
Both read the same dataset with the same workers and batch size, alternating, in one run; printed per
path: samples/s and the training process's own CPU per sample (what feeding costs the process that
should be training), median of the repeats with min..max.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable

from pipelines.common import run_cli


def epoch(path: str, loader: str, settings, dataset: str, workers: int, batch_size: int) -> tuple[int, float, float]:
    """(samples, seconds, main-process CPU seconds) of one epoch through `path`."""
    from torch.utils.data import DataLoader

    from workbench.adapters.torch import BatchDataset, LoaderDataset, collate_raw, worker_context

    context = worker_context(settings, workers)
    if path == "batches":
        data = BatchDataset(loader, settings, dataset=dataset, batch_size=batch_size)
        batches = DataLoader(data, batch_size=None, num_workers=workers, multiprocessing_context=context)
        count: Callable = lambda element: len(element["key"])  # noqa: E731
    else:
        data = LoaderDataset(loader, settings, dataset=dataset, batch_size=batch_size)
        batches = DataLoader(data, batch_size=batch_size, num_workers=workers, collate_fn=collate_raw,
                             multiprocessing_context=context)
        count = lambda batch: len(batch["key"])  # noqa: E731
    samples, start, cpu = 0, time.perf_counter(), time.process_time()
    for batch in batches:
        samples += count(batch)
    return samples, time.perf_counter() - start, time.process_time() - cpu


def bench(loader: str, dataset: str, workers: int = 2, batch_size: int = 32, repeats: int = 3,
          settings=None) -> list[dict]:
    from workbench.config import get_settings

    settings = settings or get_settings()
    runs: dict[str, list[tuple[int, float, float]]] = {"items": [], "batches": []}
    for _ in range(repeats):  # alternating, so both paths see the same machine
        for path in runs:
            runs[path].append(epoch(path, loader, settings, dataset, workers, batch_size))
    rows = []
    for path, results in runs.items():
        rates = [s / t for s, t, _ in results]
        cpu = [c / s * 1e6 for s, _, c in results]
        rows.append({"path": path, "loader": loader, "dataset": dataset, "workers": workers,
                     "batch_size": batch_size, "samples": results[0][0], "samples_per_s": statistics.median(rates),
                     "samples_per_s_min": min(rates), "samples_per_s_max": max(rates),
                     "main_cpu_us_per_sample": statistics.median(cpu), "main_cpu_min": min(cpu),
                     "main_cpu_max": max(cpu)})
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loader", required=True)
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    for row in bench(args.loader, args.dataset, args.workers, args.batch_size, args.repeats):
        print(f"{row['path']:8s} {row['samples_per_s']:8.0f} samples/s ({row['samples_per_s_min']:.0f}.."
              f"{row['samples_per_s_max']:.0f}), main process CPU {row['main_cpu_us_per_sample']:.0f} us/sample "
              f"({row['main_cpu_min']:.0f}..{row['main_cpu_max']:.0f})", flush=True)


if __name__ == "__main__":
    run_cli(main, sys.argv[1:])
