"""S3, one object per sample (the OSS-connector / "bucket of JPEGs" layout), plus a manifest per split.

The layout (objects, sidecars, manifest, journal) is `workbench.layouts.objects`; this backend puts it in
``s3://<bucket>/<prefix>/`` (defaults: settings.s3_bucket, the dataset's storage name) and keeps a local
copy of each manifest under ``state_dir/manifests/s3-objects/<bucket>/<prefix>/<split>/manifest.txt``.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import Field

from workbench.backends.base import LayoutBackend, LayoutOptions, storage_name
from workbench.config import Settings
from workbench.layouts.common import check_split
from workbench.layouts.objects import MANIFEST, ObjectSet
from workbench.storage import S3Store

log = logging.getLogger(__name__)



class S3Options(LayoutOptions):
    bucket: str | None = Field(None, description="bucket (default: settings.s3_bucket)")
    prefix: str | None = Field(None, description="key prefix of this dataset (default: its storage name)")
    create_bucket: bool = Field(True, description="create the bucket when it does not exist")


# -------------------------------------------------------------------------------------------- backend


class S3LayoutBackend(LayoutBackend):
    """A layout in ``s3://<bucket>/<prefix>/``: where it is, its store, making the bucket and emptying it.

    Subclasses name themselves, their options and `make_layout`; `connections_per_worker` sizes the client's
    pool (at least 64 connections).
    """

    native_ceiling = "minio-go"
    proxy = "s3"
    restartable_service = "minio"
    connections_per_worker = 2
    options: S3Options

    def __init__(self, settings: Settings, dataset: str, options: S3Options | None = None) -> None:
        super().__init__(settings, dataset, options)
        o = self.options
        self.bucket = o.bucket or settings.s3_bucket
        self.prefix = (o.prefix if o.prefix is not None else storage_name(dataset)).strip("/")
        self.store = S3Store(settings, self.bucket, self.prefix, o.via_proxy,
                             connections=max(64, self.connections_per_worker * o.workers))
        self.layout = self.make_layout()

    def make_layout(self) -> Any:
        """The layout object (ObjectSet, ShardSet) over `self.store`."""
        raise NotImplementedError

    def prepare(self, splits: Iterable[str]) -> None:
        for split in splits:
            check_split(split)
        self.store.ensure_bucket(self.options.create_bucket)

    def drop_layout(self) -> None:
        """Delete this dataset's layout (the bucket stays); idempotent."""
        if self.store.bucket_exists():
            self.layout.drop()

    def describe(self) -> dict:
        return {**super().describe(), "bucket": self.bucket, "prefix": self.prefix, "endpoint": self.store.endpoint}


class S3ObjectsBackend(S3LayoutBackend):
    name = "s3-objects"
    Options = S3Options

    def make_layout(self) -> ObjectSet:
        self.objects = ObjectSet(self.store, self.options.workers, self.options.label_type, self.local_manifest)
        return self.objects

    def local_manifest(self, split: str) -> Path:
        return self.settings.state_dir / "manifests" / self.name / self.bucket / (self.prefix or "_") / split / MANIFEST

    def manifest(self, split: str) -> list[tuple[str, str]]:
        return self.objects.manifest(split)

    def drop_layout(self) -> None:
        """Delete this dataset's objects, journal and manifests (the bucket stays); idempotent."""
        super().drop_layout()
        shutil.rmtree(self.local_manifest("x").parent.parent, ignore_errors=True)

    def describe(self) -> dict:
        return {**super().describe(), "layout": "<prefix>/<split>/<class>/<basename>",
                "manifest": f"<prefix>/<split>/{MANIFEST}"}
