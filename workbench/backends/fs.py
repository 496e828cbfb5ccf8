"""The local filesystem: the baseline every remote backend is compared with.

Root: ``--root`` (default ``settings.state_dir/fs/<storage name>``). Two layouts, the same as on S3:

* ``imagefolder`` (default): ``<root>/<split>/<class>/<basename>``, a torchvision ImageFolder per split
  (``ImageFolderSource(<root>/<split>)`` reads it back), blob labels in ``<file>.label`` sidecars,
  ``<root>/<split>/manifest.txt`` ("key label" lines) and ``<root>/_journal/`` (ids; see
  `workbench.backends.s3_objects`, whose `ObjectSet` writes this layout too);
* ``shards``: ``<root>/<split>/shard-NNNNNN.tar`` + ``index.json`` + ``ids/`` records, as ``s3-shards``
  (`workbench.backends.shardset`).

Every file is written to a hidden temporary name in its folder, then renamed: an interrupted ingest
never leaves a partial image or shard under a real name (leftover ``*.wbtmp`` files are ignored and
removed by the next `prepare`). Files are not fsynced: this guards against a killed process, not a
power cut.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Literal

from pydantic import Field

from workbench.backends.base import Backend, LayoutOptions, Progress, StoredSample, storage_name
from workbench.backends.s3_objects import MANIFEST, ObjectSet
from workbench.backends.shardset import SHARD_PATTERN, ShardSet, Store, check_split
from workbench.config import Settings
from workbench.data import Sample
from workbench.errors import WorkbenchError

TMP_SUFFIX = ".wbtmp"


class FilesystemOptions(LayoutOptions):
    workers: int = Field(4, ge=1, le=256, description="parallel file writers / readers")
    root: Path | None = Field(None, description="dataset folder (default: state_dir/fs/<storage name>)")
    layout: Literal["imagefolder", "shards"] = Field("imagefolder", description="one file per sample, or tar shards")
    maxsize: float = Field(1e8, gt=0, description="shards: largest shard in bytes")
    maxcount: int = Field(100_000, ge=1, description="shards: most samples per shard")


class DirStore(Store):
    """Keys as files under a directory; atomic writes by rename. Metadata is not kept."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.where = str(root)

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*key.split("/"))

    def put(self, key: str, data: bytes, metadata: dict[str, str] | None = None) -> None:
        path = self._path(key)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}{TMP_SUFFIX}")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise WorkbenchError(
                f"cannot write {path}: {exc.strerror or exc} (check the folder's space and rights)"
            ) from exc

    def get(self, key: str) -> tuple[bytes, dict[str, str]]:
        try:
            return self._path(key).read_bytes(), {}
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise KeyError(key) from None
        except OSError as exc:
            raise WorkbenchError(f"cannot read {self._path(key)}: {exc.strerror or exc}") from exc

    def list(self, under: str = "") -> Iterator[tuple[str, int]]:
        top = self._path(under) if under else self.root
        for dirpath, _dirs, files in os.walk(top):
            rel_dir = Path(dirpath).relative_to(self.root).as_posix()
            for name in files:
                if name.endswith(TMP_SUFFIX):
                    continue
                try:
                    size = os.stat(os.path.join(dirpath, name)).st_size
                except FileNotFoundError:
                    continue
                yield (name if rel_dir == "." else f"{rel_dir}/{name}"), size

    def delete(self, keys: Iterable[str]) -> None:
        for key in keys:
            self._path(key).unlink(missing_ok=True)

    def prune(self) -> None:
        """Remove empty folders bottom-up, the root included."""
        if not self.root.is_dir():
            return
        for dirpath, _dirs, _files in os.walk(self.root, topdown=False):
            with contextlib.suppress(OSError):  # not empty
                os.rmdir(dirpath)

    def remove_temporaries(self) -> int:
        """Delete ``*.wbtmp`` files a killed writer left behind; returns how many."""
        removed = 0
        for dirpath, _dirs, files in os.walk(self.root):
            for name in files:
                if name.endswith(TMP_SUFFIX):
                    Path(dirpath, name).unlink(missing_ok=True)
                    removed += 1
        return removed


class FilesystemBackend(Backend):
    name = "fs"
    Options = FilesystemOptions
    options: FilesystemOptions

    def __init__(self, settings: Settings, dataset: str, options: FilesystemOptions | None = None) -> None:
        super().__init__(settings, dataset, options)
        o = self.options
        default = settings.state_dir / "fs" / storage_name(dataset)
        self.root = Path(o.root).expanduser() if o.root is not None else default
        self.store = DirStore(self.root)
        self.layout: ObjectSet | ShardSet
        if o.layout == "shards":
            self.layout = ShardSet(self.store, o.maxsize, o.maxcount, o.workers, o.label_type)
        else:
            self.layout = ObjectSet(self.store, o.workers, o.label_type, use_metadata=False)

    def prepare(self, splits: Iterable[str]) -> None:
        try:
            for split in splits:
                (self.root / check_split(split)).mkdir(parents=True, exist_ok=True)
            self.root.mkdir(parents=True, exist_ok=True)
            probe = self.root / f".probe-{uuid.uuid4().hex[:8]}{TMP_SUFFIX}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            raise WorkbenchError(
                f"cannot write to {self.root}: {exc.strerror or exc} (choose another --root or fix its rights)"
            ) from exc
        self.store.remove_temporaries()

    def stored_ids(self) -> set[uuid.UUID]:
        return self.layout.stored_ids()

    def write(self, samples: Iterable[Sample], progress: Progress) -> None:
        self.layout.write(samples, progress)

    def scan(self) -> Iterator[StoredSample]:
        return self.layout.scan()

    def drop_layout(self) -> None:
        """Delete this layout's files, then empty folders; the other layout sharing the root stays. Idempotent."""
        if not self.root.is_dir():
            return
        self.store.remove_temporaries()
        self.layout.drop()
        self.store.prune()

    def describe(self) -> dict:
        o = self.options
        where = (f"<root>/<split>/{SHARD_PATTERN} + index.json"
                 if o.layout == "shards" else f"<root>/<split>/<class>/<basename> + <root>/<split>/{MANIFEST}")
        return {**super().describe(), "root": str(self.root), "files": where}
