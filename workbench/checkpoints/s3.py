"""Checkpoints on S3 for torch.save / torch.load, like the OSS connector's OssCheckpoint.

    checkpoint = S3Checkpoint(settings)
    with checkpoint.writer("s3://bucket/run/epoch-3.pt") as f:
        torch.save(model.state_dict(), f)
    with checkpoint.reader("s3://bucket/run/epoch-3.pt") as f:
        state = torch.load(f)

Writer: a multipart upload. Bytes fill parts of `part_size` (8 MiB); each full part is uploaded at
once on a thread pool while torch keeps writing (at most `upload_concurrency` parts in flight, so
memory stays near (upload_concurrency + 1) x part_size). Closing uploads the last part and completes
the upload: only then does the object appear, whole. An exception inside the ``with`` block, a failed
part, or a writer garbage-collected without `close` aborts the upload: nothing partial is ever
visible, and an existing object of that name is left untouched. A checkpoint smaller than one part
goes up as a single PUT.

Reader: one HEAD for the size and ETag, then ranged GETs of `part_size` each, `prefetch_concurrency`
in flight, into one buffer of the object's size; reads and seeks (torch.load seeks to the zip's
central directory first) wait only for the parts they touch. Every range is read with ``If-Match``
on the ETag, so an object replaced during the read raises instead of mixing two versions.

`OssCheckpoint` is the same class under the OSS connector's name, for ``oss://bucket/key`` URIs.

OSS connector options, as for ``OssCheckpoint(endpoint=..., cred_path=..., config_path=...)``: `endpoint` is
the S3 endpoint URL used instead of the settings', `cred_path` the connector's JSON credential file (its keys
replace the settings'), `config_path` its JSON config: ``checkpointConfig.uploadConcurrency`` and
``prefetchConcurrency`` become the defaults of `upload_concurrency` and `prefetch_concurrency` (arguments
still win), ``logLevel``/``logPath`` a log file for this module's logger, ``auditPath`` an audit log with a
line per request (GET of each range, PUT of each part or object). ``checkpointConfig.prefetchWorker`` is
read (``prefetch_worker``) but changes nothing here: parts are fetched by I/O threads, bounded by the
prefetch concurrency.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, ClassVar

from workbench.config import Settings
from workbench.errors import WorkbenchError
from workbench.storage import MultipartUpload, Store
from workbench.storage.oss_access import OssAccess
from workbench.storage.s3 import parse_object_uri

MIB = 2**20
MIN_PART = 5 * MIB  # S3's smallest part (except the last)
MAX_PARTS = 10_000
DEFAULT_CONCURRENCY = 8
log = logging.getLogger(__name__)
Audit = Callable[..., None]  # OssAccess.audit(op, bucket, key, size, detail)


class S3Checkpoint:
    """Checkpoint reader and writer file objects on S3 (``s3://bucket/key`` URIs)."""

    scheme: ClassVar[str] = "s3"  # of the URIs `reader` and `writer` take (OssCheckpoint: "oss")

    def __init__(self, settings: Settings | None = None, *, via_proxy: bool = False, part_size: int = 8 * MIB,
                 upload_concurrency: int | None = None, prefetch_concurrency: int | None = None,
                 endpoint: str | None = None, cred_path: str | os.PathLike | None = None,
                 config_path: str | os.PathLike | None = None) -> None:
        self.settings = settings if settings is not None else Settings()
        self.access = OssAccess(self.settings, endpoint, cred_path, config_path, via_proxy)
        self.access.attach_logs(log)
        config = self.access.config.checkpoint if self.access.config is not None else None
        if upload_concurrency is None:
            upload_concurrency = config.upload_concurrency if config else DEFAULT_CONCURRENCY
        if prefetch_concurrency is None:
            prefetch_concurrency = config.prefetch_concurrency if config else DEFAULT_CONCURRENCY
        self.prefetch_worker = config.prefetch_worker if config else None
        if part_size < MIN_PART:
            raise WorkbenchError(f"part_size must be >= {MIN_PART} bytes (S3's minimum part), got {part_size}")
        if upload_concurrency < 1 or prefetch_concurrency < 1:
            raise WorkbenchError("upload_concurrency and prefetch_concurrency must be >= 1")
        self.via_proxy = via_proxy
        self.part_size = part_size
        self.upload_concurrency = upload_concurrency
        self.prefetch_concurrency = prefetch_concurrency
        self._stores: dict[str, Store] = {}
        self._lock = threading.Lock()

    def _store(self, bucket: str) -> Store:
        with self._lock:
            if bucket not in self._stores:
                connections = max(self.upload_concurrency, self.prefetch_concurrency) + 4
                self._stores[bucket] = self.access.store(bucket, connections)
            return self._stores[bucket]

    def writer(self, uri: str) -> S3CheckpointWriter:
        bucket, key = parse_object_uri(uri, self.scheme)
        return S3CheckpointWriter(self._store(bucket), key, self.part_size, self.upload_concurrency,
                                  self.access.audit, scheme=self.scheme)

    def reader(self, uri: str) -> S3CheckpointReader:
        bucket, key = parse_object_uri(uri, self.scheme)
        return S3CheckpointReader(self._store(bucket), key, self.part_size, self.prefetch_concurrency,
                                  self.access.audit, scheme=self.scheme)


class OssCheckpoint(S3Checkpoint):
    """The OSS connector's name: `S3Checkpoint` over ``oss://bucket/key`` URIs (any S3-compatible `endpoint`)."""

    scheme = "oss"


class S3CheckpointWriter(io.RawIOBase):
    """Write-only, non-seekable file whose bytes become one S3 object on `close` (module docstring)."""

    def __init__(self, store: Store, key: str, part_size: int, concurrency: int, audit: Audit | None = None, *,
                 scheme: str = "s3") -> None:
        super().__init__()
        self.store = store
        self.key = key
        self.uri = f"{scheme}://{store.bucket}/{key}"
        self.part_size = part_size
        self.concurrency = concurrency
        self._audit = audit
        self._buffer = bytearray()
        self._position = 0
        self._upload: MultipartUpload | None = None
        self._parts: dict[int, Future] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._finished = False  # completed or aborted

    # ------------------------------------------------------------------------------------ file API

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def write(self, data: Any) -> int:
        if self.closed or self._finished:
            raise ValueError(f"write to closed checkpoint writer {self.uri}")
        view = memoryview(data).cast("B")
        n = len(view)
        try:
            while view:
                take = min(self.part_size - len(self._buffer), len(view))
                self._buffer += view[:take]
                view = view[take:]
                if len(self._buffer) >= self.part_size:
                    part, self._buffer = bytes(self._buffer), bytearray()
                    self._submit(part)
        except BaseException:
            self.abort()
            raise
        self._position += n
        return n

    def close(self) -> None:
        """Upload what is left and complete the upload (the object appears now); abort on any failure."""
        if self._finished:
            super().close()
            return
        try:
            if self._upload is None:
                self.store.put(self.key, bytes(self._buffer))
                self._audited("PUT", len(self._buffer))
            else:
                if self._buffer:
                    part, self._buffer = bytes(self._buffer), bytearray()
                    self._submit(part)
                self._upload.complete([(n, f.result()) for n, f in sorted(self._parts.items())])
            self._finished = True
            log.info("wrote checkpoint %s: %d bytes in %d part(s)", self.uri, self._position, max(1, len(self._parts)))
        except BaseException:
            log.error("writing checkpoint %s failed: upload aborted, nothing written", self.uri)
            self.abort()
            raise
        finally:
            self._shutdown()
            self._buffer = bytearray()
            super().close()

    def abort(self) -> None:
        """Drop everything written: no object appears (an existing one is left as it was)."""
        if self._finished:
            return
        self._finished = True
        for future in self._parts.values():
            future.cancel()
        self._shutdown()
        self._buffer = bytearray()
        if self._upload is not None:
            upload, self._upload = self._upload, None
            upload.abort()
        super().close()

    def __exit__(self, exc_type: Any, *rest: Any) -> None:
        if exc_type is not None:
            self.abort()
        else:
            self.close()

    def __del__(self) -> None:
        # Never complete an upload nobody closed: an unfinished writer is aborted, not committed.
        with contextlib.suppress(Exception):  # interpreter shutdown or no network: nothing more to do
            self.abort()

    # ------------------------------------------------------------------------------------ uploading

    def _submit(self, part: bytes) -> None:
        if self._upload is None:
            self._upload = self.store.multipart(self.key)
            self._pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="ckpt-upload")
        number = len(self._parts) + 1
        if number > MAX_PARTS:
            raise WorkbenchError(f"{self.uri}: more than {MAX_PARTS} parts: use a bigger part_size")
        # Bounded memory: wait while `concurrency` parts are still uploading; a failed part fails the write.
        while True:
            running = [f for f in self._parts.values() if not f.done()]
            for f in self._parts.values():
                if f.done() and f.exception() is not None:
                    raise f.exception()
            if len(running) < self.concurrency:
                break
            wait(running, return_when=FIRST_COMPLETED)
        assert self._pool is not None
        self._parts[number] = self._pool.submit(self._put_part, number, part)

    def _put_part(self, number: int, part: bytes) -> str:
        assert self._upload is not None
        tag = self._upload.put_part(number, part)
        self._audited("PUT", len(part), f"part {number}")
        return tag

    def _audited(self, op: str, size: int, detail: str = "") -> None:
        if self._audit is not None:
            self._audit(op, self.store.bucket, self.key, size, detail)

    def _shutdown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


class S3CheckpointReader(io.RawIOBase):
    """Read-only, seekable file over one S3 object, fetched by parallel ranged GETs (module docstring)."""

    def __init__(self, store: Store, key: str, part_size: int, concurrency: int, audit: Audit | None = None, *,
                 scheme: str = "s3") -> None:
        super().__init__()
        self.store = store
        self.key = key
        self._audit = audit
        self.uri = f"{scheme}://{store.bucket}/{key}"
        try:
            head = store.head(key)
        except KeyError:
            raise WorkbenchError(
                f"checkpoint {self.uri} does not exist (no such object, or no bucket '{store.bucket}')") from None
        self.size = head.size
        self._etag = head.etag
        log.info("reading checkpoint %s: %d bytes, %d-byte ranges, %d in flight", self.uri, self.size, part_size,
                 concurrency)
        self._data = bytearray(self.size)
        self._view = memoryview(self._data)
        self._position = 0
        self.part_size = part_size
        starts = range(0, self.size, part_size)
        self._pool = ThreadPoolExecutor(max(1, min(concurrency, len(starts))), thread_name_prefix="ckpt-read")
        self._chunks = [self._pool.submit(self._fetch, start, min(start + part_size, self.size)) for start in starts]

    def _fetch(self, start: int, end: int) -> None:
        self._view[start:end] = self.store.get_range(self.key, start, end, self._etag)
        if self._audit is not None:
            self._audit("GET", self.store.bucket, self.key, end - start, f"bytes={start}-{end - 1}")

    def _ready(self, start: int, end: int) -> None:
        """Wait for the parts covering [start, end)."""
        if end <= start:
            return
        for i in range(start // self.part_size, (end - 1) // self.part_size + 1):
            self._chunks[i].result()

    # ------------------------------------------------------------------------------------ file API

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if self.closed:
            raise ValueError(f"seek on closed checkpoint reader {self.uri}")
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self.size}.get(whence)
        if base is None:
            raise ValueError(f"invalid whence {whence}")
        position = base + offset
        if position < 0:
            raise ValueError(f"negative seek position {position}")
        self._position = position
        return position

    def readinto(self, buffer: Any) -> int:
        if self.closed:
            raise ValueError(f"read of closed checkpoint reader {self.uri}")
        out = memoryview(buffer).cast("B")
        start = min(self._position, self.size)
        end = min(start + len(out), self.size)
        self._ready(start, end)
        out[: end - start] = self._view[start:end]
        self._position = end
        return end - start

    def read(self, size: int | None = -1) -> bytes:
        if self.closed:
            raise ValueError(f"read of closed checkpoint reader {self.uri}")
        start = min(self._position, self.size)
        end = self.size if size is None or size < 0 else min(start + size, self.size)
        self._ready(start, end)
        self._position = end
        return bytes(self._view[start:end])

    def readall(self) -> bytes:
        return self.read(-1)

    def close(self) -> None:
        if not self.closed:
            for chunk in self._chunks:
                chunk.cancel()
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._view.release()
            self._data = bytearray()
        super().close()
