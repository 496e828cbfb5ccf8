"""The contract every storage backend fulfils: its layout, a streaming writer and a raw reader.

A backend knows nothing of torch, TensorFlow or DALI. The ingest engine (`workbench.ingest`) drives
`prepare` -> `stored_ids` -> `write`, and `verify` compares `scan` with the source.
Adding a backend is one module with a `Backend` subclass plus one line in `workbench.backends.registry`.
"""

from __future__ import annotations

import re
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from workbench import catalog
from workbench.config import Settings
from workbench.data import Progress, Sample, StoredSample


class LayoutOptions(BaseModel):
    """Options shared by every layout; each backend extends them. Unknown names are rejected."""

    model_config = ConfigDict(extra="forbid")

    workers: int = Field(8, ge=1, le=256, description="parallel writers / requests in flight")
    label_type: str = Field("int", pattern="^(int|blob|none)$", description="how labels are stored")
    max_sample_bytes: int = Field(16 * 2**20, gt=0, description="refuse samples larger than this")
    via_proxy: bool = Field(False, description="write through toxiproxy instead of directly")


def storage_name(dataset: str) -> str:
    """A dataset name made safe for keyspaces, tables and caches: lowercase letters, digits, '_'."""
    name = re.sub(r"[^a-z0-9_]", "_", dataset.lower())
    return name if name[:1].isalpha() else f"d_{name}"


class Backend(ABC):
    name: ClassVar[str]
    Options: ClassVar[type[LayoutOptions]] = LayoutOptions

    def __init__(self, settings: Settings, dataset: str, options: LayoutOptions | None = None) -> None:
        self.settings = settings
        self.dataset = dataset
        self.options = options if options is not None else self.Options()

    @abstractmethod
    def prepare(self, splits: Iterable[str]) -> None:
        """Create keyspace/tables, bucket, cache or folders; fail with a clear error when unreachable."""

    @abstractmethod
    def stored_ids(self) -> set[uuid.UUID]:
        """Ids already stored completely: re-ingest skips them (idempotent, resumable)."""

    @abstractmethod
    def write(self, samples: Iterable[Sample], progress: Progress) -> None:
        """Store the samples (streaming, bounded memory, parallel inside); report each via `progress`."""

    @abstractmethod
    def scan(self) -> Iterator[StoredSample]:
        """Every stored sample of this dataset, read back raw."""

    @abstractmethod
    def drop_layout(self) -> None:
        """Delete everything this dataset stored in the backend; idempotent."""

    def drop(self) -> None:
        """Delete the dataset and forget its catalog entry (benchmarks and tests clean up after themselves)."""
        self.drop_layout()
        catalog.forget(self.settings, self.name, self.dataset)

    def describe(self) -> dict:
        """Where the data lives, for the catalog and for loaders (keyspace, bucket/prefix, cache...)."""
        return {"backend": self.name, "dataset": self.dataset, **self.options.model_dump()}
