"""S3, WebDataset tar shards (the cortx_pytorch layout): few big objects, read sequentially.

Layout in ``s3://<bucket>/<prefix>/`` (defaults: settings.s3_bucket, the dataset's storage name)::

    <split>/shard-000000.tar, shard-000001.tar, ...   at most `maxsize` bytes and `maxcount` samples each
    <split>/index.json                                 workbench.data.write_index of the complete shards
    <split>/ids/shard-000000.json                      per-shard completion record: ShardInfo + its ids

Each sample is ``<id hex>.jpg`` (the image), ``.cls`` (int label) or ``.png``/``.npy``/``.lbl`` (blob
label), ``.id`` and ``.sum`` (see `workbench.data.shards`), readable by the ``webdataset`` library (also
over presigned http URLs: `shard_urls`) and by DALI's ``fn.readers.webdataset``. Shards are packed in
the writing thread (one in memory per packer) and uploaded by `workers` threads, at most
min(workers, 512 MiB / maxsize) shards in flight; shards over 8 MiB go up as multipart uploads.
Resume, numbering and the index: `workbench.layouts.shards`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

from pydantic import Field

from workbench.backends.base import LayoutBackend, storage_name
from workbench.backends.s3_objects import S3Options
from workbench.config import Settings
from workbench.layouts.common import check_split
from workbench.layouts.shards import SHARD_PATTERN, ShardSet
from workbench.storage import S3Store


class S3ShardsOptions(S3Options):
    maxsize: float = Field(1e8, gt=0, description="largest shard in bytes (a bigger sample gets a shard of its own)")
    maxcount: int = Field(100_000, ge=1, description="most samples per shard")


class S3ShardsBackend(LayoutBackend):
    name = "s3-shards"
    native_ceiling = "minio-go"
    proxy = "s3"
    restartable_service = "minio"
    sharded = True
    # ~10 shards per 1000 samples: enough to split across ranks and workers.
    bench_layout: ClassVar[dict[str, Any]] = {"maxcount": 100}
    Options = S3ShardsOptions
    options: S3ShardsOptions

    def __init__(self, settings: Settings, dataset: str, options: S3ShardsOptions | None = None) -> None:
        super().__init__(settings, dataset, options)
        o = self.options
        self.bucket = o.bucket or settings.s3_bucket
        self.prefix = (o.prefix if o.prefix is not None else storage_name(dataset)).strip("/")
        # Each shard upload may run 4 multipart threads.
        self.store = S3Store(settings, self.bucket, self.prefix, o.via_proxy, connections=max(64, 5 * o.workers))
        self.shards = ShardSet(self.store, o.maxsize, o.maxcount, o.workers, o.label_type)
        self.layout = self.shards

    def prepare(self, splits: Iterable[str]) -> None:
        for split in splits:
            check_split(split)
        self.store.ensure_bucket(self.options.create_bucket)

    def drop_layout(self) -> None:
        """Delete this dataset's shards, records and indexes (the bucket stays); idempotent."""
        if self.store.bucket_exists():
            self.shards.drop()

    def shard_urls(self, split: str | None = None, expires_s: int = 3600) -> list[str]:
        """Presigned http URLs of the indexed shards (of one split, or all), in order."""
        return [self.store.url(f"{s}/{info.name}", expires_s)
                for s, info in sorted(self.shards.shard_keys(), key=lambda si: (si[0], si[1].name))
                if split is None or s == split]

    def describe(self) -> dict:
        return {**super().describe(), "bucket": self.bucket, "prefix": self.prefix, "endpoint": self.store.endpoint,
                "shards": f"<prefix>/<split>/{SHARD_PATTERN}",
                "index": "<prefix>/<split>/index.json"}
