"""Inference fed from remote storage: samples streamed from any loader to NVIDIA Triton, measured.

Two ways to feed the same preprocess (DALI) + classifier (torch) graph:

* ``ensemble``: the client reads each sample with a registered loader (Cassandra, S3, Ignite, local
  files ...) and sends the encoded bytes;
* ``cass_to_inference``: the client sends only the sample's UUID; the server reads the blob from
  Cassandra itself (`cassandra_fetch`), as in cassandra-dali-plugin's Triton example.

A sweep point keeps ``concurrency`` requests of ``batch_size`` samples in flight (asyncio clients of
tritonclient, over HTTP or gRPC, every call with a timeout) and reports inferences/s and request
latency p50/p95/p99. Loading is part of the measurement for byte-fed models (a producer thread streams
the loader while requests are in flight; ``loader_wait_ms`` says how long requests waited for data).
For UUID-fed models the keys are listed before timing: the server does the reading.

Wire format (why not TYPE_STRING: see triton_models/preprocess/config.pbtxt): images go as zero-padded
uint8 rows plus their lengths (`pack_images`), UUIDs as their text in uint8 rows (`pack_uuids`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from workbench.config import Settings
from workbench.errors import WorkbenchError

# model -> (what the client sends, outputs a sweep asks for)
MODELS: dict[str, tuple[str, tuple[str, ...]]] = {
    "ensemble": ("bytes", ("CLASS",)),
    "cass_to_inference": ("uuid", ("CLASS",)),
    "preprocess": ("bytes", ("DECODE_DEVICE",)),
}
PROTOCOLS = ("http", "grpc")
DEFAULT_RESULTS = Path("results") / "triton-inference"
NP_TO_TRITON = {np.dtype(np.uint8): "UINT8", np.dtype(np.int64): "INT64", np.dtype(np.int32): "INT32",
                np.dtype(np.object_): "BYTES",
                np.dtype(np.float32): "FP32"}


class InferenceError(WorkbenchError):
    """Triton answered a request with an error (the server's message, which names the model and cause)."""

    def __init__(self, message: str, status: str | None = None) -> None:
        super().__init__(message)
        self.status = status


# ------------------------------------------------------------------------------------ wire format


def pack_images(blobs: Sequence[bytes]) -> dict[str, np.ndarray]:
    """IMAGE [batch, longest] uint8 (zero-padded rows) and IMAGE_SIZE [batch, 1] int64."""
    if not blobs:
        raise WorkbenchError("no images to send")
    sizes = np.array([[len(b)] for b in blobs], dtype=np.int64)
    rows = np.zeros((len(blobs), max(1, int(sizes.max()))), dtype=np.uint8)
    for i, blob in enumerate(blobs):
        rows[i, :len(blob)] = np.frombuffer(blob, dtype=np.uint8)
    return {"IMAGE": rows, "IMAGE_SIZE": sizes}


def pack_uuids(keys: Sequence[str | uuid.UUID]) -> dict[str, np.ndarray]:
    """UUID [batch, longest] uint8: each key's text, NUL-padded (canonical UUIDs are all 36 bytes)."""
    if not keys:
        raise WorkbenchError("no UUIDs to send")
    texts = [str(k).encode("utf-8") for k in keys]
    rows = np.zeros((len(texts), max(1, max(map(len, texts)))), dtype=np.uint8)
    for i, text in enumerate(texts):
        rows[i, :len(text)] = np.frombuffer(text, dtype=np.uint8)
    return {"UUID": rows}


def input_kind(model: str) -> str:
    if model not in MODELS:
        raise WorkbenchError(f"unknown inference model '{model}': choose from {', '.join(MODELS)}")
    return MODELS[model][0]


def _check_protocol(protocol: str) -> str:
    if protocol not in PROTOCOLS:
        raise WorkbenchError(f"unknown Triton protocol '{protocol}': use http or grpc")
    return protocol


def _module(protocol: str, aio: bool = False):
    if protocol == "http":
        if aio:
            import tritonclient.http.aio as module
        else:
            import tritonclient.http as module
    else:
        if aio:
            import tritonclient.grpc.aio as module
        else:
            import tritonclient.grpc as module
    return module


def _tensors(module, arrays: dict[str, np.ndarray]) -> list:
    tensors = []
    for name, array in arrays.items():
        tensor = module.InferInput(name, list(array.shape), NP_TO_TRITON[array.dtype])
        tensor.set_data_from_numpy(np.ascontiguousarray(array))
        tensors.append(tensor)
    return tensors


# How gRPC reports a connection that failed before any model saw the request (refused, closed, TLS).
_NOT_CONNECTED = ("failed to connect to all addresses", "connections to all backends failing")


def _server_error(exc: Exception, model: str, protocol: str, settings: Settings | None = None,
                  via_proxy: bool = False) -> InferenceError:
    """The server's answer as an InferenceError; a failed connection or a deadline (with `settings`) as one
    clear line naming host:port."""
    message = str(exc.message() if hasattr(exc, "message") and callable(exc.message) else exc)
    status = exc.status() if hasattr(exc, "status") and callable(exc.status) else None
    if settings is not None and message.lower().startswith(_NOT_CONNECTED):
        return InferenceError(_unreachable(settings, protocol, via_proxy, message), status)
    if settings is not None and str(status).endswith("DEADLINE_EXCEEDED"):
        where = f"{settings.host}:{settings.port(f'triton_{protocol}', via_proxy)}"
        return InferenceError(f"Triton {model} over {protocol} at {where}: no answer before the deadline ({message}); "
                              "is the server overloaded or stuck? (the timeout is WORKBENCH_TIMEOUT_S)", status)
    return InferenceError(f"Triton {model} over {protocol}: {message}", status)


def _unreachable(settings: Settings, protocol: str, via_proxy: bool, message: str) -> str:
    """Why Triton could not be reached and what to do: untrusted certificate, TLS mismatch, or down."""
    from workbench.clients import speaks_tls

    host, port = settings.host, settings.port(f"triton_{protocol}", via_proxy)
    where = f"{host}:{port}"
    reason = message.split("last error: ")[-1].splitlines()[0][:200]
    text = message.lower()
    if "certificate" in text:
        return (f"cannot verify the TLS certificate of Triton at {where} over {protocol} ({reason}): set "
                "WORKBENCH_TLS_CA_FILE to the CA that signed it")
    tls = protocol == "grpc" and settings.tls
    if protocol == "grpc" and ("closed" in text or "handshake" in text):
        speaks = speaks_tls(host, port, min(settings.timeout_s, 5.0))
        if tls and not speaks:
            return (f"TLS handshake with Triton at {where} over grpc failed ({reason}): the server does not speak "
                    "TLS on that port; set WORKBENCH_TLS to match the server's --grpc-use-ssl")
        if not tls and speaks:
            return (f"Triton at {where} over grpc closed the connection ({reason}): the port speaks TLS; set "
                    "WORKBENCH_TLS=1 (and WORKBENCH_TLS_CA_FILE to its CA)")
    return (f"cannot reach Triton at {where} over {protocol}{' with TLS' if tls else ''}: {reason}; is the stack "
            "up? (`workbench stack status`; WORKBENCH_TLS must match the server's gRPC TLS)")


# ------------------------------------------------------------------------------------ one request


def infer(settings: Settings, model: str, inputs: dict[str, np.ndarray], protocol: str = "http",
          outputs: Sequence[str] | None = None, parameters: dict[str, Any] | None = None,
          via_proxy: bool = False) -> dict[str, np.ndarray]:
    """One synchronous request; outputs by name. A server-side error raises InferenceError."""
    from tritonclient.utils import InferenceServerException

    from workbench.clients import triton_client

    module = _module(_check_protocol(protocol))
    client = triton_client(settings, protocol, via_proxy)
    requested = [module.InferRequestedOutput(name) for name in outputs] if outputs else None
    kwargs = {"client_timeout": settings.timeout_s} if protocol == "grpc" else {}
    try:
        result = client.infer(model, _tensors(module, inputs), outputs=requested, parameters=parameters, **kwargs)
    except InferenceServerException as exc:
        raise _server_error(exc, model, protocol, settings, via_proxy) from exc
    finally:
        with contextlib.suppress(Exception):
            client.close()
    response = result.get_response(as_json=True) if protocol == "grpc" else result.get_response()
    return {out["name"]: result.as_numpy(out["name"]) for out in response["outputs"]}


def classify_images(settings: Settings, blobs: Sequence[bytes], protocol: str = "http",
                    model: str = "ensemble", via_proxy: bool = False) -> dict[str, np.ndarray]:
    """CLASS [n] and LOGITS [n, classes] for encoded images, through the byte-fed ensemble."""
    out = infer(settings, model, pack_images(blobs), protocol, via_proxy=via_proxy)
    return {"CLASS": out["CLASS"].reshape(-1), "LOGITS": out["LOGITS"]}


def classify_uuids(settings: Settings, keys: Sequence[str | uuid.UUID], protocol: str = "http",
                   table: str | None = None, model: str = "cass_to_inference",
                   via_proxy: bool = False) -> dict[str, np.ndarray]:
    """CLASS, LOGITS and LABEL for samples Triton reads from Cassandra (`table`: keyspace.table, else the
    model's default)."""
    parameters = {"table": table} if table else None
    out = infer(settings, model, pack_uuids(keys), protocol, parameters=parameters, via_proxy=via_proxy)
    return {"CLASS": out["CLASS"].reshape(-1), "LOGITS": out["LOGITS"], "LABEL": out["LABEL"].reshape(-1)}


def cassandra_table(settings: Settings, dataset: str, split: str = "train") -> str | None:
    """The Cassandra data table holding `dataset`'s `split` (from the catalog), if it is there."""
    from workbench import catalog

    try:
        return catalog.locate(settings, "cassandra", dataset).get("tables", {}).get(split)
    except Exception:  # not ingested into Cassandra / Cassandra unreachable: the model's default table
        return None


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

    from workbench.clients import triton_client

    module = _module(protocol, aio=True)
    url = f"{settings.host}:{settings.port(f'triton_{protocol}', via_proxy)}"
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
            raise _server_error(exc, model, protocol, settings, via_proxy) from exc
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
                    await client.infer(model, _tensors(module, arrays), outputs=outputs, parameters=parameters,
                                       **call_options)
                except InferenceServerException as exc:
                    raise _server_error(exc, model, protocol, settings, via_proxy) from exc
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
    from workbench.loaders import make_loader

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
    from workbench.bench.metrics import percentile

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
        _check_protocol(p)
    concurrencies, batch_sizes = list(concurrencies), list(batch_sizes)
    for label, values in (("concurrency", concurrencies), ("batch size", batch_sizes)):
        if not values or any(not isinstance(v, int) or v < 1 for v in values):
            raise WorkbenchError(f"{label} values must be integers >= 1, got {values}")
    if max(batch_sizes) > 64:
        raise WorkbenchError(f"batch size {max(batch_sizes)} is over the models' max_batch_size of 64")
    if samples < 1:
        raise WorkbenchError(f"samples must be >= 1, got {samples}")
    from workbench.loaders import loader_class, make_loader

    loader_class(loader_name)  # unknown loader names fail before any I/O
    options = {"split": split, **(loader_options or {})}
    make_loader(loader_name, settings, dataset=dataset, **options).close()  # invalid options fail before any I/O
    timeout = timeout_s or max(settings.timeout_s, 30.0)
    if results_dir is not None:
        from workbench.results import check_writable

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
                       "triton": f"{settings.host}:{settings.port(f'triton_{proto}', via_proxy)}"},
        }
        rows.append(row)
        if progress is not None:
            progress(row)
    if results_dir is not None:
        from workbench.environment import describe_environment
        from workbench.results import write_results

        name = name or f"{model}-{loader_name}-{dataset}"
        write_results(results_dir, name, rows, describe_environment(settings))
    return rows


# ------------------------------------------------------------------------------------ command line


def _ints(values: list[str] | None, default: list[int]) -> list[int]:
    if not values:
        return default
    out = []
    for value in values:
        for part in str(value).split(","):
            if part.strip():
                try:
                    out.append(int(part))
                except ValueError:
                    raise WorkbenchError(f"'{part}' is not an integer") from None
    return out


ModelOpt = Annotated[str, typer.Option("--model", "-m", help="ensemble (client sends bytes) | cass_to_inference "
                                      "(client sends UUIDs, Triton reads Cassandra) | preprocess")]
ListOpt = list[str] | None


def inference_command(
    dataset: Annotated[str, typer.Option("--dataset", "-d", help="dataset name as ingested")],
    model: ModelOpt = "ensemble",
    loader: Annotated[str, typer.Option("--loader", "-l", help="registered loader feeding the client")] = "cassandra",
    protocol: Annotated[ListOpt, typer.Option("--protocol", "-p", help="http|grpc (repeatable, default grpc)")] = None,
    concurrency: Annotated[ListOpt, typer.Option("--concurrency", "-c",
                                                 help="requests in flight (repeatable or 1,4,8)")] = None,
    batch_size: Annotated[ListOpt, typer.Option("--batch-size", "-b",
                                                help="samples per request (repeatable or 1,8)")] = None,
    split: Annotated[str, typer.Option(help="split to read")] = "train",
    samples: Annotated[int, typer.Option(min=1, help="inferences measured per point (after warm-up)")] = 256,
    table: Annotated[str | None, typer.Option(help="cass_to_inference: keyspace.table (default: catalog)")] = None,
    option: Annotated[ListOpt, typer.Option("--option", "-o", help="loader setting KEY=VALUE (repeatable)")] = None,
    via_proxy: Annotated[bool, typer.Option(help="talk to Triton through toxiproxy")] = False,
    results_dir: Annotated[Path, typer.Option(help="CSV + JSON go here")] = DEFAULT_RESULTS,
    name: Annotated[str | None, typer.Option(help="results file name (default: model-loader-dataset)")] = None,
) -> list[dict]:
    """Triton inference throughput (inferences/s) and latency p50/p95/p99, fed from a loader."""
    from rich.console import Console
    from rich.table import Table

    loader_options: dict[str, Any] = {}
    for pair in option or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise WorkbenchError(f"loader option '{pair}' is not KEY=VALUE (e.g. -o concurrency=32)")
        loader_options[key.replace("-", "_")] = value
    console = Console()
    table_view = Table("protocol", "concurrency", "batch", "inferences/s", "p50 ms", "p95 ms", "p99 ms",
                       "loader wait ms", title=f"{model} fed by {loader} ({dataset}/{split})")

    def show(row: dict) -> None:
        console.print(f"{row['protocol']} c={row['concurrency']} b={row['batch_size']}: "
                      f"{row['inferences_per_s']:.1f} inferences/s, p50 {row['latency_ms_p50']:.1f} ms",
                      highlight=False)
        table_view.add_row(row["protocol"], str(row["concurrency"]), str(row["batch_size"]),
                           f"{row['inferences_per_s']:.1f}", f"{row['latency_ms_p50']:.1f}",
                           f"{row['latency_ms_p95']:.1f}", f"{row['latency_ms_p99']:.1f}",
                           f"{row['loader_wait_ms_mean']:.1f}")

    from workbench.config import get_settings

    rows = sweep_inference(
        get_settings(), model, loader, dataset, _ints(concurrency, [1, 4, 8]), _ints(batch_size, [1, 8]),
        protocol or ["grpc"], split=split, samples=samples, loader_options=loader_options, table=table,
        via_proxy=via_proxy, results_dir=results_dir, name=name, progress=show,
    )
    console.print(table_view)
    console.print(f"results: {results_dir}")
    return rows


inference_app = typer.Typer(no_args_is_help=True, help="Triton inference fed from remote storage.")
inference_app.command("sweep")(inference_command)


@inference_app.callback()
def _inference_group() -> None:
    """Triton inference fed from remote storage: `sweep` measures inferences/s and latency."""
