"""``ignite://CACHE/path``: an fsspec file system over Ignite caches, the role IGFS played for checkpoints and events.

The article wrote TensorFlow checkpoints and TensorBoard event files into IGFS; Ignite 2.16+ ships no IGFS,
so this file system keeps files as chunked cache entries (`workbench.storage.ignite_chunks`, the layout
`workbench.checkpoints.ignite` uses too: checkpoint ``name`` in cache ``C`` is ``ignite://C/name``)::

    import fsspec, torch
    with fsspec.open("ignite://RUNS/run1/model.pt", "wb") as f:   # or IgniteFileSystem(settings).open(...)
        torch.save(model.state_dict(), f)
    state = torch.load(fsspec.open("ignite://RUNS/run1/model.pt").open())

Semantics (those of an object store, with directories):
* the first path component is the cache (created at the first write or `mkdir`); the rest names a file;
* a file appears whole when its writer closes: a reader sees the old bytes or the new ones, never a mix
  (``fs.open(path, "wb")`` used as a ``with`` block drops what it wrote when the block raises; a writer
  closed otherwise, e.g. by ``fsspec.open``'s context, commits what was written);
* reads are ranged: only the chunks holding the bytes asked for travel (``seek`` + ``read``, torch.load's
  zip reader); a file replaced while open for reading fails with one line (open it again);
* directories exist while they hold files, or once made with `mkdir`/`makedirs` (a marker entry):
  ``ls``, ``info``, ``find``, ``rm(recursive=True)`` and ``rmdir`` (empty ones only) follow fsspec's rules;
* no append ("ab"), no fsspec transactions: one clear error each.

``ls``/``find``/``info`` of a directory scan the cache's manifests (small JSON values; the chunks live in
``CACHE_CHUNKS``). Connections: the workbench settings' Ignite (every node, login, TLS), or the arguments
of IgniteDataset (``host``, ``port``, ``username``, ``password``, ``certfile``, ``keyfile``,
``cert_password``) as storage options. Each call opens its own connection; an open file holds one.
Registered as fsspec protocol ``ignite`` on import, and through the ``fsspec.specs`` entry point.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from typing import Any

from fsspec import AbstractFileSystem, register_implementation
from fsspec.spec import AbstractBufferedFile

from workbench.clients.ignite import close_quietly, ignite_errors, settings_endpoint
from workbench.config import Settings
from workbench.errors import WorkbenchError, first_line
from workbench.storage.ignite_chunks import (
    CHUNK_BYTES,
    CHUNKS_SUFFIX,
    MANIFEST_PREFIX,
    ChunkedFiles,
    Session,
    chunk_cache_of,
    parse_manifest,
)

DIR_PREFIX = "dir:"  # a directory made by mkdir: its marker entry in the manifest cache
SCAN_PAGE = 1000
_CACHE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}$")


class IgniteFileSystem(AbstractFileSystem):
    """fsspec's file system API over Ignite caches (see the module docstring)."""

    protocol = "ignite"
    root_marker = ""
    cachable = False  # fsspec's instance cache keys on repr(), where passwords show as '**********'

    def __init__(self, settings: Settings | None = None, via_proxy: bool = False, host: str | None = None,
                 port: int | None = None, username: str | None = None, password: str | None = None,
                 certfile: str | None = None, keyfile: str | None = None, cert_password: str | None = None,
                 chunk_bytes: int = CHUNK_BYTES, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.endpoint = settings_endpoint(settings or Settings(), via_proxy, host=host, port=port, username=username,
                                          password=password, certfile=certfile, keyfile=keyfile,
                                          cert_password=cert_password)
        if chunk_bytes < 1:
            raise WorkbenchError(f"chunk_bytes must be >= 1, got {chunk_bytes}")
        self.chunk_bytes = chunk_bytes

    # ------------------------------------------------------------------------------------ paths

    @classmethod
    def _strip_protocol(cls, path):
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        path = super()._strip_protocol(path)
        return path.strip("/")

    @classmethod
    def split(cls, path: str) -> tuple[str, str]:
        """(cache, file path inside it) of `path`; the file path is "" for the cache itself."""
        path = cls._strip_protocol(path)
        cache, _, key = path.partition("/")
        if not cache:
            raise WorkbenchError("an ignite:// path names a cache first: ignite://CACHE/path/to/file")
        if not _CACHE_NAME.match(cache) or cache.endswith(CHUNKS_SUFFIX):
            raise WorkbenchError(f"invalid Ignite cache name '{cache}' in path {path!r}: use letters, digits, '_', "
                                 f"'.' and '-', not ending in {CHUNKS_SUFFIX}")
        if "//" in key:
            raise WorkbenchError(f"invalid path {path!r}: empty path component")
        return cache, key

    def files(self, cache: str) -> ChunkedFiles:
        return ChunkedFiles(self.endpoint, cache, chunk_cache_of(cache), chunk_bytes=self.chunk_bytes, what="file")

    def _cache_exists(self, cache: str) -> bool:
        client = self.endpoint.connect()
        try:
            return cache in client.get_cache_names()
        except ignite_errors() as exc:
            raise self._failed("listing the caches", exc) from exc
        finally:
            close_quietly(client)

    def _failed(self, doing: str, exc: BaseException) -> WorkbenchError:
        return WorkbenchError(f"{doing} at Ignite {self.endpoint.where} failed: {type(exc).__name__}: "
                              f"{first_line(exc)}")

    # ------------------------------------------------------------------------------------ listing

    def _entries(self, cache: str) -> tuple[dict[str, dict], set[str]] | None:
        """({file path: manifest}, {directory markers}) of a cache; None when the cache does not exist."""
        files, dirs = {}, set()
        try:
            with self.files(cache).connected(create=False) as session, \
                    session.manifests.scan(page_size=SCAN_PAGE) as cursor:
                for key, value in cursor:
                    if not isinstance(key, str):
                        continue
                    if key.startswith(MANIFEST_PREFIX):
                        manifest = parse_manifest(value, key, cache, strict=False)
                        if manifest is not None:
                            files[key[len(MANIFEST_PREFIX):]] = manifest
                    elif key.startswith(DIR_PREFIX):
                        dirs.add(key[len(DIR_PREFIX):])
        except FileNotFoundError:
            return None
        except ignite_errors() as exc:
            raise self._failed(f"listing cache {cache}", exc) from exc
        return files, dirs

    @staticmethod
    def _file_info(cache: str, key: str, manifest: dict) -> dict:
        return {"name": f"{cache}/{key}", "size": int(manifest["bytes"]), "type": "file",
                "mtime": float(manifest.get("written_at") or 0.0), "version": manifest["version"],
                "sha256": manifest["sha256"]}

    @staticmethod
    def _dir_info(name: str) -> dict:
        return {"name": name, "size": 0, "type": "directory"}

    def _caches(self) -> list[dict]:
        client = self.endpoint.connect()
        try:
            names = client.get_cache_names()
        except ignite_errors() as exc:
            raise self._failed("listing the caches", exc) from exc
        finally:
            close_quietly(client)
        return [self._dir_info(n) for n in sorted(names)
                if not n.startswith("ignite-sys") and not n.endswith(CHUNKS_SUFFIX) and _CACHE_NAME.match(n)]

    def ls(self, path, detail=True, **kwargs):
        path = self._strip_protocol(path)
        if not path:
            entries = self._caches()
            return entries if detail else [e["name"] for e in entries]
        cache, key = self.split(path)
        found = self._entries(cache)
        if found is None:
            raise FileNotFoundError(path)
        files, dirs = found
        if key in files:
            entries = [self._file_info(cache, key, files[key])]
        else:
            prefix = f"{key}/" if key else ""
            children: dict[str, dict] = {}
            for name in [*files, *dirs]:
                if not name.startswith(prefix) or name == key:
                    continue
                head, _, rest = name[len(prefix):].partition("/")
                child = f"{prefix}{head}"
                if not rest and name in files:
                    children[child] = self._file_info(cache, child, files[name])
                else:
                    children.setdefault(child, self._dir_info(f"{cache}/{child}"))
            if not children and key and key not in dirs:
                raise FileNotFoundError(path)
            entries = [children[k] for k in sorted(children)]
        return entries if detail else [e["name"] for e in entries]

    def find(self, path, maxdepth=None, withdirs=False, detail=False, **kwargs):
        """Every file under `path` (and directories with `withdirs`) from one scan of the cache."""
        path = self._strip_protocol(path)
        if not path:
            return super().find(path, maxdepth=maxdepth, withdirs=withdirs, detail=detail, **kwargs)
        cache, key = self.split(path)
        found = self._entries(cache)
        out: dict[str, dict] = {}
        if found is not None:
            files, dirs = found
            if key in files:
                out[path] = self._file_info(cache, key, files[key])
            else:
                prefix = f"{key}/" if key else ""
                for name in [*files, *dirs]:
                    if not name.startswith(prefix) or name == key:
                        continue
                    parts = name[len(prefix):].split("/")
                    if maxdepth is not None and len(parts) > maxdepth:
                        continue
                    if name in files:
                        out[f"{cache}/{name}"] = self._file_info(cache, name, files[name])
                    if withdirs:
                        for depth in range(1, len(parts) if name in files else len(parts) + 1):
                            sub = f"{cache}/{prefix}{'/'.join(parts[:depth])}"
                            out.setdefault(sub, self._dir_info(sub))
                if withdirs and (found and (not key or key in dirs or out)):
                    out.setdefault(path, self._dir_info(path))
        names = sorted(out)
        return {n: out[n] for n in names} if detail else names

    def info(self, path, **kwargs):
        path = self._strip_protocol(path)
        if not path:
            return self._dir_info("")
        cache, key = self.split(path)
        if not key:
            if self._cache_exists(cache):
                return self._dir_info(cache)
            raise FileNotFoundError(path)
        try:
            with self.files(cache).connected(create=False) as session:
                manifest = self.files(cache).manifest(session, key)
                if manifest is not None:
                    return self._file_info(cache, key, manifest)
                if session.manifests.get(f"{DIR_PREFIX}{key}") is not None:
                    return self._dir_info(path)
        except FileNotFoundError:
            raise FileNotFoundError(path) from None
        except ignite_errors() as exc:
            raise self._failed(f"reading {path}", exc) from exc
        if self.ls(path, detail=False):  # a directory that only holds files (raises FileNotFoundError if not)
            return self._dir_info(path)
        raise FileNotFoundError(path)

    def created(self, path):
        return self.modified(path)

    def modified(self, path):
        info = self.info(path)
        if info["type"] != "file":
            raise IsADirectoryError(path)
        return dt.datetime.fromtimestamp(info["mtime"], tz=dt.UTC)

    # ------------------------------------------------------------------------------------ directories

    def mkdir(self, path, create_parents=True, **kwargs):
        cache, key = self.split(path)
        files = self.files(cache)
        with files.connected() as session:  # creates the cache
            if not key:
                return
            try:
                if files.manifest(session, key) is not None:
                    raise FileExistsError(f"{self._strip_protocol(path)} is a file")
                parts = key.split("/")
                for depth in range(1 if create_parents else len(parts), len(parts) + 1):
                    session.manifests.put(f"{DIR_PREFIX}{'/'.join(parts[:depth])}", json.dumps({"dir": True}))
            except ignite_errors() as exc:
                raise self._failed(f"making directory {path}", exc) from exc

    def makedirs(self, path, exist_ok=False):
        if self.exists(path):
            if self.isfile(path):
                raise FileExistsError(f"{self._strip_protocol(path)} is a file")
            if not exist_ok:
                raise FileExistsError(self._strip_protocol(path))
        self.mkdir(path, create_parents=True)

    def rmdir(self, path):
        cache, key = self.split(path)
        if not key:
            raise WorkbenchError(f"refusing to remove cache {cache} with rmdir: destroy it explicitly")
        if self.ls(path, detail=False):
            raise OSError(f"directory {self._strip_protocol(path)} is not empty")
        self._remove_marker(cache, key)

    def _remove_marker(self, cache: str, key: str) -> None:
        try:
            with self.files(cache).connected(create=False) as session:
                session.manifests.remove_key(f"{DIR_PREFIX}{key}")
        except FileNotFoundError:
            pass
        except ignite_errors() as exc:
            raise self._failed(f"removing directory {cache}/{key}", exc) from exc

    # ------------------------------------------------------------------------------------ files

    def _rm(self, path):
        cache, key = self.split(path)
        if not key:
            return  # rm(recursive=True) of a whole cache removes its files; the cache itself stays
        files = self.files(cache)
        try:
            with files.connected(create=False) as session:
                if files.delete(session, key) is None:
                    session.manifests.remove_key(f"{DIR_PREFIX}{key}")
        except FileNotFoundError:
            raise FileNotFoundError(self._strip_protocol(path)) from None
        except ignite_errors() as exc:
            raise self._failed(f"removing {path}", exc) from exc

    def rm_file(self, path):
        self._rm(path)

    def _open(self, path, mode="rb", block_size=None, autocommit=True, cache_options=None, **kwargs):
        if not autocommit:
            raise WorkbenchError("ignite:// files do not take part in fsspec transactions: each file commits "
                                 "when its writer closes")
        cache, key = self.split(path)
        if not key:
            raise IsADirectoryError(self._strip_protocol(path))
        files = self.files(cache)
        if mode == "rb":
            return IgniteReadFile(self, path, files, key, block_size, cache_options)
        if mode in ("wb", "xb"):
            session = files.session()
            try:
                manifest = files.manifest(session, key)
                if manifest is not None and mode == "xb":
                    raise FileExistsError(self._strip_protocol(path))
                if session.manifests.get(f"{DIR_PREFIX}{key}") is not None:
                    raise IsADirectoryError(self._strip_protocol(path))
            except BaseException:
                session.close()
                raise
            return files.writer(key, session)
        raise WorkbenchError(f"ignite:// files open with mode rb, wb or xb, not {mode!r} (no append: write the "
                             "file anew)")

    def cp_file(self, path1, path2, **kwargs):
        """Copy chunk by chunk (never the whole file in memory)."""
        with self.open(path1, "rb") as source, self.open(path2, "wb") as target:
            while block := source.read(self.chunk_bytes):
                target.write(block)


class IgniteReadFile(AbstractBufferedFile):
    """A file opened for reading: the manifest read at open, ranges fetched chunk by chunk on one connection."""

    def __init__(self, fs: IgniteFileSystem, path: str, files: ChunkedFiles, key: str, block_size: int | None,
                 cache_options: dict | None) -> None:
        self.files, self.key = files, key
        try:
            self.session: Session | None = files.session(create=False)
        except FileNotFoundError:
            raise FileNotFoundError(fs._strip_protocol(path)) from None
        try:
            manifest = files.manifest(self.session, key)
        except ignite_errors() as exc:
            self.session.close()
            raise files.failed("opening", key, exc) from exc
        if manifest is None:
            self.session.close()
            raise FileNotFoundError(fs._strip_protocol(path))
        self.manifest = manifest
        super().__init__(fs, path, mode="rb", block_size=block_size or files.chunk_bytes,
                         cache_type="readahead", cache_options=cache_options, size=int(manifest["bytes"]))

    def _fetch_range(self, start: int, end: int) -> bytes:
        if self.session is None:
            raise ValueError("read from a closed ignite:// file")
        return self.files.read_range(self.session, self.key, self.manifest, start, end)  # FileChanged: replaced

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self.session is not None:
                self.session.close()
                self.session = None


def register() -> None:
    """Make ``ignite://`` known to fsspec in this process (the entry point does it for every process)."""
    register_implementation("ignite", IgniteFileSystem, clobber=True)


register()
