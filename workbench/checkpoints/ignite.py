"""Training checkpoints in an Ignite cache: file objects for ``torch.save`` / ``torch.load`` (any byte stream).

The article stores checkpoints in IGFS, which Ignite 2.16+ no longer ships; this stores them as cache
entries instead, in one cache (default ``WORKBENCH_CHECKPOINTS``)::

    chunk:<name>:<version>:<000000..>   byte[] chunks of `chunk_bytes` (4 MiB) of the serialized stream
    ckpt:<name>                        the manifest (JSON string): version, chunk count, size, sha256

A writer uploads the chunks of a fresh random version while the caller writes, and only `close()` (or a
``with`` block left without an exception) writes the manifest, LAST, with an atomic ``get_and_put``: a
reader sees the old checkpoint or the new one, never a partial one. The replaced version's chunks are
then removed (by the one writer that replaced it, so concurrent writers leave no orphans). An exception
inside the ``with`` block, `abort()`, or a writer dropped without `close()` removes the new chunks and
leaves the previous checkpoint untouched. A reader checks the size and sha256 of what it assembled and
retries when the checkpoint was replaced under it.

    ckpt = IgniteCheckpoint(settings)
    with ckpt.writer("run1/epoch3") as f:
        torch.save(model.state_dict(), f)
    state = torch.load(ckpt.reader("run1/epoch3"))

Connections use the settings' Ignite login and, with ``WORKBENCH_TLS=1``, TLS (see `settings_endpoint`).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import time
import uuid
from typing import TYPE_CHECKING, Any

from workbench.clients.ignite import Endpoint, close_quietly, ignite_errors, settings_endpoint
from workbench.config import Settings
from workbench.errors import WorkbenchError, first_line

if TYPE_CHECKING:
    from pyignite import Client

CHUNK_BYTES = 4 * 2**20
DEFAULT_CACHE = "WORKBENCH_CHECKPOINTS"
FORMAT = "workbench-checkpoint"
READ_BATCH = 8  # chunks per get_all when reading (32 MiB)
READ_ATTEMPTS = 3


class IgniteCheckpoint:
    """Named checkpoints in one Ignite cache (see the module docstring)."""

    def __init__(self, settings: Settings | None = None, cache_name: str = DEFAULT_CACHE, via_proxy: bool = False,
                 chunk_bytes: int = CHUNK_BYTES, endpoint: Endpoint | None = None) -> None:
        if chunk_bytes < 1:
            raise WorkbenchError(f"chunk_bytes must be >= 1, got {chunk_bytes}")
        if not cache_name:
            raise WorkbenchError("IgniteCheckpoint needs a cache name")
        self.endpoint = endpoint or settings_endpoint(settings or Settings(), via_proxy)
        self.cache_name = cache_name
        self.chunk_bytes = chunk_bytes

    @staticmethod
    def manifest_key(name: str) -> str:
        return f"ckpt:{name}"

    @staticmethod
    def chunk_key(name: str, version: str, index: int) -> str:
        return f"chunk:{name}:{version}:{index:06d}"

    def _connect(self) -> tuple[Client, Any]:
        client = self.endpoint.connect()
        try:
            cache = client.get_or_create_cache(self.cache_name)
        except ignite_errors() as exc:
            close_quietly(client)
            raise WorkbenchError(f"cannot open Ignite cache {self.cache_name} at {self.endpoint.where}: "
                                 f"{first_line(exc)}") from exc
        return client, cache

    def writer(self, name: str) -> CheckpointWriter:
        """A binary file object; the checkpoint becomes visible when it is closed without error."""
        _check_name(name)
        return CheckpointWriter(self, name)

    def manifest(self, name: str) -> dict | None:
        client, cache = self._connect()
        try:
            return _parse(cache.get(self.manifest_key(name)), name, self.cache_name)
        finally:
            close_quietly(client)

    def exists(self, name: str) -> bool:
        return self.manifest(name) is not None

    def reader(self, name: str) -> io.BytesIO:
        """The checkpoint's bytes as a seekable file object (what ``torch.load`` needs)."""
        _check_name(name)
        client, cache = self._connect()
        try:
            for _ in range(READ_ATTEMPTS):
                manifest = _parse(cache.get(self.manifest_key(name)), name, self.cache_name)
                if manifest is None:
                    raise WorkbenchError(f"no checkpoint named '{name}' in Ignite cache {self.cache_name} "
                                         f"at {self.endpoint.where}")
                data = self._assemble(cache, name, manifest)
                if data is not None:
                    return io.BytesIO(data)
            raise WorkbenchError(f"checkpoint '{name}' in Ignite cache {self.cache_name} kept changing while being "
                                 f"read ({READ_ATTEMPTS} attempts)")
        except ignite_errors() as exc:
            raise WorkbenchError(f"reading checkpoint '{name}' from Ignite cache {self.cache_name} at "
                                 f"{self.endpoint.where} failed: {first_line(exc)}") from exc
        finally:
            close_quietly(client)

    def _assemble(self, cache, name: str, manifest: dict) -> bytes | None:
        """The checkpoint's bytes; None if it was replaced meanwhile (its chunks are gone)."""
        version, count = manifest["version"], int(manifest["chunks"])
        keys = [self.chunk_key(name, version, i) for i in range(count)]
        parts: list[bytes] = []
        for i in range(0, count, READ_BATCH):
            batch = keys[i:i + READ_BATCH]
            values = cache.get_all(batch)
            if any(k not in values for k in batch):
                current = _parse(cache.get(self.manifest_key(name)), name, self.cache_name)
                if current is None or current.get("version") != version:
                    return None  # replaced or deleted while reading: try again
                missing = next(k for k in batch if k not in values)
                raise WorkbenchError(f"checkpoint '{name}' in Ignite cache {self.cache_name} is damaged: "
                                     f"chunk {missing} is missing")
            parts.extend(bytes(values[k]) for k in batch)
        data = b"".join(parts)
        if len(data) != manifest["bytes"] or hashlib.sha256(data).hexdigest() != manifest["sha256"]:
            raise WorkbenchError(f"checkpoint '{name}' in Ignite cache {self.cache_name} is damaged: "
                                 f"{len(data)} bytes read, size or sha256 differs from its manifest")
        return data

    def delete(self, name: str) -> bool:
        """Remove a checkpoint (manifest first, then its chunks); False when there was none."""
        client, cache = self._connect()
        try:
            old = _parse(cache.get_and_remove(self.manifest_key(name)), name, self.cache_name)
            if old is None:
                return False
            self._remove_chunks(cache, name, old["version"], int(old["chunks"]))
            return True
        finally:
            close_quietly(client)

    def _remove_chunks(self, cache, name: str, version: str, count: int) -> None:
        keys = [self.chunk_key(name, version, i) for i in range(count)]
        for i in range(0, len(keys), 256):
            cache.remove_keys(keys[i:i + 256])

    def drop(self) -> None:
        """Destroy the whole cache (every checkpoint in it)."""
        client = self.endpoint.connect()
        try:
            if self.cache_name in client.get_cache_names():
                client.get_cache(self.cache_name).destroy()
        finally:
            close_quietly(client)


class CheckpointWriter(io.RawIOBase):
    """Uploads full chunks as they fill; `close()` commits (manifest last), `abort()` removes them."""

    def __init__(self, store: IgniteCheckpoint, name: str) -> None:
        super().__init__()
        self.store, self.name = store, name
        self.version = uuid.uuid4().hex
        self._buffer = bytearray()
        self._chunks = 0
        self._size = 0
        self._sha = hashlib.sha256()
        self._committed = self._aborted = False
        self._client, self._cache = store._connect()

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # type: ignore[override]
        if self.closed:
            raise ValueError("write to a closed checkpoint writer")
        view = memoryview(data).cast("B")
        self._buffer += view
        self._sha.update(view)
        self._size += len(view)
        while len(self._buffer) >= self.store.chunk_bytes:
            self._put(bytes(self._buffer[:self.store.chunk_bytes]))
            del self._buffer[:self.store.chunk_bytes]
        return len(view)

    def tell(self) -> int:
        return self._size

    def _put(self, chunk: bytes) -> None:
        key = self.store.chunk_key(self.name, self.version, self._chunks)
        try:
            self._cache.put(key, chunk)
        except ignite_errors() as exc:
            self.abort()
            raise WorkbenchError(f"writing checkpoint '{self.name}' to Ignite cache {self.store.cache_name} at "
                                 f"{self.store.endpoint.where} failed: {first_line(exc)}") from exc
        self._chunks += 1

    def close(self) -> None:
        """Commit: the last chunk, then the manifest (atomically replacing the previous one), then cleanup."""
        if self.closed:
            return
        if self._aborted:
            super().close()
            return
        try:
            if self._buffer or self._chunks == 0:
                self._put(bytes(self._buffer))
                self._buffer.clear()
            manifest = {"format": FORMAT, "version": self.version, "chunks": self._chunks, "bytes": self._size,
                        "sha256": self._sha.hexdigest(), "chunk_bytes": self.store.chunk_bytes,
                        "written_at": time.time()}
            try:
                old = self._cache.get_and_put(self.store.manifest_key(self.name), json.dumps(manifest))
            except ignite_errors() as exc:
                self.abort()
                raise WorkbenchError(f"committing checkpoint '{self.name}' to Ignite cache {self.store.cache_name} "
                                     f"failed: {first_line(exc)}") from exc
            self._committed = True
            previous = _parse(old, self.name, self.store.cache_name, strict=False)
            if previous is not None and previous.get("version") != self.version:
                try:
                    self.store._remove_chunks(self._cache, self.name, previous["version"], int(previous["chunks"]))
                except ignite_errors():
                    pass  # the new checkpoint is committed; leftover chunks only take space
        finally:
            close_quietly(self._client)
            super().close()

    def abort(self) -> None:
        """Forget this write: remove the chunks uploaded so far; the previous checkpoint stays."""
        if self._committed or self._aborted:
            return
        self._aborted = True
        try:
            self.store._remove_chunks(self._cache, self.name, self.version, self._chunks)
        except ignite_errors():
            pass
        finally:
            close_quietly(self._client)
            super().close()

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()
        else:
            self.close()

    def __del__(self) -> None:
        # Never commit from the garbage collector: a writer dropped without close() was not finished.
        with contextlib.suppress(Exception):  # nothing can be reported from a finalizer
            if not self.closed:
                self.abort()


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not name or len(name) > 1000:
        raise WorkbenchError(f"invalid checkpoint name {name!r}: use a non-empty string of at most 1000 characters")


def _parse(raw: Any, name: str, cache_name: str, strict: bool = True) -> dict | None:
    if raw is None:
        return None
    try:
        doc = json.loads(raw)
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ValueError("not a workbench checkpoint manifest")
        return doc
    except (TypeError, ValueError, RecursionError) as exc:  # RecursionError: deeply nested JSON
        if not strict:
            return None
        raise WorkbenchError(f"Ignite cache {cache_name}: key {IgniteCheckpoint.manifest_key(name)!r} is not a "
                             f"checkpoint manifest ({exc})") from None
