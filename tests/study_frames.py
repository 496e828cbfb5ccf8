"""Synthetic study results (what a study run writes) for the report's tests: made in the test, never stored.

Rows carry the study-era columns (steady state, N emulated accelerators, in-run ceiling rows, topology) that
older results lack. Rates come from a small model (Little's law: at most window x samples per request / RTT,
capped by a service rate), seeded, so the plots have the shapes a real study shows.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

COUNT, MEAN_KB, BATCH = 2000, 110.0, 32
SERVICE = {"s3-objects": 600.0, "cassandra": 800.0, "s3-shards": 3000.0, "fs": 5000.0}  # samples/s at 0 ms
BACKEND = {"s3-objects": "s3-objects", "cassandra": "cassandra", "s3-shards": "s3-shards", "fs": "fs"}
SHARD_SAMPLES = 50  # s3-shards maxcount; 4 shard GETs in flight (where its "auto" window starts)
TOPOLOGY = {"topology_cassandra_nodes": 1, "topology_s3_nodes": 1, "topology_client_ranks": 1}
ENVIRONMENT = {"cpu": "Synthetic CPU", "cpu_count": 2, "gpus": [], "git_commit": "abc1234"}


def _rate(loader: str, rtt_ms: float, concurrency: int | str, rng: np.random.Generator) -> float:
    window = {"s3-shards": 4 * SHARD_SAMPLES}.get(loader, 64 if concurrency == "auto" else float(concurrency))
    bound = window / (rtt_ms / 1000) if rtt_ms > 0 and loader != "fs" else np.inf
    return round(float(min(SERVICE[loader], 0.8 * bound) * rng.normal(1.0, 0.03)), 1)


def _base(name: str, point_id: int, rep: int, loader: str, rtt: float) -> dict:
    return {"sweep": name, "point_id": point_id, "repetition": rep, "loader": loader,
            "backend": BACKEND.get(loader, loader.split(":")[-1]), "rtt_ms": rtt, "bandwidth_mbps": 0.0,
            "jitter_ms": 0.0, "shard_maxcount": SHARD_SAMPLES if loader == "s3-shards" else None,
            "shard_maxsize": 1e8 if loader == "s3-shards" else None, "prefetch_buffers": 2, "batch_size": BATCH,
            "workers": 0, "decode": False, "data_count": COUNT, "data_mean_kb": MEAN_KB, "epochs": 1,
            "status": "ok", "error": "", **TOPOLOGY, "git_commit": ENVIRONMENT["git_commit"]}


def _timing(rate: float, rtt: float) -> dict:
    ttfb = round(0.05 + 6 * rtt / 1000, 4)
    seconds = COUNT / rate + ttfb
    return {"samples": COUNT, "seconds": seconds, "samples_per_s": round(COUNT / seconds, 1),
            "steady_samples_per_s": rate, "time_to_first_batch_s": ttfb, "startup_fraction": ttfb / seconds,
            "startup_note": "" if ttfb / seconds < 0.05 else f"start-up {ttfb / seconds:.0%} of the measured time",
            "batches_per_s": COUNT / BATCH / seconds, "batch_p50_ms": 1000 * BATCH / rate,
            "batch_p95_ms": 1200 * BATCH / rate, "batch_p99_ms": 1500 * BATCH / rate,
            "batch_latencies_ms": json.dumps([round(1000 * BATCH / rate * f, 3) for f in (0.8, 1.0, 1.1, 1.5)])}


def latency_study(seed: int = 7, scale: float = 1.0) -> pd.DataFrame:
    """RTT 0/10/50/100 x concurrency 8/32/128/auto for three loaders and fs, with in-run ceilings."""
    rng = np.random.default_rng(seed)
    rows, point_id = [], 0
    for loader in SERVICE:
        for rtt in (0.0, 10.0, 50.0, 100.0):
            for concurrency in (8, 32, 128, "auto"):
                for rep in range(3):
                    rate = _rate(loader, rtt, concurrency, rng) * scale
                    rows.append({**_base("latency-hiding", point_id, rep, loader, rtt), "concurrency": concurrency,
                                 "accelerators": 1, "compute_ms": 0.0, **_timing(rate, rtt),
                                 "window": (8 + 24 * rtt / 50 if loader != "s3-shards" else None)
                                 if concurrency == "auto" else None})
                point_id += 1
    for backend in ("s3-objects", "cassandra", "s3-shards"):  # no ceiling for fs: the report must say so
        for rtt in (0.0, 10.0, 50.0, 100.0):
            for rep in range(3):
                rate = round(SERVICE[backend] * 1.3 * (1 / (1 + rtt / 200)) * float(rng.normal(1, 0.02)), 1) * scale
                rows.append({**_base("latency-hiding", point_id, rep, f"ceiling:{backend}", rtt), "concurrency": 32,
                             "accelerators": 1, "compute_ms": 0.0, "samples_per_s": rate,
                             "ceiling_program": "go/test-program"})
            point_id += 1
    frame = pd.DataFrame(rows)
    frame["concurrency"] = frame["concurrency"].astype(str)  # numbers and "auto": one type, as the sweep writes
    return frame


def accelerators_study(seed: int = 3) -> pd.DataFrame:
    """N = 1, 2, 4, 8 emulated accelerators at 50 ms compute per batch, two loaders, RTT 0 and 50 ms."""
    rng = np.random.default_rng(seed)
    rows, point_id = [], 0
    for loader, batches_per_s in (("s3-objects", 50.0), ("s3-shards", 150.0)):
        for rtt in (0.0, 50.0):
            for n in (1, 2, 4, 8):
                supply = batches_per_s / (1 + rtt / 100)
                au = min(1.0, supply * 0.05 / n)
                for rep in range(3):
                    per = [round(min(1.0, au * float(rng.normal(1.0, 0.01))), 4) for _ in range(n)]
                    rate = min(supply, n / 0.05) * BATCH
                    rows.append({**_base("accelerators", point_id, rep, loader, rtt), "concurrency": "32",
                                 "accelerators": n, "compute_ms": 50.0, **_timing(rate, rtt),
                                 "au_min": min(per), "au_mean": float(np.mean(per)),
                                 "au_per_accelerator": json.dumps(per), "accelerator_utilisation": min(per)})
                point_id += 1
    return pd.DataFrame(rows)


def write(folder: Path, frame: pd.DataFrame, question: str, name: str | None = None) -> Path:
    """A results folder: runs.parquet, config.json (with the question), environment.json, progress.json."""
    folder.mkdir(parents=True, exist_ok=True)
    frame.to_parquet(folder / "runs.parquet", index=False)
    loaders = [n for n in dict.fromkeys(frame["loader"]) if not n.startswith("ceiling:")]
    config = {"name": name or str(frame["sweep"].iloc[0]), "question": question, "loaders": loaders,
              "data": {"count": COUNT, "mean_kb": MEAN_KB}, "repetitions": 3, "epochs": 1,
              "ceilings": bool(frame["loader"].str.startswith("ceiling:").any())}
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    (folder / "environment.json").write_text(json.dumps(ENVIRONMENT, indent=2))
    (folder / "progress.json").write_text(json.dumps({"runs_done": len(frame), "runs_total": len(frame),
                                                      "complete": True}))
    return folder
