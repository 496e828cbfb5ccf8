"""Input-pipeline throughput, no model: storage -> loader -> DALI decode -> resize/crop/normalise.

    python -m pipelines.decode_bench --loader cassandra --dataset D --decode mixed --epochs 3
    python -m pipelines.decode_bench --loader cassandra-plugin --native --dataset D --decode mixed

What the model would be fed, as fast as the loader and the decoder can produce it: images/s per
epoch (the first epoch is a warm-up, untimed), median and spread. ``--decode mixed`` is nvJPEG on
the GPU (the hardware JPEG decoder on A100/H100), ``cpu`` is DALI's CPU decoder, ``none`` only moves
the encoded bytes (the loader's ceiling through DALI).

``--native`` (cassandra-plugin only) builds the cassandra-dali-plugin's own graph,
``fn.crs4.cassandra`` -> ``fn.decoders.image``, with the same ids, batch and operators, instead of
feeding the plugin's samples through ``fn.external_source``: the side-by-side of the reference
system and our Python loader on the same table.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from typing import Any

from pipelines.common import loader_options, run_cli
from workbench.errors import WorkbenchError

DECODES = ("mixed", "cpu", "none")


def native_plugin_pipeline(loader, ids: list[str], decode: str, size: int, threads: int):
    """fn.crs4.cassandra -> decode, built from the loader's plugin arguments (the plugin's own prefetching)."""
    from nvidia.dali import fn, pipeline_def

    from workbench.adapters.dali import decode_and_crop

    arguments = loader.reader_arguments(ids)
    gpu = decode == "mixed"

    @pipeline_def(batch_size=loader.config.batch_size, num_threads=threads, device_id=0 if gpu else None,
                  prefetch_queue_depth=2)
    def pipeline():
        jpegs, labels = fn.crs4.cassandra(**arguments)
        return (jpegs if decode == "none" else decode_and_crop(jpegs, gpu, size)), labels

    pipe = pipeline()
    pipe.build()
    return pipe


def loader_pipeline(source, decode: str, size: int, threads: int):
    """A loader's batches (in this process, or from worker processes) through fn.external_source -> decode."""
    from workbench.adapters.dali import image_pipeline

    return image_pipeline(source, source.batch_size, size=size, gpu=decode == "mixed", num_threads=threads,
                          decode=decode != "none", device_id=0 if decode == "mixed" else None)


def _sync(decode: str) -> None:
    if decode == "mixed":
        import torch

        torch.cuda.synchronize()


def run_native_epoch(loader, epoch: int, decode: str, size: int, threads: int) -> tuple[int, float]:
    ids = loader.shard_ids(epoch)
    pipe = native_plugin_pipeline(loader, ids, decode, size, threads)
    start = time.perf_counter()
    for _ in range(math.ceil(len(ids) / loader.config.batch_size)):
        pipe.run()
    _sync(decode)
    seconds = time.perf_counter() - start
    del pipe
    return len(ids), seconds


def run_loader_epoch(pipe, decode: str) -> tuple[int, float]:
    images = 0
    start = time.perf_counter()
    try:
        while True:
            out = pipe.run()
            images += len(out[0])
    except StopIteration:
        pipe.reset()
    _sync(decode)
    return images, time.perf_counter() - start


def bench(loader_name: str, dataset: str, decode: str = "mixed", epochs: int = 3, size: int = 224,
          threads: int = 4, native: bool = False, fetch_workers: int = 0, settings=None, **config: Any) -> dict:
    """Images/s of `epochs` timed epochs after one warm-up epoch; a row with median, min, max.

    `fetch_workers` > 0 fetches in that many processes (`ProcessBatchSource`) instead of this one.
    """
    from workbench.config import Settings
    from workbench.environment import describe_environment
    from workbench.loaders import make_loader

    if decode not in DECODES:
        raise ValueError(f"decode must be one of {', '.join(DECODES)}, got {decode!r}")
    from workbench.adapters.dali import BatchSource, ProcessBatchSource

    if native and loader_name != "cassandra-plugin":
        raise WorkbenchError("--native builds the cassandra-dali-plugin's own graph: use --loader cassandra-plugin")
    settings = settings or Settings()
    rates, counts = [], []
    with make_loader(loader_name, settings, dataset=dataset, **config) as loader:
        source = (ProcessBatchSource(loader_name, settings, fetch_workers, dataset=dataset, **config)
                  if fetch_workers else BatchSource(loader, loader.config.batch_size))
        pipe = None if native else loader_pipeline(source, decode, size, threads)
        for epoch in range(epochs + 1):
            if native:
                images, seconds = run_native_epoch(loader, epoch, decode, size, threads)
            else:
                images, seconds = run_loader_epoch(pipe, decode)
            if epoch > 0:  # epoch 0 warms connections, caches and the decoder
                rates.append(images / seconds)
                counts.append(images)
            print(f"{loader_name}{' (native)' if native else ''} decode={decode} epoch {epoch}: {images} images "
                  f"in {seconds:.2f} s = {images / seconds:.0f} images/s", flush=True)
        batch_size = loader.config.batch_size
        history = [] if fetch_workers else getattr(loader, "window_history", [])  # workers' windows stay there
        if history:
            print(f"{loader_name} window {' '.join(map(str, history))}; intervals (depth, samples/s, ms): "
                  f"{getattr(loader, 'window_intervals', [])}", flush=True)
        loader_config = {k: v for k, v in loader.config.model_dump().items() if "pass" not in k}
    if len(set(counts)) != 1:
        raise WorkbenchError(f"epochs delivered different counts {counts}: a loader lost or repeated samples")
    return {"pipeline": f"decode_bench-{loader_name}{'-native' if native else ''}", "loader": loader_name,
            "native": native, "fetch_workers": fetch_workers,
            "worker_start": settings.worker_start if fetch_workers else None, "tls": settings.tls, "dataset": dataset,
            "decode": decode, "size": size, "dali_threads": threads,
            "batch_size": batch_size, "window": history[-1] if history else None,
            "window_history": " ".join(map(str, history)), "epochs": epochs, "images_per_epoch": counts[0],
            "images_per_s_median": round(statistics.median(rates), 1), "images_per_s_min": round(min(rates), 1),
            "images_per_s_max": round(max(rates), 1), "loader_config": {k: str(v) for k, v in loader_config.items()},
            "environment": describe_environment(settings)}


def main(argv: list[str]) -> dict:
    p = argparse.ArgumentParser(prog="python -m pipelines.decode_bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--loader", required=True)
    p.add_argument("--dataset", required=True)
    p.add_argument("--decode", choices=DECODES, default="mixed")
    p.add_argument("--epochs", type=int, default=3, help="timed epochs (after one untimed warm-up epoch)")
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--threads", type=int, default=4, help="DALI CPU threads")
    p.add_argument("--native", action="store_true", help="cassandra-plugin: the plugin's own DALI graph")
    p.add_argument("--fetch-workers", type=int, default=0, help="fetch in this many processes (0: in this one)")
    p.add_argument("--results", default=None, help="append the row to this JSON-lines file")
    p.add_argument("-o", "--option", action="append", help="loader setting key=value (repeatable)")
    args = p.parse_args(argv)
    row = bench(args.loader, args.dataset, args.decode, args.epochs, args.size, args.threads, args.native,
                args.fetch_workers, **loader_options(args.option))
    print(f"{row['pipeline']} decode={row['decode']}: median {row['images_per_s_median']} images/s "
          f"(min {row['images_per_s_min']}, max {row['images_per_s_max']}, {row['epochs']} epochs of "
          f"{row['images_per_epoch']})", flush=True)
    if args.results:
        import json

        with open(args.results, "a") as out:
            out.write(json.dumps(row) + "\n")
    return row


if __name__ == "__main__":
    run_cli(main, sys.argv[1:])
