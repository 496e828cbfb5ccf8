"""N emulated accelerators taking batches from one loader at once (MLPerf Storage / DLIO style).

Why: the utilisation N accelerators get cannot be read off one consumer's rate (min(1, R·c/N) assumes a
loader that delivers evenly, on time, to everyone); it is measured. The loader's batches go into one
bounded queue (one batch waiting per accelerator); N threads each take a batch, "compute" on it for its
time (a sleep drawn from its `ComputeModel`, fixed or normal, as DLIO emulates a training step) and take
the next. Each step records its wait, its compute and when it ended (`AcceleratorTrace`), from which the
AU of each accelerator follows with its first step left out (`workbench.bench.metrics`).
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Iterator, Sequence

from workbench.bench.metrics import AcceleratorTrace, ComputeModel, EpochTrace

_DONE = None  # what a consumer takes when the loader has no more batches for it


def _accelerate(batches: queue.Queue, compute: ComputeModel, trace: AcceleratorTrace) -> None:
    """One accelerator: wait for a batch, compute for its drawn time, record the step; until _DONE."""
    while True:
        asked = time.perf_counter()
        batch = batches.get()
        if batch is _DONE:
            return
        waited = time.perf_counter() - asked
        spent = compute.draw()
        if spent:
            time.sleep(spent)
        trace.record(waited, spent, time.perf_counter())


def run_accelerators(batches: Iterator[tuple[int, int]], computes: Sequence[ComputeModel],
                     max_s: float = math.inf, max_batches: int | None = None) -> EpochTrace:
    """Feed `batches` ((samples, bytes) each) to len(computes) accelerators until the loader ends, `max_s`
    has passed or `max_batches` were taken; returns the epoch's trace once every accelerator has finished.

    Timing starts before the first batch is asked for, so a loader created lazily by `batches` has its
    connection set-up in `first_batch_s`. The caller closes `batches` (an epoch cut short closes its loader).
    """
    if not computes:
        raise ValueError("at least one accelerator")
    handoff: queue.Queue = queue.Queue(maxsize=len(computes))
    trace = EpochTrace(accelerators=[AcceleratorTrace() for _ in computes])
    threads = [threading.Thread(target=_accelerate, args=(handoff, compute, acc), name=f"accelerator-{i}", daemon=True)
               for i, (compute, acc) in enumerate(zip(computes, trace.accelerators, strict=True))]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    try:
        for index, (samples, nbytes) in enumerate(batches):
            if index == 0:
                trace.first_batch_s = time.perf_counter() - start
                trace.first_batch_samples = samples
            trace.samples += samples
            trace.bytes += nbytes
            handoff.put((samples, nbytes))
            if time.perf_counter() - start > max_s or (max_batches is not None and index + 1 >= max_batches):
                break
    finally:  # also when the loader fails: the accelerators finish what they hold, then stop
        for _ in threads:
            handoff.put(_DONE)
        for thread in threads:
            thread.join()
        trace.wall_s = time.perf_counter() - start
    return trace
