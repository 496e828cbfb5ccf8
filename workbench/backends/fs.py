"""The local filesystem: the baseline every remote backend is compared with.

Root: ``--root`` (default ``settings.state_dir/fs/<storage name>``). Two layouts, the same as on S3:

* ``imagefolder`` (default): ``<root>/<split>/<class>/<basename>``, a torchvision ImageFolder per split
  (``ImageFolderSource(<root>/<split>)`` reads it back), blob labels in ``<file>.label`` sidecars,
  ``<root>/<split>/manifest.txt`` ("key label" lines) and ``<root>/_journal/`` (ids; see
  `workbench.backends.s3_objects`, whose `ObjectSet` writes this layout too);
* ``shards``: ``<root>/<split>/shard-NNNNNN.tar`` + ``index.json`` + ``ids/`` records, as ``s3-shards``
  (`workbench.layouts.shards`).

Every file is written to a hidden temporary name in its folder, then renamed: an interrupted ingest
never leaves a partial image or shard under a real name (leftover ``*.wbtmp`` files are ignored and
removed by the next `prepare`). Files are not fsynced: this guards against a killed process, not a
power cut.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from pydantic import Field

from workbench.backends.base import LayoutBackend, LayoutOptions, storage_name
from workbench.config import Settings
from workbench.errors import WorkbenchError
from workbench.layouts.common import check_split
from workbench.layouts.objects import MANIFEST, ObjectSet
from workbench.layouts.shards import SHARD_PATTERN, ShardSet
from workbench.storage import TMP_SUFFIX, DirStore


class FilesystemOptions(LayoutOptions):
    workers: int = Field(4, ge=1, le=256, description="parallel file writers / readers")
    root: Path | None = Field(None, description="dataset folder (default: state_dir/fs/<storage name>)")
    layout: Literal["imagefolder", "shards"] = Field("imagefolder", description="one file per sample, or tar shards")
    maxsize: float = Field(1e8, gt=0, description="shards: largest shard in bytes")
    maxcount: int = Field(100_000, ge=1, description="shards: most samples per shard")


class FilesystemBackend(LayoutBackend):
    name = "fs"
    native_ceiling = "os"
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
