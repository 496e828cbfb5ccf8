"""S3 on obstore (Rust object_store): requests, signing, TLS and body reads run outside the GIL.

Why: with boto3 each GET costs a few ms of Python CPU, so on a small machine the loaders measured the
client, not the storage (`workbench/bench/s3_clients.py`, same objects, same run: obstore 1.4-2x boto3's
rate at 0.2-0.25x its client CPU per object, the CRT client 0.3x; the table is in docs/JOURNAL.md, "S3 client").

`NativeS3Store` is `workbench.storage.S3Store`: same constructor, same behaviour and the same one-line
errors as the boto3 store (`s3.BotoS3Store`) it extends. obstore does the data path: get, ranged get
(with an etag check), head, list, put (multipart above 8 MiB), delete. boto3 remains where obstore has
no equivalent: bucket head/create (`bucket_exists`, `ensure_bucket`), presigned GET URLs (`url`, for
the webdataset peer), the numbered-part `multipart()` upload (checkpoints upload parts out of order
and abort explicitly; obstore exposes only whole-object multipart puts), `from_client`, a store
over a boto3 client the user built (cortx API), which stays on that client for everything, a process
forked after obstore ran (obstore's runtime does not survive fork; see `_RUNTIME`), and, outside
this module, listings by a raw string prefix (OSS connector `from_prefix`: obstore lists whole folders),
the stack's health probe (`s3_client`) and the boto3 "Python ceiling" loop (`loaders.s3_objects.raw_ceiling`).
Timeouts: connect and every read of a body use settings.timeout_s, retries stop after S3_MAX_RETRIES or timeout_s.
With settings.tls the configured CA is the only trusted root, as with boto3 (`trusting_only`).
"""

from __future__ import annotations

import os
import re
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from workbench.clients.tls import STACK_CA_HINT, speaks_tls
from workbench.config import Settings
from workbench.errors import WorkbenchError, first_line
from workbench.storage.base import ObjectInfo, WrongSize
from workbench.storage.native_ext import load_extension
from workbench.storage.s3 import _ACCESS_CODES, MULTIPART_THRESHOLD, BotoS3Store

# Response headers obstore returns as attributes that are not user metadata (boto3's `Metadata` has none).
_STANDARD_ATTRIBUTES = {"content-type", "content-disposition", "content-encoding", "content-language",
                        "cache-control"}


def _missing_dependency() -> WorkbenchError:
    return WorkbenchError("the S3 storage layer needs the obstore package: `.venv/bin/pip install obstore` "
                          "(or `make venv`)")


# obstore runs every request on one tokio runtime per process, whose threads a fork does not copy: a child
# forked after obstore ran here hangs on its first request (obstore 0.12 is not fork-safe). Such a child
# (DataLoader worker_start="fork"; forkserver and spawn, the default, start clean) uses boto3 instead.
_RUNTIME = {"started": False, "inherited": False}
# Retries of a failed request (a dropped connection, a timeout, a 5xx) after the first try, within timeout_s:
# obstore's store and our extension's fetcher both retry this often.
S3_MAX_RETRIES = 2


def _after_fork_in_child() -> None:
    _RUNTIME["inherited"] = _RUNTIME["started"]


os.register_at_fork(after_in_child=_after_fork_in_child)


def native_store(settings: Settings, bucket: str, via_proxy: bool = False, connections: int = 64) -> Any:
    """An obstore S3 store for `bucket` at the configured endpoint: path-style, settings' login, timeouts, CA."""
    try:
        from obstore.store import S3Store as ObjectStoreS3
    except ImportError:
        raise _missing_dependency() from None
    if _RUNTIME["inherited"]:
        raise WorkbenchError("obstore cannot run in a process forked after it ran (its runtime's threads are gone): "
                             "use BotoS3Store here, or start workers with forkserver/spawn (WORKBENCH_WORKER_START)")
    _RUNTIME["started"] = True
    settings.check_credentials()
    access, secret = settings.s3_credentials()
    endpoint = settings.s3_endpoint(via_proxy)
    timeout = timedelta(seconds=settings.timeout_s)
    client: dict[str, Any] = {
        "allow_http": endpoint.startswith("http://"), "connect_timeout": timeout, "read_timeout": timeout,
        "timeout": timedelta(hours=1),  # whole request: large shards on slow links; stalls end by read_timeout
        "pool_max_idle_per_host": str(connections),
    }
    if settings.tls:
        client["root_certificate"] = settings.ca_file().read_text()
    with trusting_only(settings.ca_file() if settings.tls else None):
        return ObjectStoreS3(
            bucket,
            config={"endpoint": endpoint, "access_key_id": access, "secret_access_key": secret,
                    "region": settings.s3_region, "virtual_hosted_style_request": False},
            client_options=client,
            retry_config={"max_retries": S3_MAX_RETRIES, "retry_timeout": timeout,
                          "backoff": {"init_backoff": timedelta(milliseconds=100),
                                      "max_backoff": timedelta(seconds=1), "base": 2}},
        )


def range_reader(native: Any, settings: Settings, bucket: str, via_proxy: bool, connections: int) -> Any:
    """Our extension's `S3RangeReader` for `bucket`, with the settings `native_store` gives obstore: endpoint,
    login, region, timeouts, and the configured CA as the only trusted root."""
    settings.check_credentials()
    access, secret = settings.s3_credentials()
    ca = settings.ca_file().read_text() if settings.tls else None
    return native.S3RangeReader(settings.s3_endpoint(via_proxy), bucket, access, secret, settings.s3_region,
                                timeout_s=settings.timeout_s, connections=connections, root_certificate=ca)


_ENV_LOCK = threading.Lock()


@contextmanager
def trusting_only(ca_file: Path | None) -> Iterator[None]:
    """While the store is built, the system roots object_store loads are `ca_file` alone (None: unchanged).

    Why: object_store reads its roots from SSL_CERT_FILE/SSL_CERT_DIR when the client is built, and the
    peers point SSL_CERT_FILE at "system + stack CA" for the whole process; like boto3's verify=ca_file,
    a store with settings.tls must trust the configured CA only (an untrusted CA must fail).
    """
    if ca_file is None:
        yield
        return
    with _ENV_LOCK, tempfile.TemporaryDirectory(prefix="wb-no-roots-") as empty:
        saved = {name: os.environ.get(name) for name in ("SSL_CERT_FILE", "SSL_CERT_DIR")}
        os.environ["SSL_CERT_FILE"], os.environ["SSL_CERT_DIR"] = str(ca_file), empty
        try:
            yield
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


class NativeS3Store(BotoS3Store):
    """Keys under ``s3://bucket/prefix/`` through obstore (boto3 for the bucket, URLs and numbered multipart)."""

    _boto_only = False  # set by `from_client`: the user's boto3 client does everything

    def __init__(self, settings: Settings, bucket: str, prefix: str = "", via_proxy: bool = False,
                 connections: int = 64) -> None:
        super().__init__(settings, bucket, prefix, via_proxy, connections)
        self._native = None
        self._ranges: Any = None  # (S3RangeReader, SizeMismatch, reserve), made on first use; False: not installed
        self._checked_plain = False

    @property
    def native(self) -> Any:
        """The obstore store (thread-safe), made on first use like the boto3 client."""
        with self._lock:
            if self._native is None:
                self._native = native_store(self.settings, self.bucket, self.via_proxy, self.connections)
            return self._native

    @property
    def _on_boto(self) -> bool:
        """boto3 for everything: a user's boto3 client, or a process forked after obstore ran here."""
        return self._boto_only or _RUNTIME["inherited"]

    @property
    def native_reads(self) -> bool:
        """Whether native clients (obstore, `s3_batch`) may read for this store: not over a user's boto3 client."""
        return not self._boto_only

    @classmethod
    def from_client(cls, client: Any, bucket: str, prefix: str = "") -> NativeS3Store:
        store = super().from_client(client, bucket, prefix)
        store._boto_only = True
        return store  # type: ignore[return-value]

    # --------------------------------------------------------------------------------- data path

    def put(self, key: str, data: bytes, metadata: dict[str, str] | None = None) -> None:
        if self._on_boto:
            return super().put(key, data, metadata)
        import obstore

        large = len(data) > MULTIPART_THRESHOLD
        with self.native_errors(f"writing {self.full(key)}"):
            obstore.put(self.native, self.full(key), data, attributes=metadata or None, use_multipart=large,
                        chunk_size=MULTIPART_THRESHOLD, max_concurrency=4)

    def get(self, key: str) -> tuple[bytes, dict[str, str]]:
        if self._on_boto:
            return super().get(key)
        import obstore

        with self.native_errors(f"reading {self.full(key)}", missing=key):
            result = obstore.get(self.native, self.full(key))
            data = bytes(result.bytes())
        metadata = {k: str(v) for k, v in result.attributes.items() if k.lower() not in _STANDARD_ATTRIBUTES}
        return data, metadata

    def get_view(self, key: str) -> memoryview:
        if self._on_boto:
            return super().get_view(key)
        import obstore

        with self.native_errors(f"reading {self.full(key)}", missing=key):
            return memoryview(obstore.get(self.native, self.full(key)).bytes())  # the client's buffer: no copy

    def reserve_ranges(self, ranges: Sequence[tuple[int, int]] | np.ndarray) -> Any | None:
        """The ranges' `bytes` objects, made now by the extension (`reserve`), unseen until `get_ranges` fills
        them; None on obstore's path."""
        native = None if self._on_boto else self._range_reader()
        if native is None:
            return None
        reserve = native[2]
        return reserve(np.ascontiguousarray(np.asarray(ranges, dtype=np.int64).reshape(-1, 2)[:, 1]))

    def get_ranges(self, key: str, size: int, ranges: Sequence[tuple[int, int]] | np.ndarray,
                   reserved: Any | None = None) -> list[bytes]:
        """Through our extension's `S3RangeReader` (``native/src/ranges.rs``): one GET whose body lands in the
        ranges' `bytes` objects (`reserved`'s, when given), no whole-object buffer and no Python slicing (shards:
        about half the client CPU a MB of obstore's get plus slices)."""
        native = None if self._on_boto else self._range_reader()
        if native is None:
            return super().get_ranges(key, size, ranges)
        reader, size_mismatch, _ = native
        with self.native_errors(f"reading {self.full(key)}", missing=key):
            try:
                return reader.read_ranges(self.full(key), size, np.ascontiguousarray(ranges, dtype=np.int64),
                                          reserved)
            except size_mismatch as exc:
                raise WrongSize(exc.args[0]) from None

    def _range_reader(self) -> tuple[Any, type[Exception], Callable[[np.ndarray], Any]] | None:
        """The store's range reader (thread-safe, no threads of its own, so fork is harmless), the extension's
        SizeMismatch and its `reserve`, or None without the extension (obstore's get and Python slices then)."""
        with self._lock:
            if self._ranges is None:
                native = load_extension("shards are read whole and sliced in Python")
                self._ranges = False if native is None else (
                    range_reader(native, self.settings, self.bucket, self.via_proxy, self.connections),
                    native.SizeMismatch, native.reserve)
            return self._ranges or None

    def get_range(self, key: str, start: int, end: int, etag: str | None = None) -> bytes:
        if self._on_boto:
            return super().get_range(key, start, end, etag)
        import obstore

        options: dict[str, Any] = {"range": (start, end)}
        if etag:
            options["if_match"] = etag
        with self.native_errors(f"reading bytes {start}-{end - 1} of {self.full(key)}", missing=key, size=end - start):
            data = bytes(obstore.get(self.native, self.full(key), options=options).bytes())
        if len(data) != end - start:
            raise WorkbenchError(f"{self.where}/{key}: got {len(data)} bytes for range {start}-{end - 1} "
                                 "(the object changed or is shorter than expected)")
        return data

    def head(self, key: str) -> ObjectInfo:
        if self._on_boto:
            return super().head(key)
        import obstore

        with self.native_errors(f"reading {self.full(key)}", missing=key):
            meta = obstore.head(self.native, self.full(key))
        return ObjectInfo(int(meta["size"]), meta.get("e_tag"))

    def list(self, under: str = "") -> Iterator[tuple[str, int]]:
        if self._on_boto:
            yield from super().list(under)
            return
        import obstore

        base = self.full(under) if under else self.prefix
        cut = len(self.prefix) + 1 if self.prefix else 0
        with self.native_errors(f"listing {self.where}"):
            for batch in obstore.list(self.native, f"{base}/" if base else None, chunk_size=1000):
                for obj in batch:
                    yield obj["path"][cut:], int(obj["size"])

    def delete(self, keys: Iterable[str]) -> None:
        if self._on_boto:
            return super().delete(keys)
        import obstore

        full = [self.full(k) for k in keys]
        if full:
            with self.native_errors(f"deleting from {self.where}"):
                obstore.delete(self.native, full)

    # ------------------------------------------------------------------------------------ errors

    @contextmanager
    def native_errors(self, what: str, missing: str | None = None, size: int | None = None) -> Iterator[None]:
        """obstore failures -> KeyError (`missing` given, no such object) or the boto3 store's one-line errors."""
        try:
            import obstore.exceptions as obx
        except ImportError:
            raise _missing_dependency() from None
        try:
            yield
        except (obx.BaseError, FileNotFoundError, OSError) as exc:
            text = str(exc)
            if "NoSuchBucket" in text:
                raise self._client_error_like("NoSuchBucket", what) from exc
            if isinstance(exc, (FileNotFoundError, obx.NotFoundError)):
                if missing is not None:
                    raise KeyError(missing) from None
                raise WorkbenchError(f"S3 object missing while {what} in {self.where}") from exc
            if isinstance(exc, (obx.PermissionDeniedError, obx.UnauthenticatedError)) or "403 Forbidden" in text:
                code = next((c for c in sorted(_ACCESS_CODES) if f"<Code>{c}</Code>" in text), "403")
                raise self._access_denied(what, code) from exc
            if isinstance(exc, obx.PreconditionError):
                raise WorkbenchError(f"{self.where}: the object changed while {what}: read it again") from exc
            if size is not None and ("InvalidRange" in text or "416" in text or "Range" in text):
                raise WorkbenchError(f"{self.where}: got fewer than {size} bytes while {what} "
                                     "(the object changed or is shorter than expected)") from exc
            raise self._transport_error(text, what) from self._transient_cause(exc, text)

    def _client_error_like(self, code: str, what: str) -> WorkbenchError:
        return WorkbenchError(
            f"S3 bucket '{self.bucket}' does not exist at {self.endpoint}: ingest first (it creates the "
            "bucket unless create_bucket is off), or create it, or pass another --bucket"
        )

    def _transport_error(self, text: str, what: str) -> WorkbenchError:
        """TLS mismatches, an HTTPS-only server, an unreachable endpoint, server errors: one line each."""
        url = urlsplit(self.endpoint)
        found = re.search(r"InvalidCertificate\(\s*([A-Za-z]+)(?:\(\s*(?:[A-Za-z]+\(\s*)*([A-Za-z]+))?", text)
        if found:
            reason = found.group(2) or found.group(1)
            return WorkbenchError(
                f"cannot verify the TLS certificate of S3 at {self.endpoint} ({reason}): set "
                f"WORKBENCH_TLS_CA_FILE to the CA that signed it ({STACK_CA_HINT})")
        if url.scheme == "https" and re.search(r"InvalidMessage|InvalidContentType|CorruptMessage|HandshakeFailure",
                                               text):
            reason = (re.search(r"InvalidMessage\(\s*([A-Za-z]+)", text) or re.search(r"([A-Za-z]+Failure)", text))
            return WorkbenchError(
                f"TLS handshake with S3 at {self.endpoint} failed ({reason.group(1) if reason else 'not TLS'}): "
                "the server does not speak TLS there; set WORKBENCH_TLS=0 or start MinIO with --certs-dir")
        if "HTTP request to an HTTPS server" in text or (
                url.scheme == "http" and not self._checked_plain and "ConnectionRefused" not in text
                and "error sending request" in text and self._probe_tls(url)):
            return WorkbenchError(
                f"S3 at {self.endpoint} accepts HTTPS only: set WORKBENCH_TLS=1 and WORKBENCH_TLS_CA_FILE to its CA "
                f"({STACK_CA_HINT})")
        if "error sending request" in text or "timed out" in text.lower() or "Timeout" in text:
            return WorkbenchError(f"cannot reach S3 at {self.endpoint} while {what}: {_network_reason(text)}; "
                                  "is the stack up? (`workbench stack status`)")
        status = re.search(r"non-2xx status code: (\d{3})[^:]*(?::.*?<Code>([^<]+)</Code>)?", text, re.DOTALL)
        if status:
            return WorkbenchError(f"S3 error while {what} in {self.where}: {status.group(2) or status.group(1)}")
        return WorkbenchError(f"S3 request failed while {what} in {self.where}: {first_line(Exception(text))}")

    def _probe_tls(self, url: Any) -> bool:
        """Once per store: a plain client dropped by a TLS-only port (MinIO with certificates) vs a dead path."""
        self._checked_plain = True
        return speaks_tls(url.hostname or "", url.port or 80, min(self.settings.timeout_s, 3.0))

    @staticmethod
    def _transient_cause(exc: BaseException, text: str) -> BaseException:
        """The cause the retry policies judge: a dropped/refused connection, a timeout or a 5xx is transient."""
        if re.search(r"non-2xx status code: 5\d\d|SlowDown|ServiceUnavailable|InternalError", text):
            return ConnectionError(first_line(exc))
        if "timed out" in text.lower() or "Timeout" in text:
            return TimeoutError(first_line(exc))
        if re.search(r"error sending request|ConnectionReset|ConnectionRefused|connection closed|IncompleteBody"
                     r"|error decoding response body|BrokenPipe|UnexpectedEof", text):
            return ConnectionError(first_line(exc))
        return exc


def _network_reason(text: str) -> str:
    for kind in ("ConnectionRefused", "ConnectionReset", "TimedOut", "ConnectionAborted", "BrokenPipe",
                 "UnexpectedEof", "NotConnected"):
        if kind in text:
            return kind
    found = re.search(r'message: "([^"]+)"', text)
    return found.group(1) if found else "connection failed"
