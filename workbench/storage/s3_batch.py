"""S3 GETs kept in flight from one thread: `workbench_native.S3Fetcher`, our Rust extension (``native/``).

Why: obstore's `get` blocks its calling thread, so a window of 32 GETs needs 32 Python threads, and every
GET costs a handoff to tokio's threads and back plus a turn at the GIL. The fetcher takes requests without
waiting and hands back whatever has finished in one call that releases the GIL (the `Collector` that
`workbench.concurrency.in_flight_collected` drives). Same object_store (the crate obstore wraps) and the same
settings as `s3_native.native_store`: endpoint, login, region, TLS roots, connect and read timeouts, retries.

A failed GET comes back as a `GetFailed`: the caller reads that key again through its `S3Store`, whose errors
are the workbench's one-line messages and whose retry policy judges the failure.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any

from workbench.config import Settings
from workbench.storage.native_ext import load_extension
from workbench.storage.s3_native import _RUNTIME, S3_MAX_RETRIES, trusting_only

COLLECT_AT_MOST = 256  # results handed back by one `collect`: the widest window
_INHERITED: list[S3Batch] = []  # fetchers a fork copied into this process: never freed (see LazyS3Batch)


@dataclass(frozen=True)
class GetFailed:
    """A GET the fetcher could not complete: `kind` is "not_found", "denied" or "other"; `text` as obstore's."""

    kind: str
    text: str


class S3Batch:
    """GETs of one bucket: `submit` starts one, `collect` returns finished ones as (token, (body, metadata)) or
    (token, GetFailed). `body` is bytes; `metadata` the object's user metadata (x-amz-meta-* without the prefix)."""

    def __init__(self, fetcher: Any) -> None:
        self._fetcher = fetcher

    def submit(self, token: int, key: str) -> None:
        self._fetcher.submit(token, key)

    def collect(self, timeout_s: float) -> list[tuple[int, Any]]:
        return [(token, (body, metadata) if failure is None else GetFailed(*failure))
                for token, body, metadata, failure in self._fetcher.wait(timeout_s, COLLECT_AT_MOST)]

    def cancel(self) -> None:
        self._fetcher.cancel_all()


def s3_batch(settings: Settings, bucket: str, via_proxy: bool, connections: int) -> S3Batch | None:
    """An `S3Batch` for `bucket` with `connections` pooled connections, or None where it is not used: the extension
    is missing (warned once), or this process was forked after a native S3 client (obstore's runtime, a fetcher)
    ran in it. Such a child reads through boto3, as the obstore store does there (a fetcher made in a child of a
    quiet process works; one the fork copied never does: `LazyS3Batch`)."""
    native = load_extension("S3 objects are read with one thread per GET in flight")
    if native is None or _RUNTIME["inherited"]:
        return None
    settings.check_credentials()
    access, secret = settings.s3_credentials()
    ca_file = settings.ca_file() if settings.tls else None
    with trusting_only(ca_file):  # the configured CA alone, as the obstore store trusts it
        fetcher = native.S3Fetcher(
            settings.s3_endpoint(via_proxy), bucket, access, secret, settings.s3_region, timeout_s=settings.timeout_s,
            connections=connections, root_certificate=ca_file.read_text() if ca_file else None,
            max_retries=S3_MAX_RETRIES)
    _RUNTIME["started"] = True  # a child forked from now on reads through boto3
    return S3Batch(fetcher)


class LazyS3Batch:
    """A loader's `S3Batch`: made on first use in each process, never pickled, dropped by `close()`.

    Why per process: loaders are pickled into DataLoader workers (or forked) before they read, and the
    fetcher's threads exist only in the process that started them.
    """

    def __init__(self, settings: Settings, bucket: str, via_proxy: bool, connections: int) -> None:
        self.settings, self.bucket, self.via_proxy, self.connections = settings, bucket, via_proxy, connections
        self._made: tuple[int, S3Batch | None] | None = None
        self._lock = threading.Lock()

    def get(self) -> S3Batch | None:
        with self._lock:
            if self._made is None or self._made[0] != os.getpid():
                self._forget()
                self._made = (os.getpid(), s3_batch(self.settings, self.bucket, self.via_proxy, self.connections))
            return self._made[1]

    def close(self) -> None:
        with self._lock:
            if self._made is not None and self._made[0] == os.getpid() and self._made[1] is not None:
                self._made[1].cancel()
            self._forget()

    def _forget(self) -> None:
        """Drop the batch; one a fork copied from the parent is kept for good: freeing its runtime would wait for
        threads the child does not have."""
        if self._made is not None and self._made[0] != os.getpid() and self._made[1] is not None:
            _INHERITED.append(self._made[1])
        self._made = None

    def __getstate__(self) -> dict[str, Any]:
        return {"settings": self.settings, "bucket": self.bucket, "via_proxy": self.via_proxy,
                "connections": self.connections}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)
