"""Files as chunked byte arrays in Ignite caches: the store under checkpoints and the ``ignite://`` file system.

Why: IGFS, the article's file system for checkpoints and TensorBoard event files, is gone from Ignite
2.16+, and one cache entry per file would not do (a multi-GB checkpoint as one value: one huge
message, all of it in the client's and the server's memory at once). A file ``name`` is instead::

    <manifest prefix><name>                     the manifest (JSON string): version, chunk count, size, sha256
    <chunk prefix><name>:<version>:<000000..>   byte[] chunks of `chunk_bytes` (4 MiB) of its bytes

in a manifest cache ``C`` and its chunk cache ``C_CHUNKS`` (`chunk_cache_of`): a listing scans the small
manifests only, never the chunks (a thin-client scan cannot leave values out). A writer uploads the
chunks of a fresh random version while the caller writes; only `close()` (or a ``with`` block left
without an exception) writes the manifest, LAST, with an atomic ``get_and_put``: a reader sees the old
file or the new one, never a partial one. The replaced version's chunks are then removed (by the one
writer that replaced it, so concurrent writers leave no orphans). An exception inside the ``with``
block, `abort()`, or a writer dropped without `close()` removes the new chunks and leaves the previous
file untouched. A whole-file reader checks size and sha256 and retries when the file was replaced under
it; a ranged reader (`read_range`) reads only the chunks it needs and refuses a file replaced since its
manifest was read.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from workbench.clients.ignite import Endpoint, close_quietly, ignite_errors
from workbench.errors import WorkbenchError, first_line

if TYPE_CHECKING:
    from pyignite import Client

CHUNK_BYTES = 4 * 2**20
MANIFEST_PREFIX, CHUNK_PREFIX = "file:", "chunk:"
CHUNKS_SUFFIX = "_CHUNKS"  # the chunk cache of manifest cache C is C_CHUNKS
FORMAT = "workbench-checkpoint"  # every chunked file's manifest (the checkpoints' name came first)
READ_BATCH = 8  # chunks per get_all when reading (32 MiB)
READ_ATTEMPTS = 3
REMOVE_BATCH = 256


def chunk_cache_of(manifest_cache: str) -> str:
    return f"{manifest_cache}{CHUNKS_SUFFIX}"


class FileChanged(WorkbenchError):
    """The file was replaced or removed while it was read (its chunks are gone): open it again."""


@dataclass
class Session:
    """One connection and the two caches of a `ChunkedFiles` (the same cache object when they coincide)."""

    client: Client
    manifests: Any
    chunks: Any

    def close(self) -> None:
        close_quietly(self.client)


class ChunkedFiles:
    """Named files of chunks in Ignite caches (see the module docstring); `what` names them in messages."""

    def __init__(self, endpoint: Endpoint, manifest_cache: str, chunk_cache: str | None = None, *,
                 manifest_prefix: str = MANIFEST_PREFIX, chunk_prefix: str = CHUNK_PREFIX,
                 chunk_bytes: int = CHUNK_BYTES, what: str = "checkpoint") -> None:
        if chunk_bytes < 1:
            raise WorkbenchError(f"chunk_bytes must be >= 1, got {chunk_bytes}")
        if not manifest_cache:
            raise WorkbenchError(f"the {what}s need an Ignite cache name")
        self.endpoint = endpoint
        self.manifest_cache, self.chunk_cache = manifest_cache, chunk_cache or manifest_cache
        self.manifest_prefix, self.chunk_prefix = manifest_prefix, chunk_prefix
        self.chunk_bytes, self.what = chunk_bytes, what

    def manifest_key(self, name: str) -> str:
        return f"{self.manifest_prefix}{name}"

    def chunk_key(self, name: str, version: str, index: int) -> str:
        return f"{self.chunk_prefix}{name}:{version}:{index:06d}"

    # ------------------------------------------------------------------------------------ connections

    def session(self, create: bool = True) -> Session:
        """A new connection with both caches (created when missing, unless `create` is False: then a missing
        manifest cache is a FileNotFoundError)."""
        client = self.endpoint.connect()
        try:
            if not create and self.manifest_cache not in client.get_cache_names():
                raise FileNotFoundError(f"Ignite cache {self.manifest_cache} does not exist at {self.endpoint.where}")
            open_cache = client.get_or_create_cache if create else client.get_cache
            manifests = open_cache(self.manifest_cache)
            chunks = manifests if self.chunk_cache == self.manifest_cache else open_cache(self.chunk_cache)
        except FileNotFoundError:  # an OSError, as pyignite's connection errors are: not one of them
            close_quietly(client)
            raise
        except ignite_errors() as exc:
            close_quietly(client)
            raise WorkbenchError(f"cannot open Ignite cache {self.manifest_cache} at {self.endpoint.where}: "
                                 f"{first_line(exc)}") from exc
        except BaseException:
            close_quietly(client)
            raise
        return Session(client, manifests, chunks)

    @contextlib.contextmanager
    def connected(self, create: bool = True) -> Iterator[Session]:
        session = self.session(create)
        try:
            yield session
        finally:
            session.close()

    def failed(self, doing: str, name: str, exc: BaseException) -> WorkbenchError:
        return WorkbenchError(f"{doing} {self.what} '{name}' in Ignite cache {self.manifest_cache} at "
                              f"{self.endpoint.where} failed: {type(exc).__name__}: {first_line(exc)}")

    # ------------------------------------------------------------------------------------ reading

    def manifest(self, session: Session, name: str) -> dict | None:
        return parse_manifest(session.manifests.get(self.manifest_key(name)), self.manifest_key(name),
                              self.manifest_cache)

    def read(self, session: Session, name: str) -> bytes:
        """The whole file, size and sha256 checked; FileNotFoundError when there is none."""
        try:
            for _ in range(READ_ATTEMPTS):
                manifest = self.manifest(session, name)
                if manifest is None:
                    raise FileNotFoundError(f"no {self.what} named '{name}' in Ignite cache {self.manifest_cache} "
                                            f"at {self.endpoint.where}")
                with contextlib.suppress(FileChanged):
                    data = b"".join(self.read_chunks(session, name, manifest, 0, int(manifest["chunks"])))
                    if len(data) != manifest["bytes"] or hashlib.sha256(data).hexdigest() != manifest["sha256"]:
                        raise WorkbenchError(f"{self.what} '{name}' in Ignite cache {self.manifest_cache} is damaged: "
                                             f"{len(data)} bytes read, size or sha256 differs from its manifest")
                    return data
        except ignite_errors() as exc:
            raise self.failed("reading", name, exc) from exc
        raise WorkbenchError(f"{self.what} '{name}' in Ignite cache {self.manifest_cache} kept changing while being "
                             f"read ({READ_ATTEMPTS} attempts)")

    def read_chunks(self, session: Session, name: str, manifest: dict, first: int, last: int) -> list[bytes]:
        """Chunks [first, last) of the version `manifest` names; FileChanged when it was replaced meanwhile."""
        version = manifest["version"]
        keys = [self.chunk_key(name, version, i) for i in range(first, last)]
        parts: list[bytes] = []
        for i in range(0, len(keys), READ_BATCH):
            batch = keys[i:i + READ_BATCH]
            values = session.chunks.get_all(batch)
            if any(k not in values for k in batch):
                current = self.manifest(session, name)
                if current is None or current.get("version") != version:
                    raise FileChanged(f"{self.what} '{name}' in Ignite cache {self.manifest_cache} was replaced or "
                                      "removed while being read: open it again")
                missing = next(k for k in batch if k not in values)
                raise WorkbenchError(f"{self.what} '{name}' in Ignite cache {self.manifest_cache} is damaged: "
                                     f"chunk {missing} is missing")
            parts.extend(bytes(values[k]) for k in batch)
        return parts

    def read_range(self, session: Session, name: str, manifest: dict, start: int, end: int) -> bytes:
        """Bytes [start, end) of the version `manifest` names (only the chunks that hold them)."""
        size, step = int(manifest["bytes"]), int(manifest.get("chunk_bytes") or self.chunk_bytes)
        start, end = max(0, start), min(size, end)
        if start >= end:
            return b""
        first, last = start // step, (end - 1) // step + 1
        try:
            data = b"".join(self.read_chunks(session, name, manifest, first, last))
        except ignite_errors() as exc:
            raise self.failed("reading", name, exc) from exc
        offset = start - first * step
        return data[offset:offset + end - start]

    # ------------------------------------------------------------------------------------ writing, removing

    def writer(self, name: str, session: Session | None = None) -> ChunkWriter:
        """A binary file object; the file becomes visible when it is closed without error. It uses its own
        connection (`session`, or a new one), closed when it commits or aborts."""
        return ChunkWriter(self, name, session or self.session())

    def delete(self, session: Session, name: str) -> dict | None:
        """Remove a file (manifest first, then its chunks); its old manifest, or None when there was none."""
        try:
            old = parse_manifest(session.manifests.get_and_remove(self.manifest_key(name)), self.manifest_key(name),
                                 self.manifest_cache)
            if old is not None:
                self.remove_chunks(session, name, old["version"], int(old["chunks"]))
        except ignite_errors() as exc:
            raise self.failed("removing", name, exc) from exc
        return old

    def remove_chunks(self, session: Session, name: str, version: str, count: int) -> None:
        keys = [self.chunk_key(name, version, i) for i in range(count)]
        for i in range(0, len(keys), REMOVE_BATCH):
            session.chunks.remove_keys(keys[i:i + REMOVE_BATCH])

    def drop(self) -> None:
        """Destroy the caches (every file in them)."""
        client = self.endpoint.connect()
        try:
            names = set(client.get_cache_names())
            for cache in {self.manifest_cache, self.chunk_cache}:
                if cache in names:
                    client.get_cache(cache).destroy()
        finally:
            close_quietly(client)


class ChunkWriter(io.RawIOBase):
    """Uploads full chunks as they fill; `close()` commits (manifest last), `abort()` removes them."""

    def __init__(self, files: ChunkedFiles, name: str, session: Session) -> None:
        super().__init__()
        self.files, self.name, self.session = files, name, session
        self.version = uuid.uuid4().hex
        self._buffer = bytearray()
        self._chunks = 0
        self._size = 0
        self._sha = hashlib.sha256()
        self._committed = self._aborted = False

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # type: ignore[override]
        if self.closed:
            raise ValueError(f"write to a closed {self.files.what} writer")
        view = memoryview(data).cast("B")
        self._buffer += view
        self._sha.update(view)
        self._size += len(view)
        step = self.files.chunk_bytes
        while len(self._buffer) >= step:
            self._put(bytes(self._buffer[:step]))
            del self._buffer[:step]
        return len(view)

    def tell(self) -> int:
        return self._size

    def _put(self, chunk: bytes) -> None:
        try:
            self.session.chunks.put(self.files.chunk_key(self.name, self.version, self._chunks), chunk)
        except ignite_errors() as exc:
            self.abort()
            raise self.files.failed("writing", self.name, exc) from exc
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
                        "sha256": self._sha.hexdigest(), "chunk_bytes": self.files.chunk_bytes,
                        "written_at": time.time()}
            key = self.files.manifest_key(self.name)
            try:
                old = self.session.manifests.get_and_put(key, json.dumps(manifest))
            except ignite_errors() as exc:
                self.abort()
                raise self.files.failed("committing", self.name, exc) from exc
            self._committed = True
            previous = parse_manifest(old, key, self.files.manifest_cache, strict=False)
            if previous is not None and previous.get("version") != self.version:
                with contextlib.suppress(*ignite_errors()):  # committed; leftover chunks only take space
                    self.files.remove_chunks(self.session, self.name, previous["version"], int(previous["chunks"]))
        finally:
            self.session.close()
            super().close()

    def abort(self) -> None:
        """Forget this write: remove the chunks uploaded so far; the previous file stays."""
        if self._committed or self._aborted:
            return
        self._aborted = True
        try:
            with contextlib.suppress(*ignite_errors()):
                self.files.remove_chunks(self.session, self.name, self.version, self._chunks)
        finally:
            self.session.close()
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


def parse_manifest(raw: Any, key: str, cache_name: str, strict: bool = True) -> dict | None:
    """The manifest stored at `key`, None when there is none; anything else is one WorkbenchError line
    (or None, when not `strict`)."""
    if raw is None:
        return None
    try:
        doc = json.loads(raw)
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ValueError("not a workbench chunked-file manifest")
        for field, kind in (("version", str), ("chunks", int), ("bytes", int), ("sha256", str)):
            if not isinstance(doc.get(field), kind) or isinstance(doc.get(field), bool):
                raise ValueError(f"its {field!r} is not a {kind.__name__}")
        if doc["chunks"] < 0 or doc["bytes"] < 0:
            raise ValueError("negative chunk count or size")
        step = doc.get("chunk_bytes")
        if step is not None and (not isinstance(step, int) or isinstance(step, bool) or step < 1):
            raise ValueError("its 'chunk_bytes' is not a positive int")
        return doc
    except (TypeError, ValueError, RecursionError) as exc:  # RecursionError: deeply nested JSON
        if not strict:
            return None
        raise WorkbenchError(f"Ignite cache {cache_name}: key {key!r} is not a chunked-file manifest ({exc})") from None
