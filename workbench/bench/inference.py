"""The inference sweep: inferences/s and latency percentiles of Triton fed from a loader, per point.

A sweep point keeps ``concurrency`` requests of ``batch_size`` samples in flight (asyncio clients of
tritonclient, over HTTP or gRPC, every call with a timeout) and reports inferences/s and request
latency p50/p95/p99. Loading is part of the measurement for byte-fed models (a producer thread streams
the loader while requests are in flight; ``loader_wait_ms`` says how long requests waited for data).
For UUID-fed models the keys are listed before timing: the server does the reading.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.bench.metrics import percentile
from workbench.clients import triton_client
from workbench.clients.endpoints import triton_address, where
from workbench.config import Settings
from workbench.environment import describe_environment
from workbench.errors import WorkbenchError
from workbench.loaders import loader_class, make_loader
from workbench.results import RUNS, check_writable, write_results
from workbench.serving import (
    MODELS,
    InferenceError,
    cassandra_table,
    check_protocol,
    client_module,
    input_kind,
    pack_images,
    pack_uuids,
    server_error,
    tensors,
)

DEFAULT_RESULTS = RUNS / "triton-inference"

# ------------------------------------------------------------------------------------ measurement


@dataclass
class PointResult:
    latencies_ms: list[float] = field(default_factory=list)
    waits_ms: list[float] = field(default_factory=list)
    requests: int = 0
    inferences: int = 0
    payload_bytes: int = 0
    seconds: float = 0.0
    warmup_requests: int = 0


class _Producer(threading.Thread):
    """Builds `limit` request payloads in a thread; at most `depth` wait in the asyncio queue.

    The payload generator is closed at the end, so a loader it opened is closed here, not at GC time.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue, batches: Iterator[tuple[dict, int]],
                 limit: int, depth: int, consumers: int) -> None:
        super().__init__(name="triton-inference-producer", daemon=True)
        self.loop, self.queue, self.batches, self.limit, self.consumers = loop, queue, batches, limit, consumers
        self.slots = threading.Semaphore(depth)
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def _send(self, value) -> None:
        with contextlib.suppress(RuntimeError):  # the event loop is gone: the point was aborted
            self.loop.call_soon_threadsafe(self.queue.put_nowait, value)

    def run(self) -> None:
        try:
            for count, batch in enumerate(self.batches, start=1):
                while not self.slots.acquire(timeout=0.1):
                    if self.stop.is_set():
                        return
                if self.stop.is_set():
                    return
                self._send(batch)
                if count >= self.limit:
                    break
        except BaseException as exc:  # surfaced by the consumers
            self.error = exc
        finally:
            with contextlib.suppress(Exception):
                close = getattr(self.batches, "close", None)
                if close is not None:
                    close()
            for _ in range(self.consumers):
                self._send(None)


async def _run_point(settings: Settings, model: str, protocol: str, batches: Iterator[tuple[dict, int]],
                     concurrency: int, requests: int, warmup: int, parameters: dict | None, timeout_s: float,
                     via_proxy: bool) -> PointResult:
    """`warmup` + `requests` requests, `concurrency` in flight; throughput over the requests after warm-up."""
    from tritonclient.utils import InferenceServerException


    module = client_module(protocol, aio=True)
    url = where([triton_address(settings, protocol, via_proxy)])
    # gRPC with TLS when settings.tls (the same client set-up as every other Triton call)
    client = triton_client(settings, protocol, via_proxy, aio=True, timeout_s=timeout_s, connections=concurrency)
    call_options: dict = {"client_timeout": timeout_s} if protocol == "grpc" else {}
    outputs = [module.InferRequestedOutput(name) for name in MODELS[model][1]]
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()
    producer = _Producer(loop, queue, batches, limit=warmup + requests, depth=2 * concurrency, consumers=concurrency)
    result = PointResult(warmup_requests=warmup)
    done: list[tuple[float, int, float, float, int]] = []  # (end, inferences, latency ms, wait ms, bytes)
    try:
        try:
            ready = await client.is_model_ready(model, **call_options)
        except InferenceServerException as exc:
            raise server_error(exc, model, protocol, settings, via_proxy) from exc
        except Exception as exc:
            raise WorkbenchError(f"cannot reach Triton at {url} over {protocol}: {exc}; is the stack up? "
                                 "(`workbench stack status`)") from exc
        if not ready:
            raise WorkbenchError(f"model '{model}' is not ready on Triton at {url}: see `workbench stack logs triton`")
        producer.start()

        async def worker() -> None:
            while True:
                asked = time.perf_counter()
                item = await queue.get()
                producer.slots.release()
                if item is None:
                    return
                arrays, count = item
                start = time.perf_counter()
                try:
                    await client.infer(model, tensors(module, arrays), outputs=outputs, parameters=parameters,
                                       **call_options)
                except InferenceServerException as exc:
                    raise server_error(exc, model, protocol, settings, via_proxy) from exc
                except TimeoutError as exc:
                    raise InferenceError(f"Triton {model} over {protocol}: no answer within {timeout_s} s") from exc
                except Exception as exc:  # connection refused/reset ...
                    raise InferenceError(
                        f"Triton {model} over {protocol} at {url}: {type(exc).__name__}: {exc}") from exc
                end = time.perf_counter()
                done.append((end, count, (end - start) * 1000, (start - asked) * 1000,
                             sum(a.nbytes for a in arrays.values())))

        workers = [asyncio.ensure_future(worker()) for _ in range(concurrency)]
        try:
            await asyncio.gather(*workers)
        finally:
            for task in workers:
                task.cancel()
            producer.stop.set()
        if producer.error is not None:
            raise producer.error
    finally:
        producer.stop.set()
        with contextlib.suppress(Exception):
            await client.close()
        if producer.is_alive():  # let it close its loader (it may be inside a slow read)
            await asyncio.to_thread(producer.join, timeout_s)
    done.sort()
    if len(done) <= warmup:
        raise WorkbenchError(f"only {len(done)} requests ran, not more than the {warmup} warm-up requests: "
                             "the data set is too small for this point (ingest more samples or lower the warm-up)")
    measured = done[warmup:]
    result.seconds = measured[-1][0] - done[warmup - 1][0] if warmup else measured[-1][0] - (
        measured[0][0] - measured[0][2] / 1000)
    result.requests = len(measured)
    result.inferences = sum(d[1] for d in measured)
    result.latencies_ms = [d[2] for d in measured]
    result.waits_ms = [d[3] for d in measured]
    result.payload_bytes = sum(d[4] for d in measured)
    return result


def _byte_batches(open_loader: Callable[[], Any], batch_size: int) -> Iterator[tuple[dict, int]]:
    """Batches of encoded images from the loader, epoch after epoch (the loader stays open)."""
    with open_loader() as loader:
        for epoch in itertools.count():
            loader.set_epoch(epoch)
            seen = 0
            blobs: list[bytes] = []
            for item in loader:
                seen += 1
                blobs.append(item.data)
                if len(blobs) == batch_size:
                    yield pack_images(blobs), len(blobs)
                    blobs = []
            if blobs:
                yield pack_images(blobs), len(blobs)
            if seen == 0:
                raise WorkbenchError("the loader yielded no samples: is the dataset ingested for this loader?")


def _uuid_batches(keys: Sequence[str], batch_size: int) -> Iterator[tuple[dict, int]]:
    for at in itertools.count(step=batch_size):
        chunk = [keys[(at + i) % len(keys)] for i in range(batch_size)]
        yield pack_uuids(chunk), len(chunk)


def list_keys(settings: Settings, loader_name: str, dataset: str, limit: int, **loader_options) -> list[str]:
    """Up to `limit` sample keys of the dataset, as the loader yields them (read once, before timing)."""

    keys: list[str] = []
    with make_loader(loader_name, settings, dataset=dataset, **loader_options) as loader:
        for item in loader:
            keys.append(str(item.key))
            if len(keys) >= limit:
                break
    if not keys:
        raise WorkbenchError(f"loader {loader_name} found no samples of dataset '{dataset}': ingest it first")
    return keys


def _summary(point: PointResult) -> dict[str, float]:
    lat = point.latencies_ms
    seconds = point.seconds if point.seconds > 0 else float("nan")
    return {
        "requests": point.requests,
        "inferences": point.inferences,
        "seconds": round(point.seconds, 4),
        "inferences_per_s": point.inferences / seconds,
        "requests_per_s": point.requests / seconds,
        "latency_ms_p50": percentile(lat, 50),
        "latency_ms_p95": percentile(lat, 95),
        "latency_ms_p99": percentile(lat, 99),
        "latency_ms_mean": sum(lat) / len(lat) if lat else float("nan"),
        "latency_ms_max": max(lat) if lat else float("nan"),
        "loader_wait_ms_mean": sum(point.waits_ms) / len(point.waits_ms) if point.waits_ms else float("nan"),
        "payload_mb_per_s": point.payload_bytes / 1e6 / seconds,
    }


def _run_coroutine(coroutine):
    """asyncio.run, also from inside a running event loop (a Jupyter kernel): then on a private loop in a thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def check_grid(concurrencies: Iterable[int], batch_sizes: Iterable[int], samples: int) -> tuple[list, list]:
    """The grid of an inference measurement as lists, or one line saying which value is wrong."""
    concurrencies, batch_sizes = list(concurrencies), list(batch_sizes)
    for label, values in (("concurrency", concurrencies), ("batch size", batch_sizes)):
        if not values or any(not isinstance(v, int) or v < 1 for v in values):
            raise WorkbenchError(f"{label} values must be integers >= 1, got {values}")
    if max(batch_sizes) > 64:
        raise WorkbenchError(f"batch size {max(batch_sizes)} is over the models' max_batch_size of 64")
    if samples < 1:
        raise WorkbenchError(f"samples must be >= 1, got {samples}")
    return concurrencies, batch_sizes


def check_loader(settings: Settings, loader_name: str, dataset: str, split: str,
                 loader_options: dict[str, Any] | None) -> dict[str, Any]:
    """The loader options of an inference measurement; an unknown loader or invalid options fail before any I/O."""
    loader_class(loader_name)
    options = {"split": split, **(loader_options or {})}
    make_loader(loader_name, settings, dataset=dataset, **options).close()
    return options


def sweep_inference(
    settings: Settings,
    model: str,
    loader_name: str,
    dataset: str,
    concurrencies: Iterable[int],
    batch_sizes: Iterable[int],
    protocol: str | Sequence[str] = "grpc",
    *,
    split: str = "train",
    samples: int = 256,
    warmup: int | None = None,
    loader_options: dict[str, Any] | None = None,
    table: str | None = None,
    via_proxy: bool = False,
    timeout_s: float | None = None,
    results_dir: Path | None = DEFAULT_RESULTS,
    name: str | None = None,
    progress: Callable[[dict], None] | None = None,
) -> list[dict]:
    """Throughput and latency of `model` fed from `loader_name` at every (protocol, concurrency, batch size).

    Each point sends at least `samples` inferences after `warmup` requests (default: one per request in
    flight). `table` (keyspace.table) tells cass_to_inference where the dataset is (default: the Cassandra
    catalog entry of `dataset`/`split`, else the model's own default). Rows are returned and, unless
    `results_dir` is None, written as `<name>.csv`/`.json` there with the full configuration and environment.
    """
    kind = input_kind(model)
    protocols = [protocol] if isinstance(protocol, str) else list(protocol)
    for p in protocols:
        check_protocol(p)
    concurrencies, batch_sizes = check_grid(concurrencies, batch_sizes, samples)
    options = check_loader(settings, loader_name, dataset, split, loader_options)
    timeout = timeout_s or max(settings.timeout_s, 30.0)
    if results_dir is not None:
        check_writable(results_dir)
    parameters = None
    if kind == "uuid":
        table = table or cassandra_table(settings, dataset, split)
        parameters = {"table": table} if table else None
        keys = list_keys(settings, loader_name, dataset,
                         limit=max(samples + max(concurrencies) * max(batch_sizes) * 2, 1), **options)
    rows = []
    for proto, concurrency, batch_size in itertools.product(protocols, concurrencies, batch_sizes):
        requests = max(1, math.ceil(samples / batch_size))
        warm = concurrency if warmup is None else warmup
        if kind == "uuid":
            batches = _uuid_batches(keys, batch_size)
        else:
            batches = _byte_batches(lambda: make_loader(loader_name, settings, dataset=dataset, **options),
                                    batch_size)
        point = _run_coroutine(_run_point(settings, model, proto, batches, concurrency, requests, warm,
                                       parameters, timeout, via_proxy))
        row = {
            "model": model, "protocol": proto, "loader": loader_name, "dataset": dataset, "split": split,
            "input": kind, "concurrency": concurrency, "batch_size": batch_size, **_summary(point),
            "config": {"samples": samples, "warmup_requests": warm, "timeout_s": timeout, "via_proxy": via_proxy,
                       "table": table if kind == "uuid" else None, "loader_options": options,
                       "triton": where([triton_address(settings, proto, via_proxy)])},
        }
        rows.append(row)
        if progress is not None:
            progress(row)
    if results_dir is not None:
        name = name or f"{model}-{loader_name}-{dataset}"
        write_results(results_dir, name, rows, describe_environment(settings))
    return rows
