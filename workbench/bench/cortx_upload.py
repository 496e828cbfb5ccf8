"""`workbench bench ingest-cortx`: cortx's `upload_cv_dataset` into MinIO with 1 and N encoding workers, same run.

Why a command and not a test: a speed-up is a number of this machine at this moment (2 cores shared with
others give anything from 0.7x to 1.8x), so it is measured and printed, never asserted; the test asserts what
holds whatever the timing (`tests/services/test_cortx_upload.py`: the same shards for any `workers`).
Each repeat runs every worker count once, in turn, into a fresh folder of one bucket (deleted at the end), so the
counts share the machine's noise; a row gives the median of the repeats and its ratio to 1 worker's median.
"""

from __future__ import annotations

import statistics
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from workbench.compat.cortx import upload_cv_dataset
from workbench.config import Settings
from workbench.environment import describe_environment
from workbench.errors import WorkbenchError
from workbench.results import check_writable, write_results
from workbench.storage import s3_client


class NoiseImages:
    """A map-style torch-like dataset of (PIL image, int label): item i is the same noise image every time."""

    def __init__(self, count: int, side: int) -> None:
        self.count, self.side = count, side

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> tuple[Image.Image, int]:
        pixels = np.random.default_rng(index).integers(0, 256, (self.side, self.side, 3), dtype=np.uint8)
        return Image.fromarray(pixels), index % 7


@dataclass(frozen=True)
class UploadRow:
    """One worker count's uploads: the median of the repeats, and 1 worker's median over it (>1: faster)."""

    workers: int
    samples: int
    bytes: int
    side: int
    repeats: int
    seconds_median: float
    seconds_min: float
    seconds_max: float
    samples_per_s_median: float
    speedup_vs_1: float


def _delete(client: Any, bucket: str, prefix: str = "") -> None:
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if keys:
            client.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})


def bench_cortx_upload(settings: Settings, count: int, side: int, workers: list[int], repeats: int,
                       results_dir: Path) -> list[UploadRow]:
    """Upload `count` JPEGs of `side` x `side` with each worker count (1 always among them), `repeats` times."""
    if any(w < 1 for w in workers) or count < 1 or side < 1 or repeats < 1:
        raise WorkbenchError(f"workers, count, side and repeats must be >= 1, got workers={workers} count={count} "
                             f"side={side} repeats={repeats}")
    check_writable(results_dir)
    counts = sorted({1, *workers})
    client = s3_client(settings)
    bucket = f"wb-bench-cortx-{uuid.uuid4().hex[:10]}"
    dataset = NoiseImages(count, side)
    seconds: dict[int, list[float]] = {w: [] for w in counts}
    sizes: dict[int, int] = {}
    try:
        for repeat in range(repeats):
            for w in counts:
                folder = f"bench/{repeat}-{w}"
                start = time.perf_counter()
                summary = upload_cv_dataset(dataset, client=client, bucket=bucket, base_folder=folder, maxsize=1e7,
                                            workers=w)
                seconds[w].append(time.perf_counter() - start)
                if summary.samples != count:
                    raise WorkbenchError(f"upload_cv_dataset with {w} workers stored {summary.samples} of {count} "
                                         f"samples in s3://{bucket}/{folder}")
                sizes[w] = summary.bytes
                _delete(client, bucket, f"{folder}/")
    finally:
        _delete(client, bucket)
        client.delete_bucket(Bucket=bucket)
    base = statistics.median(seconds[1])
    rows = [UploadRow(w, count, sizes[w], side, repeats, statistics.median(seconds[w]), min(seconds[w]),
                      max(seconds[w]), count / statistics.median(seconds[w]), base / statistics.median(seconds[w]))
            for w in counts]
    write_results(results_dir, time.strftime("ingest-cortx-%Y%m%d-%H%M%S"), [asdict(r) for r in rows],
                  describe_environment(settings))
    return rows


def table_lines(rows: list[UploadRow]) -> list[str]:
    """The rows as aligned text: workers, seconds (median, min-max), samples/s, speed-up over 1 worker."""
    if not rows:
        return []
    head = rows[0]
    lines = [f"upload_cv_dataset, {head.samples} x {head.side}x{head.side} JPEG, median of {head.repeats} "
             f"repeat(s), same run",
             f"{'workers':>7}  {'s median':>8}  {'min-max':>13}  {'samples/s':>9}  {'vs 1 worker':>11}"]
    lines += [f"{r.workers:>7}  {r.seconds_median:>8.2f}  {f'{r.seconds_min:.2f}-{r.seconds_max:.2f}':>13}  "
              f"{r.samples_per_s_median:>9.0f}  {r.speedup_vs_1:>10.2f}x" for r in rows]
    return lines
