"""Resuming the reference systems' datasets mid-epoch (torchdata's Stateful convention), in the loaders' format.

Two pieces the compat datasets share:

* `Resumable`: the `state_dict()` / `load_state_dict()` plumbing of a torch IterableDataset that reads with one
  stateful reader per iteration (in each DataLoader worker): the state of the reader reading now, else of the
  last iteration, else the start of the epoch; a loaded state goes to the next iteration's reader. torchdata's
  `StatefulDataLoader` calls both in every worker, as it does for `workbench.adapters.torch.LoaderDataset`.
* `ListReader`: the reader of a dataset whose epoch is a list in a seeded order (objects): its state is the
  loaders' (`workbench.loaders.resume`: epoch, items of this reader's order delivered, reader, order fields),
  so a count of delivered items is all it keeps, and resuming skips them without reading.
* `PartitionReader`: the same for Ignite scans, partition by partition.

Datasets built on a loader (cortx's RemoteDataset) use the loader itself as their reader.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from workbench.errors import WorkbenchError
from workbench.loaders.epoch_channel import FollowsSetEpoch
from workbench.loaders.resume import Resume, check_state, make_state


def worker() -> tuple[int, int]:
    """(worker id, workers) of the DataLoader worker this runs in; (0, 1) in the main process."""
    from torch.utils.data import get_worker_info  # here: the tf.data datasets use this module without torch

    info = get_worker_info()
    return (info.id, info.num_workers) if info else (0, 1)


class Reader(Protocol):
    def state_dict(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Order:
    """What fixes a list dataset's order, as the config fields the loaders' state format checks."""

    dataset: str  # names the list (a digest of it), so a state resumes only the same list
    seed: int = 0
    shuffle: bool = False
    shard_id: int = 0
    num_shards: int = 1
    ordered: bool = True


class Resumable(FollowsSetEpoch):
    """Mixin: state_dict / load_state_dict for a dataset whose `__iter__` reads with a `Reader`.

    Subclasses define `_state_name` and `_order()`, call `_start_epochs()` in `__init__` (`FollowsSetEpoch`), and
    in `__iter__` call `_begin()` (the state to resume from, or None), set `_live` to the reader while reading and
    call `_end(reader)` when it stops.
    """

    _state_name = "dataset"
    _pending: dict[str, Any] | None = None  # loaded, for the next iteration
    _report: dict[str, Any] | None = None  # what state_dict says while no reader is reading
    _live: Reader | None = None  # the reader of the iteration in progress (in this process)

    def _order(self) -> Order:
        raise NotImplementedError

    def _reset_state(self) -> None:
        """A new epoch: forget a loaded or reported state."""
        self._pending = self._report = None

    def state_dict(self) -> dict[str, Any]:
        if self._live is not None:
            return self._live.state_dict()
        if self._report is not None:
            return dict(self._report)
        return make_state(self._state_name, self._order(), *worker(), self.epoch)  # type: ignore[arg-type]

    def check(self, state: Mapping[str, Any]) -> Resume:
        """`state` as a Resume for this reader, or one WorkbenchError line saying why it does not fit."""
        return check_state(self._state_name, state, self._order(), *worker())  # type: ignore[arg-type]

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._follow_main()  # a set_epoch sent before this state was loaded comes first, as it did there
        resume = self.check(state)
        self.epoch = resume.epoch
        self._pending = self._report = dict(state)

    def _begin(self) -> dict[str, Any] | None:
        self._follow_main()
        resume, self._pending = self._pending, None
        self._report = resume
        return resume

    def _end(self, reader: Reader) -> None:
        self._report, self._live = reader.state_dict(), None


class ListReader:
    """Reads this worker's share of an epoch's list order, counting what it delivered (the state's position)."""

    def __init__(self, owner: Resumable, order: list[Any], epoch: int, resume: Resume | None) -> None:
        self.owner, self.epoch = owner, epoch
        self.worker = worker()
        start = resume.position if resume is not None and resume.epoch == epoch else 0
        if start > len(order):
            raise WorkbenchError(f"{owner._state_name}: the state says {start} items of epoch {epoch} were delivered, "
                                 f"but this reader's order has {len(order)}: the list changed since the state was "
                                 "saved; start the epoch afresh")
        self.done = bool(resume and resume.epoch == epoch and resume.done)
        self.position = start
        self.rest = [] if self.done else order[start:]

    def state_dict(self) -> dict[str, Any]:
        return make_state(self.owner._state_name, self.owner._order(), *self.worker, self.epoch,  # type: ignore
                          self.position, self.done)

    def count(self, elements: Iterator[Any]) -> Iterator[Any]:
        """`elements` (one per element of `rest`), counted as delivered just before each is yielded."""
        for element in elements:
            self.position += 1
            yield element
        self.done = True


class PartitionReader:
    """One iteration over an Ignite reader's partitions (IgniteDataset, IgniteTorchDataset) from where a saved
    state stopped, counting what it delivered: the loaders' state plus `partition` (index into `parts`) and
    `offset` (entries of it delivered), so a resumed epoch scans only from that partition on; the entries of
    it already delivered are read again and dropped (a scan cursor cannot start mid-partition)."""

    def __init__(self, owner: Any, parts: list[int], saved: Mapping[str, Any] | None,
                 reader: tuple[int, int] = (0, 1)) -> None:
        self.owner, self.parts, self.epoch, self.worker = owner, parts, owner.epoch, reader
        self.position, self.index, self.offset, self.done = 0, 0, 0, False
        if saved is not None:
            try:
                self.position, self.done = int(saved["position"]), bool(saved["done"])
                self.index, self.offset = int(saved.get("partition", 0)), int(saved.get("offset", 0))
            except (TypeError, ValueError) as exc:
                raise WorkbenchError(f"Ignite dataset: a damaged state ({exc}): pass what state_dict() "
                                     "returned") from None
            if not 0 <= self.index <= len(parts) or self.offset < 0:
                raise WorkbenchError(f"Ignite dataset: the state stopped in partition {self.index} of "
                                     f"{len(parts)} of this reader: the cache changed; start the epoch afresh")

    def state_dict(self) -> dict[str, Any]:
        state = make_state(self.owner._state_name, self.owner._order(), *self.worker, self.epoch,  # type: ignore
                           self.position, self.done)
        return {**state, "partition": self.index, "offset": self.offset}

    def entries(self) -> Iterator[tuple[Any, Any]]:
        if self.done:
            return
        while self.index < len(self.parts):
            skip = self.offset  # entries of this partition delivered before the state was saved: read, dropped
            for seen, entry in enumerate(self.owner.source.entries([self.parts[self.index]])):
                if seen < skip:
                    continue
                self.offset, self.position = self.offset + 1, self.position + 1
                yield entry
            self.index, self.offset = self.index + 1, 0
        self.done = True
