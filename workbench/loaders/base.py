"""The contract every loader fulfils: one epoch of items for one shard, from a validated config.

A loader reads raw samples (key, label, bytes) from one backend layout and hides the network with
its own strategy; the adapters (`workbench.adapters`) turn any loader into a PyTorch dataset, a
tf.data pipeline or a DALI pipeline. Adding a loader is one module plus one line in the registry.

Resuming mid-epoch (torchdata's Stateful convention: `state_dict()` / `load_state_dict()`): a reader's
order is fixed by (seed, epoch, shard, worker) when ``ordered``, so its state is the epoch and how many
items of that order it delivered; a fresh loader given that state delivers the rest, none twice, none
missed. Loaders whose order is a list (ids, objects, files) skip it with `unread`, shard loaders with
`resume_position` (`workbench.loaders.order.resume_shards`); any other loader reads the epoch again and
drops what was delivered (exact, not cheap). Out of order (``ordered=False``) a count says nothing about
which items came, so the state lists the ids delivered this epoch instead (its size grows with the epoch).
"""

from __future__ import annotations

import itertools
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from workbench import memory
from workbench.config import Settings
from workbench.data import Item
from workbench.data.batch import Batch, batched
from workbench.errors import WorkbenchError
from workbench.loaders.resume import Resume, check_state, make_state

T = TypeVar("T")


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


@dataclass(frozen=True)
class RequestModel:
    """What one request of a loader is, for the Little's-law bound a report draws (workbench/report/little.py):
    in words, how many samples it carries, and where its window comes from."""

    what: str  # in words: one request; with per_request None, why the loader gets no bound
    per_request: str | None = "sample"  # "sample", "shard", a config field giving keys per request; None: no bound
    window: str | int = "concurrency"  # "concurrency" (the sweep's axis), another config field, or a fixed number


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
    # What one request is, for reports' Little's-law bound (None: the report says it has no model for it).
    request_model: ClassVar[RequestModel | None] = None

    @classmethod  # noqa: B027 - an optional hook: doing nothing is the default
    def prepare_dataset(cls, settings: Settings, dataset: str, source: Any) -> None:
        """Write a layout of the loader's own after the backend's ingest (e.g. a peer's MDS copy); default: none."""

    @classmethod
    def raw_ceiling(cls, settings: Settings, config: LoaderConfig) -> tuple[int, int]:
        """(samples, bytes) of the plainest client loop over this backend: the Python reference ceiling."""
        raise WorkbenchError(f"loader '{cls.name}' has no raw ceiling: measure its backend with its own loader")

    def __init__(self, settings: Settings, config: LoaderConfig, worker_id: int = 0, num_workers: int = 1) -> None:
        memory.apply(settings.malloc_tuning)  # once per process: big buffers reused, not faulted in afresh
        self.settings = settings
        self.config = config
        self.worker_id = worker_id
        self.num_workers = num_workers
        self.epoch = 0
        self.samples = 0
        self.bytes = 0
        self._lock = threading.Lock()
        self._position = 0  # items of this epoch's order delivered (a resumed epoch counts the skipped ones)
        self._delivered: list[str] | None = None  # ids delivered this epoch (ordered=False)
        self._done = False
        self._pending: Resume | None = None  # loaded by load_state_dict, taken by the next iteration
        self._active: Resume | None = None  # the resume the iteration in progress started from
        self._claimed = False  # the loader skipped what `_active` says itself (unread / resume_position)

    def set_epoch(self, epoch: int) -> None:
        """Like DistributedSampler.set_epoch: the next iteration uses this epoch's order (a loaded state of
        another epoch is dropped)."""
        if epoch != self.epoch:
            self._pending = None
            self._position, self._delivered, self._done = 0, None, False
        self.epoch = epoch

    # ------------------------------------------------------------------------------- resuming

    def state_dict(self) -> dict[str, Any]:
        """Where this reader stands: the epoch, how many items of its order it delivered (and with ordered=False,
        which ids), whether the epoch ended, and what identifies the reader and its order. Plain values."""
        with self._lock:
            if self._pending is not None:
                p = self._pending
                return self.make_state(self.config, self.worker_id, self.num_workers, p.epoch, p.position, p.done,
                                       p.delivered)
            return self.make_state(self.config, self.worker_id, self.num_workers, self.epoch, self._position,
                                   self._done, self._delivered)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume where `state` (from `state_dict()` of a loader with the same settings, rank and worker) stopped:
        the next iteration delivers the rest of that epoch. A state that does not fit is one WorkbenchError."""
        resume = self.check_state(state, self.config, self.worker_id, self.num_workers)
        with self._lock:
            self.epoch = resume.epoch
            self._pending = resume

    @classmethod
    def make_state(cls, config: LoaderConfig, worker_id: int, num_workers: int, epoch: int, position: int = 0,
                   done: bool = False, delivered: Any = None) -> dict[str, Any]:
        """A state dict (also for readers not built yet: the start of `epoch`); see `workbench.loaders.resume`."""
        return make_state(cls.name, config, worker_id, num_workers, epoch, position, done, delivered)

    @classmethod
    def check_state(cls, state: Mapping[str, Any], config: LoaderConfig, worker_id: int, num_workers: int) -> Resume:
        """`state` as a Resume for this reader, or one WorkbenchError line saying why it cannot resume it."""
        return check_state(cls.name, state, config, worker_id, num_workers)

    def unread(self, epoch: int, order: list[T], key: Callable[[T], str] | None = None) -> list[T]:
        """This reader's `order` for `epoch` less what a loaded state says was delivered: its first `position`
        elements, or (ordered=False) those whose sample id `key` gives is among the delivered ids. Loaders whose
        order is a list pass it through here and so resume without re-reading; without `key` (ids known only once
        read) the delivered ones are dropped after reading."""
        resume = self._active
        if resume is None or resume.epoch != epoch:
            return order
        if resume.delivered is None:
            if resume.position > len(order):
                raise WorkbenchError(f"loader '{self.name}': the state says {resume.position} items of epoch {epoch} "
                                     f"were delivered, but this reader's order has {len(order)}: the dataset "
                                     "changed since the state was saved; start the epoch afresh")
            self._claimed = True
            return order[resume.position:]
        if key is None:
            return order
        rest = [element for element in order if key(element) not in resume.skip]
        if len(order) - len(rest) != len(resume.skip):
            raise WorkbenchError(f"loader '{self.name}': {len(resume.skip) - (len(order) - len(rest))} ids the "
                                 f"state lists as delivered are not in this reader's order of epoch {epoch}: the "
                                 "dataset changed since the state was saved; start the epoch afresh")
        self._claimed = True
        return rest

    def resume_position(self, epoch: int) -> int:
        """How many items of this reader's order for `epoch` a loaded (ordered) state says were delivered, for a
        loader that skips them itself (0: start at the beginning; out-of-order states are left to the base)."""
        resume = self._active
        if resume is None or resume.epoch != epoch or resume.delivered is not None:
            return 0
        self._claimed = True
        return resume.position

    def _epoch_items(self) -> Iterator[Item]:
        """This epoch's items from where a loaded state stopped (or from the start), counted for `state_dict`."""
        with self._lock:
            resume, self._pending = self._pending, None
            if resume is not None and resume.epoch != self.epoch:
                resume = None
            self._position = resume.position if resume else 0
            self._delivered = None if self.config.ordered else list(resume.delivered or ()) if resume else []
            self._done = bool(resume and resume.done)
            self._active, self._claimed = resume, False
        if resume is not None and resume.done:
            return
        items = iter(self.iter_epoch(self.epoch))
        try:
            if resume is None or (resume.position == 0 and not resume.delivered):
                yield from items
                return
            first = next(items, None)  # the loader has run up to its first item: it has claimed the resume, or not
            if first is None:
                return
            rest: Iterator[Item] = itertools.chain([first], items)
            if not self._claimed:  # read again, drop what was delivered
                if resume.delivered is not None:
                    rest = (item for item in rest if item.key not in resume.skip)
                else:
                    rest = itertools.islice(rest, resume.position, None)
            yield from rest
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    @abstractmethod
    def iter_epoch(self, epoch: int) -> Iterator[Item]:
        """This shard's items for `epoch` (shuffled by seed and epoch when `config.shuffle`)."""

    def __iter__(self) -> Iterator[Item]:
        for item in self._epoch_items():
            with self._lock:
                self.samples += 1
                self.bytes += len(item.data)
                self._position += 1
                if self._delivered is not None:
                    self._delivered.append(item.key)
            yield item
        self._done = True

    def batches(self, size: int | None = None) -> Iterator[Batch]:
        """This epoch as batches of `size` (default `config.batch_size`) in one buffer each: the adapters' hot
        path (one object and one counter update per batch). Resumes from a loaded state as iterating does."""
        for batch in batched(self._epoch_items(), size or self.config.batch_size):
            with self._lock:
                self.samples += len(batch)
                self.bytes += batch.nbytes
                self._position += len(batch)
                if self._delivered is not None:
                    self._delivered.extend(batch.keys)
            yield batch
        self._done = True

    def connect(self) -> None:  # noqa: B027 - optional: loaders holding connections override it
        """Open connections (sessions, prepared statements) now instead of on the first read; reading connects
        by itself. Why: a benchmark times reading apart from connecting, as the native ceilings do."""

    def close(self) -> None:  # noqa: B027 - optional: loaders holding connections override it
        """Release connections and threads."""

    def __enter__(self) -> Loader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
