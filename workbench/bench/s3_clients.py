"""Which S3 client should the storage layer use? GETs of one dataset's objects through each, same run.

Clients: boto3 on threads (the old `S3Store.get`), obstore (Rust object_store; its asyncio API and its
blocking API on threads, which is how the `Store` interface calls it), the AWS CRT client under
s3torchconnector (on threads), `workbench.storage.S3Store` as it is now, and our `workbench_native` fetcher
(`storage/s3_batch.py`: object_store too, GETs submitted and collected in batches from one thread, what the
s3-objects loader reads with). Each repeat runs every
client once, in turn, so they share the machine's noise; the table gives the median of the repeats.
CPU is the process's (all threads, native ones included) per sample. Run it again with
``workbench bench s3-clients`` or ``python -m workbench.bench.s3_clients [dataset] [--repeats N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from workbench import catalog
from workbench.concurrency import in_flight_collected
from workbench.config import Settings
from workbench.errors import WorkbenchError
from workbench.storage import S3Store
from workbench.storage.native_ext import INSTALL_HINT
from workbench.storage.s3 import BotoS3Store
from workbench.storage.s3_batch import GetFailed, s3_batch
from workbench.storage.s3_native import native_store

DEFAULT_DATASET = "synthetic-classification-2000-s0"  # `workbench ingest --source synthetic:2000 -b s3-objects`
CLIENTS = ("boto3-threads", "obstore-async", "obstore-threads", "crt-threads", "S3Store", "native-batch")
Reader = Callable[[list[str]], int]  # reads every key (full keys in the bucket), returns bytes read


def dataset_keys(settings: Settings, dataset: str, split: str = "train") -> tuple[str, list[str]]:
    """(bucket, full keys) of an s3-objects dataset's split, from the catalog and its listing."""
    entry = catalog.entry(settings, "s3-objects", dataset)
    if entry is None:
        raise WorkbenchError(f"dataset '{dataset}' is not in s3-objects: "
                             f"`workbench ingest --source synthetic:2000 --backend s3-objects` first")
    bucket, prefix = entry.get("bucket") or settings.s3_bucket, entry.get("prefix", "").strip("/")
    store = BotoS3Store(settings, bucket, prefix)
    keys = [store.full(k) for k, _ in store.list(split) if not k.endswith(".txt")]
    if not keys:
        raise WorkbenchError(f"no objects under {store.where}/{split}: ingest the dataset first")
    return bucket, sorted(keys)


def _threads(get: Callable[[str], int], depth: int) -> Reader:
    def read(keys: list[str]) -> int:
        with ThreadPoolExecutor(depth) as pool:
            return sum(pool.map(get, keys))
    return read


def boto3_reader(settings: Settings, bucket: str, depth: int) -> Reader:
    store = BotoS3Store(settings, bucket, connections=depth + 4)
    return _threads(lambda key: len(store.get(key)[0]), depth)


def store_reader(settings: Settings, bucket: str, depth: int) -> Reader:
    store = S3Store(settings, bucket, connections=depth + 4)
    return _threads(lambda key: len(store.get(key)[0]), depth)


def obstore_readers(settings: Settings, bucket: str, depth: int) -> tuple[Reader, Reader]:
    import obstore

    store = native_store(settings, bucket, connections=depth + 4)

    async def all_async(keys: list[str]) -> int:
        gate = asyncio.Semaphore(depth)

        async def one(key: str) -> int:
            async with gate:
                return len(await (await obstore.get_async(store, key)).bytes_async())
        return sum(await asyncio.gather(*(one(k) for k in keys)))

    return (lambda keys: asyncio.run(all_async(keys)),
            _threads(lambda key: len(obstore.get(store, key).bytes()), depth))


def crt_reader(settings: Settings, bucket: str, depth: int) -> Reader:
    """s3torchconnector's CRT client: credentials only through the environment (it has no arguments for them)."""
    from s3torchconnector import S3ClientConfig
    from s3torchconnector._s3client import S3Client

    access, secret = settings.s3_credentials()
    os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"] = access, secret
    os.environ.pop("AWS_SESSION_TOKEN", None)
    client = S3Client(settings.s3_region, endpoint=settings.s3_endpoint(),
                      s3client_config=S3ClientConfig(force_path_style=True))
    return _threads(lambda key: len(client.get_object(bucket, key).read()), depth)


def batch_reader(settings: Settings, bucket: str, depth: int) -> Reader:
    """`workbench_native.S3Fetcher`: `depth` GETs in flight, collected in batches by this one thread."""
    batch = s3_batch(settings, bucket, via_proxy=False, connections=depth + 4)
    if batch is None:
        raise WorkbenchError(f"native-batch needs workbench_native: {INSTALL_HINT}, or leave the client out")

    def read(keys: list[str]) -> int:
        total = 0
        for key, got in in_flight_collected(keys, batch, depth, ordered=False):
            if isinstance(got, GetFailed):
                raise WorkbenchError(f"GET {bucket}/{key} failed: {got.text.splitlines()[0]}")
            total += len(got[0])
        return total
    return read


def run(settings: Settings, dataset: str = DEFAULT_DATASET, repeats: int = 3,
        concurrency: int = 32, clients: tuple[str, ...] = CLIENTS) -> list[dict]:
    """One row per client: median samples/s, MB/s and CPU µs/sample over `repeats` interleaved passes."""
    bucket, keys = dataset_keys(settings, dataset)
    readers: dict[str, Reader] = {}
    if "boto3-threads" in clients:
        readers["boto3-threads"] = boto3_reader(settings, bucket, concurrency)
    if {"obstore-async", "obstore-threads"} & set(clients):
        readers["obstore-async"], readers["obstore-threads"] = obstore_readers(settings, bucket, concurrency)
    if "crt-threads" in clients:
        readers["crt-threads"] = crt_reader(settings, bucket, concurrency)
    if "S3Store" in clients:
        readers["S3Store"] = store_reader(settings, bucket, concurrency)
    if "native-batch" in clients:
        readers["native-batch"] = batch_reader(settings, bucket, concurrency)
    readers = {name: readers[name] for name in clients}
    for read in readers.values():  # connections, credentials, first-use costs: outside the timing
        read(keys[:concurrency * 2])
    runs: dict[str, list[tuple[float, float, int]]] = {name: [] for name in readers}
    for _ in range(repeats):
        for name, read in readers.items():
            wall, cpu = time.perf_counter(), time.process_time()
            total = read(keys)
            runs[name].append((time.perf_counter() - wall, time.process_time() - cpu, total))
    rows = []
    for name, samples in runs.items():
        rate = statistics.median(len(keys) / wall for wall, _, _ in samples)
        rows.append({"client": name, "samples": len(keys), "bytes": samples[0][2], "concurrency": concurrency,
                     "repeats": repeats,
                     "samples_per_s": rate, "rates": [round(len(keys) / w) for w, _, _ in samples],
                     "mb_per_s": statistics.median(total / wall / 1e6 for wall, _, total in samples),
                     "cpu_us_per_sample": statistics.median(cpu / len(keys) * 1e6 for _, cpu, _ in samples)})
    base = next((r for r in rows if r["client"] == "boto3-threads"), rows[0])
    for r in rows:
        r["ratio_to_boto3"] = r["samples_per_s"] / base["samples_per_s"]
        r["cpu_ratio_to_boto3"] = r["cpu_us_per_sample"] / base["cpu_us_per_sample"]
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", nargs="?", default=DEFAULT_DATASET)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--clients", default=",".join(CLIENTS))
    args = parser.parse_args(argv)
    rows = run(Settings(), args.dataset, args.repeats, args.concurrency, tuple(args.clients.split(",")))
    print("\n".join(table_lines(rows)))


def table_lines(rows: list[dict]) -> list[str]:
    """The rows of `run` as a plain-text table (rates of every repeat at the end)."""
    lines = [f"{'client':16} {'samples/s':>10} {'x boto3':>8} {'MB/s':>7} {'CPU us/sample':>14} {'x boto3':>8}  runs"]
    lines += [f"{r['client']:16} {r['samples_per_s']:10.0f} {r['ratio_to_boto3']:8.2f} {r['mb_per_s']:7.1f} "
              f"{r['cpu_us_per_sample']:14.0f} {r['cpu_ratio_to_boto3']:8.2f}  {r['rates']}" for r in rows]
    return lines


if __name__ == "__main__":
    main()
