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

from typing import Any, ClassVar

from pydantic import Field

from workbench.backends.s3_objects import S3LayoutBackend, S3Options
from workbench.layouts.shards import INDEX, SHARD_PATTERN, ShardSet


class S3ShardsOptions(S3Options):
    maxsize: float = Field(1e8, gt=0, description="largest shard in bytes (a bigger sample gets a shard of its own)")
    maxcount: int = Field(100_000, ge=1, description="most samples per shard")


class S3ShardsBackend(S3LayoutBackend):
    name = "s3-shards"
    sharded = True
    # ~10 shards per 1000 samples: enough to split across ranks and workers.
    bench_layout: ClassVar[dict[str, Any]] = {"maxcount": 100}
    connections_per_worker = 5  # each shard upload may run 4 multipart threads
    Options = S3ShardsOptions
    options: S3ShardsOptions

    def make_layout(self) -> ShardSet:
        o = self.options
        self.shards = ShardSet(self.store, o.maxsize, o.maxcount, o.workers, o.label_type)
        return self.shards

    def shard_urls(self, split: str | None = None, expires_s: int = 3600) -> list[str]:
        """Presigned http URLs of the indexed shards (of one split, or all), in order."""
        return [self.store.url(f"{s}/{info.name}", expires_s)
                for s, info in sorted(self.shards.shard_keys(), key=lambda si: (si[0], si[1].name))
                if split is None or s == split]

    def describe(self) -> dict:
        return {**super().describe(), "shards": f"<prefix>/<split>/{SHARD_PATTERN}",
                "index": f"<prefix>/<split>/{INDEX}"}
