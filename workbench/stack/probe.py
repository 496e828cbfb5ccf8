"""Write and read one sample through every service, directly and through toxiproxy, and time it.

This is the first thing `make demo` shows: the stack is real, data goes in and comes back intact.
"""

from __future__ import annotations

import os
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from workbench.clients import cassandra_session, ignite_client, triton_client
from workbench.config import Settings
from workbench.errors import first_line
from workbench.storage import s3_client

PAYLOAD_BYTES = 110_000  # the mean size of an ImageNet JPEG


@dataclass
class ProbeResult:
    service: str
    path: str  # "direct" or "toxiproxy"
    bytes: int
    rtt_ms_median: float
    rtt_ms_min: float
    ok: bool
    detail: str = ""


def _timed(read: Callable[[], bytes], expected: bytes, repeats: int) -> tuple[list[float], bool]:
    times, ok = [], True
    for _ in range(repeats):
        start = time.perf_counter()
        got = read()
        times.append((time.perf_counter() - start) * 1000)
        ok = ok and got == expected
    return times, ok


def probe_cassandra(settings: Settings, payload: bytes, via_proxy: bool, repeats: int) -> tuple[list[float], bool]:
    with cassandra_session(settings, via_proxy) as session:
        session.execute(f"CREATE KEYSPACE IF NOT EXISTS {settings.cassandra_keyspace} WITH replication = "
                        f"{{'class': 'SimpleStrategy', 'replication_factor': {settings.cassandra_replication_factor}}}")
        table = f"{settings.cassandra_keyspace}.probe"
        session.execute(f"CREATE TABLE IF NOT EXISTS {table} (id uuid PRIMARY KEY, data blob)"
                        " WITH compression = {'enabled': 'false'}")
        key = uuid.uuid4()
        session.execute(f"INSERT INTO {table} (id, data) VALUES (%s, %s)", (key, payload))
        select = session.prepare(f"SELECT data FROM {table} WHERE id = ?")
        result = _timed(lambda: session.execute(select, (key,)).one().data, payload, repeats)
        session.execute(f"DELETE FROM {table} WHERE id = %s", (key,))
        return result


def probe_s3(settings: Settings, payload: bytes, via_proxy: bool, repeats: int) -> tuple[list[float], bool]:
    s3 = s3_client(settings, via_proxy)
    bucket = settings.s3_bucket
    if bucket not in {b["Name"] for b in s3.list_buckets()["Buckets"]}:
        s3.create_bucket(Bucket=bucket)
    key = f"probe/{uuid.uuid4()}"
    s3.put_object(Bucket=bucket, Key=key, Body=payload)
    try:
        return _timed(lambda: s3.get_object(Bucket=bucket, Key=key)["Body"].read(), payload, repeats)
    finally:
        s3.delete_object(Bucket=bucket, Key=key)


def probe_ignite(settings: Settings, payload: bytes, via_proxy: bool, repeats: int) -> tuple[list[float], bool]:
    with ignite_client(settings, via_proxy) as client:
        cache = client.get_or_create_cache("workbench_probe")
        key = str(uuid.uuid4())
        cache.put(key, payload)
        try:
            return _timed(lambda: bytes(cache.get(key)), payload, repeats)
        finally:
            cache.remove_key(key)


def probe_triton(settings: Settings, payload: bytes, via_proxy: bool, repeats: int) -> tuple[list[float], bool]:
    import tritonclient.grpc as grpcclient

    client = triton_client(settings, "grpc", via_proxy)
    blob = np.array([[payload]], dtype=np.object_)
    request = grpcclient.InferInput("INPUT", blob.shape, "BYTES")
    request.set_data_from_numpy(blob)

    def echo() -> bytes:
        return client.infer("echo", [request], client_timeout=settings.timeout_s).as_numpy("OUTPUT")[0][0]

    return _timed(echo, payload, repeats)


PROBES: dict[str, Callable[[Settings, bytes, bool, int], tuple[list[float], bool]]] = {
    "cassandra": probe_cassandra,
    "minio": probe_s3,
    "ignite": probe_ignite,
    "triton": probe_triton,
}


def probe_all(settings: Settings, repeats: int = 20) -> list[ProbeResult]:
    """One sample of PAYLOAD_BYTES written and read back `repeats` times per service and path."""
    payload = os.urandom(PAYLOAD_BYTES)
    results = []
    for service, probe in PROBES.items():
        for via_proxy in (False, True):
            path = "toxiproxy" if via_proxy else "direct"
            try:
                probe(settings, payload, via_proxy, 2)  # warm-up: connections, prepared statements
                times, ok = probe(settings, payload, via_proxy, repeats)
                results.append(ProbeResult(service, path, len(payload), statistics.median(times), min(times), ok,
                                           "" if ok else "payload came back different"))
            except Exception as exc:  # report every service, even when one fails
                results.append(ProbeResult(service, path, len(payload), float("nan"), float("nan"), False,
                                           first_line(exc, 160)))
    return results
