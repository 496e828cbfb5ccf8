"""The contract every loader fulfils: one epoch of items for one shard, from a validated config.

A loader reads raw samples (key, label, bytes) from one backend layout and hides the network with
its own strategy; the adapters (`workbench.adapters`) turn any loader into a PyTorch dataset, a
tf.data pipeline or a DALI pipeline. Adding a loader is one module plus one line in the registry.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from workbench.config import Settings
from workbench.data import Item
from workbench.data.batch import Batch, batched
from workbench.errors import WorkbenchError


class LoaderConfig(BaseModel):
    """Every knob a sweep varies. Unknown names and invalid values fail before any I/O."""

    model_config = ConfigDict(extra="forbid")

    dataset: str = Field(..., min_length=1, description="dataset name as ingested")
    split: str = Field("train", description="original split to read")
    shuffle: bool = Field(True, description="a new seeded order every epoch")
    seed: int = 0
    shard_id: int = Field(0, ge=0, description="this rank (distributed training)")
    num_shards: int = Field(1, ge=1, description="number of ranks")
    concurrency: Annotated[int, Field(ge=1, le=1024)] | Literal["auto"] = Field(
        "auto", description="requests in flight, or 'auto': widened while the rate rises (workbench.concurrency)")
    prefetch_buffers: int = Field(2, ge=1, le=64, description="batches fetched ahead of the consumer")
    batch_size: int = Field(32, ge=1, le=65536, description="samples per batch")
    ordered: bool = Field(True, description="False: deliver in completion order (out-of-order mode)")
    label_type: Literal["int", "blob", "none"] = "int"
    on_corrupt: Literal["raise", "skip"] = Field("raise", description="a corrupt image when decoding")
    via_proxy: bool = Field(False, description="read through toxiproxy (emulated network)")

    @model_validator(mode="after")
    def _shard_in_range(self) -> LoaderConfig:
        if self.shard_id >= self.num_shards:
            raise ValueError(f"shard_id {self.shard_id} must be < num_shards {self.num_shards}")
        return self


class Loader(ABC):
    """One strategy of reading one backend's layout; the class attributes describe it to bench, sweep and chaos."""

    name: ClassVar[str]
    backend: ClassVar[str]
    Config: ClassVar[type[LoaderConfig]] = LoaderConfig
    # Measured by `workbench bench loaders` when no loader is named (peers and GPU-only readers opt out).
    benchmarked_by_default: ClassVar[bool] = True
    # Config overrides for `workbench chaos`: small request windows, so requests are in flight when a fault
    # strikes. None: this loader is not part of the chaos soak.
    chaos_window: ClassVar[dict[str, Any] | None] = None

    @classmethod  # noqa: B027 - an optional hook: doing nothing is the default
    def prepare_dataset(cls, settings: Settings, dataset: str, source: Any) -> None:
        """Write a layout of the loader's own after the backend's ingest (e.g. a peer's MDS copy); default: none."""

    @classmethod
    def raw_ceiling(cls, settings: Settings, config: LoaderConfig) -> tuple[int, int]:
        """(samples, bytes) of the plainest client loop over this backend: the Python reference ceiling."""
        raise WorkbenchError(f"loader '{cls.name}' has no raw ceiling: measure its backend with its own loader")

    def __init__(self, settings: Settings, config: LoaderConfig, worker_id: int = 0, num_workers: int = 1) -> None:
        self.settings = settings
        self.config = config
        self.worker_id = worker_id
        self.num_workers = num_workers
        self.epoch = 0
        self.samples = 0
        self.bytes = 0
        self._lock = threading.Lock()

    def set_epoch(self, epoch: int) -> None:
        """Like DistributedSampler.set_epoch: the next iteration uses this epoch's order."""
        self.epoch = epoch

    @abstractmethod
    def iter_epoch(self, epoch: int) -> Iterator[Item]:
        """This shard's items for `epoch` (shuffled by seed and epoch when `config.shuffle`)."""

    def __iter__(self) -> Iterator[Item]:
        for item in self.iter_epoch(self.epoch):
            with self._lock:
                self.samples += 1
                self.bytes += len(item.data)
            yield item

    def batches(self) -> Iterator[Batch]:
        """This epoch as batches of `config.batch_size` in one buffer each: the adapters' hot path (one object
        and one counter update per batch). Loaders whose client hands over whole buffers may override it."""
        for batch in batched(self.iter_epoch(self.epoch), self.config.batch_size):
            with self._lock:
                self.samples += len(batch)
                self.bytes += batch.nbytes
            yield batch

    def close(self) -> None:  # noqa: B027 - optional: loaders holding connections override it
        """Release connections and threads."""

    def __enter__(self) -> Loader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
