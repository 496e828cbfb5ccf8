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
from typing import Any, ClassVar

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
    """A storage layout of one system, and every fact the rest of the workbench needs about it.

    The descriptor (class attributes) is the one place bench, sweep, chaos, report and CLI learn what a
    backend is: they ask the registry, never spell a backend's name.
    """

    name: ClassVar[str]
    Options: ClassVar[type[LayoutOptions]] = LayoutOptions
    # The toxiproxy path (a name in config.PROXIED) its clients take to reach the server when `via_proxy`;
    # None: read locally, with no network in between (round-trip time and bandwidth do not apply).
    proxy: ClassVar[str | None] = None
    # Samples are packed into shards: the sweep's shard-size axis (maxcount, maxsize) applies.
    sharded: ClassVar[bool] = False
    # Layout options for benchmarks (e.g. enough shards for every reader), merged under the caller's.
    bench_layout: ClassVar[dict[str, Any]] = {}
    # The stack service a chaos soak may kill and restart without losing this backend's data (None: never).
    restartable_service: ClassVar[str | None] = None
    # The compiled program that measures this backend's ceiling (a key of workbench.bench.native_ceilings
    # PROGRAMS); None: `bench loaders` falls back to the namesake loader's Python `raw_ceiling`.
    native_ceiling: ClassVar[str | None] = None

    @classmethod
    def is_local(cls) -> bool:
        return cls.proxy is None

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

    def labels(self, split: str) -> Iterator[tuple[uuid.UUID, int | bytes | None]]:
        """(id, label) of every stored sample of `split`, for split files; default: from a full `scan`.

        Backends that keep labels apart from the bytes (Cassandra's metadata table) override it cheaply.
        """
        return ((s.id, s.label) for s in self.scan() if s.split == split)

    def drop(self) -> None:
        """Delete the dataset and forget its catalog entry (benchmarks and tests clean up after themselves)."""
        self.drop_layout()
        catalog.forget(self.settings, self.name, self.dataset)

    def describe(self) -> dict:
        """Where the data lives, for the catalog and for loaders (keyspace, bucket/prefix, cache...)."""
        return {"backend": self.name, "dataset": self.dataset, **self.options.model_dump()}


class LayoutBackend(Backend):
    """A backend whose samples are one of the layouts of `workbench.layouts` in a `Store`.

    What is stored, writing and reading back are the layout's; the backend chooses the store and layout.
    """

    layout: Any  # a ShardSet or an ObjectSet (stored_ids, write, scan, drop)

    def stored_ids(self) -> set[uuid.UUID]:
        return self.layout.stored_ids()

    def write(self, samples: Iterable[Sample], progress: Progress) -> None:
        self.layout.write(samples, progress)

    def scan(self) -> Iterator[StoredSample]:
        return self.layout.scan()
