"""Training checkpoints in an Ignite cache: file objects for ``torch.save`` / ``torch.load`` (any byte stream).

The article stores checkpoints in IGFS, which Ignite 2.16+ no longer ships; this stores them as chunked
cache entries instead (`workbench.storage.ignite_chunks`), in the layout of the ``ignite://`` file
system (`workbench.storage.ignite_fs`): checkpoint ``name`` in cache ``C`` (default
``WORKBENCH_CHECKPOINTS``) is the file ``ignite://C/name``::

    C           file:<name>                        the manifest (JSON string): version, chunk count, size, sha256
    C_CHUNKS    chunk:<name>:<version>:<000000..>  byte[] chunks of `chunk_bytes` (4 MiB) of the serialized stream

A checkpoint becomes visible whole when its writer is closed (manifest last, atomically); an exception
inside the ``with`` block, `abort()`, or a writer dropped without `close()` leaves the previous one
untouched and no chunks behind. A reader checks size and sha256 and retries when the checkpoint was
replaced under it.

    ckpt = IgniteCheckpoint(settings)
    with ckpt.writer("run1/epoch3") as f:
        torch.save(model.state_dict(), f)
    state = torch.load(ckpt.reader("run1/epoch3"))

Connections use the settings' Ignite login and, with ``WORKBENCH_TLS=1``, TLS (see `settings_endpoint`); pass
an `endpoint` for a client certificate (IgniteDataset's ``certfile``/``keyfile``/``cert_password``).
"""

from __future__ import annotations

import io
from typing import Any

from workbench.clients.ignite import Endpoint, settings_endpoint
from workbench.config import Settings
from workbench.errors import WorkbenchError
from workbench.storage.ignite_chunks import (
    CHUNK_BYTES,
    CHUNK_PREFIX,
    FORMAT,
    MANIFEST_PREFIX,
    ChunkedFiles,
    ChunkWriter,
    chunk_cache_of,
    parse_manifest,
)

DEFAULT_CACHE = "WORKBENCH_CHECKPOINTS"
CheckpointWriter = ChunkWriter  # the writer's former name

__all__ = ["CHUNK_BYTES", "DEFAULT_CACHE", "FORMAT", "CheckpointWriter", "IgniteCheckpoint"]


class IgniteCheckpoint:
    """Named checkpoints in one Ignite cache (see the module docstring)."""

    def __init__(self, settings: Settings | None = None, cache_name: str = DEFAULT_CACHE, via_proxy: bool = False,
                 chunk_bytes: int = CHUNK_BYTES, endpoint: Endpoint | None = None) -> None:
        if not cache_name:
            raise WorkbenchError("IgniteCheckpoint needs a cache name")
        self.endpoint = endpoint or settings_endpoint(settings or Settings(), via_proxy)
        self.files = ChunkedFiles(self.endpoint, cache_name, chunk_cache_of(cache_name), chunk_bytes=chunk_bytes)
        self.cache_name = cache_name
        self.chunk_bytes = chunk_bytes

    @staticmethod
    def manifest_key(name: str) -> str:
        return f"{MANIFEST_PREFIX}{name}"

    @staticmethod
    def chunk_key(name: str, version: str, index: int) -> str:
        return f"{CHUNK_PREFIX}{name}:{version}:{index:06d}"

    def writer(self, name: str) -> ChunkWriter:
        """A binary file object; the checkpoint becomes visible when it is closed without error."""
        _check_name(name)
        return self.files.writer(name)

    def manifest(self, name: str) -> dict | None:
        with self.files.connected() as session:
            return self.files.manifest(session, name)

    def exists(self, name: str) -> bool:
        return self.manifest(name) is not None

    def reader(self, name: str) -> io.BytesIO:
        """The checkpoint's bytes as a seekable file object (what ``torch.load`` needs)."""
        _check_name(name)
        with self.files.connected() as session:
            try:
                return io.BytesIO(self.files.read(session, name))
            except FileNotFoundError:
                raise WorkbenchError(f"no checkpoint named '{name}' in Ignite cache {self.cache_name} "
                                     f"at {self.endpoint.where}") from None

    def delete(self, name: str) -> bool:
        """Remove a checkpoint (manifest first, then its chunks); False when there was none."""
        with self.files.connected() as session:
            return self.files.delete(session, name) is not None

    def drop(self) -> None:
        """Destroy the caches (every checkpoint in them)."""
        self.files.drop()


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not name or len(name) > 1000:
        raise WorkbenchError(f"invalid checkpoint name {name!r}: use a non-empty string of at most 1000 characters")


def _parse(raw: Any, name: str, cache_name: str, strict: bool = True) -> dict | None:
    """The manifest of checkpoint `name` (None when there is none); see `parse_manifest`."""
    return parse_manifest(raw, IgniteCheckpoint.manifest_key(name), cache_name, strict)
