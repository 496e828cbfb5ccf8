"""Any registered loader as a PyTorch IterableDataset, split across DataLoader workers and ranks."""

from __future__ import annotations

import contextlib
import functools
import io
import itertools
import multiprocessing
import os
import weakref
from collections.abc import Callable, Iterator
from multiprocessing.context import BaseContext
from typing import Any

import torch
from torch.utils.data import IterableDataset, get_worker_info

from workbench.adapters.worker_ring import labels_value, worker_ring
from workbench.config import Settings
from workbench.errors import WorkbenchError, first_line
from workbench.loaders import LOADERS, Batch, Item, Loader, loader_class, make_loader
from workbench.loaders.epoch_channel import FollowsSetEpoch


class LoaderDataset(FollowsSetEpoch, IterableDataset):
    """Yields `transform(item)` for this rank's and this DataLoader worker's share of an epoch.

    Each worker builds its own loader (own connections) for shard (rank, worker) of the flat
    shard space, so ranks x workers deliver every sample of the split exactly once per epoch.
    Call `set_epoch(e)` before each epoch when shuffling (as with DistributedSampler); persistent workers get
    it too (`FollowsSetEpoch`).

    Resumable (torchdata's Stateful convention): `state_dict()` is this reader's loader state (epoch, items of
    its order delivered), `load_state_dict(state)` makes the next iteration deliver the rest of that epoch.
    torchdata's `StatefulDataLoader` calls both in each worker, so its `state_dict()` taken after k batches
    resumes at batch k + 1 with any number of workers (the same number as when it was saved).
    """

    def __init__(self, loader: str, settings: Settings, transform: Callable[[Item], Any] | None = None,
                 **config: Any) -> None:
        super().__init__()
        self.loader = loader
        self.settings = settings
        self.config = loader_class(loader).Config(**config).model_dump()  # validate now, before any worker starts
        self.transform = transform or as_tuple
        self._start_epochs()  # set_epoch's epochs reach this dataset's copies in persistent workers
        self._pending: dict[str, Any] | None = None  # loaded, for the next iteration
        self._report: dict[str, Any] | None = None  # what state_dict says while no loader is reading
        self._live: Loader | None = None  # the loader of the iteration in progress (in this process)
        self._kept: tuple[int, Loader, weakref.finalize] | None = None  # this process's loader (pid, loader, closer)

    def _reset_state(self) -> None:
        """A new epoch: forget a loaded or reported state."""
        self._pending = self._report = None

    def state_dict(self) -> dict[str, Any]:
        """This reader's loader state: the one reading now, else where the last iteration stopped (or the loaded
        state not started yet), else the start of `epoch`."""
        if self._live is not None:
            return self._live.state_dict()
        if self._report is not None:
            return dict(self._report)
        cls = loader_class(self.loader)
        return cls.make_state(cls.Config(**self.config), *_worker(), self.epoch)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from `state` (checked now against this reader: a mismatch is one WorkbenchError line)."""
        self._follow_main()  # a set_epoch sent before this state was loaded comes first, as it did there
        cls = loader_class(self.loader)
        resume = cls.check_state(state, cls.Config(**self.config), *_worker())
        self.epoch = resume.epoch
        self._pending = self._report = dict(state)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_live": None, "_kept": None}  # loaders stay in their process

    def __iter__(self) -> Iterator[Any]:
        # Not a generator: the loaded state is taken now, so a state_dict() asked before the first element
        # (StatefulDataLoader asks at once) describes this iteration, not the last.
        self._follow_main()
        resume, self._pending = self._pending, None
        self._report = resume
        return self._read(resume)

    def _read(self, resume: dict[str, Any] | None) -> Iterator[Any]:
        with self._reader() as loader:
            loader.set_epoch(self.epoch)
            if resume is not None:
                loader.load_state_dict(resume)
            self._live = loader
            try:
                yield from self._elements(loader)
            finally:
                self._report, self._live = loader.state_dict(), None

    @contextlib.contextmanager
    def _reader(self) -> Iterator[Loader]:
        """This process's loader, kept from one iteration to the next as a training job keeps its connections,
        listing and settled "auto" window (a persistent DataLoader worker otherwise connected again each epoch:
        cassandra read 760 samples/s through 2 such workers, 1,830 in one process). Made at the first
        iteration, closed with the dataset; made afresh after an iteration that failed, and in a forked worker
        (its parent's is not its own). A second iteration while one is reading gets a loader of its own."""
        if self._live is not None:
            with self._new_loader() as loader:
                yield loader
            return
        pid = os.getpid()
        if self._kept is None or self._kept[0] != pid:
            loader = self._new_loader()
            self._kept = (pid, loader, weakref.finalize(self, _close_in, pid, loader))
        _, loader, close = self._kept
        try:
            yield loader
        except GeneratorExit:  # the consumer stopped early: the loader is fine
            raise
        except BaseException:
            self._kept = None
            close()  # once: the finalizer is spent
            raise

    def _new_loader(self) -> Loader:
        return make_loader(self.loader, self.settings, *_worker(), **self.config)

    def _elements(self, loader: Loader) -> Iterator[Any]:
        for item in loader:
            yield self.transform(item)


class BatchDataset(LoaderDataset):
    """Yields one dict of tensors per batch of `batch_size`: use it with `DataLoader(batch_size=None)`.

    Why: the payloads of a batch travel as one uint8 tensor plus offsets (see `workbench.data.Batch`), so a
    DataLoader worker hands them to the main process through shared memory instead of pickling every
    sample's bytes through a pipe, and the main process touches one object per batch. Without a transform, a
    worker's batches go through its ring of reused shared-memory slots (`workbench.adapters.worker_ring`). Elements:
    {"data": uint8 [bytes], "offsets": int64 [n + 1], "label": int64 [n] (-1: none) or a list of blobs,
    "key": list of ids}; `payloads(batch)` slices the samples out without copying. A `transform` gets and
    returns such a dict (e.g. `decode_batch`), in the worker. Resumable like `LoaderDataset` (state in samples).
    """

    def _elements(self, loader: Loader) -> Iterator[Any]:
        transform = None if self.transform is as_tuple else self.transform
        ring = worker_ring() if transform is None else None  # in a worker: the batch travels in a reused slot
        for batch in loader.batches():
            if ring is not None and (packed := ring.pack(batch)) is not None:
                yield packed
                continue
            element = batch_tensors(batch)
            yield transform(element) if transform else element


def _close_in(pid: int, loader: Loader) -> None:
    """Close `loader` in the process that made it (a forked child collecting its copy leaves the parent's
    connections alone)."""
    if os.getpid() == pid:
        loader.close()


def _worker() -> tuple[int, int]:
    """(worker id, workers) of the DataLoader worker this runs in; (0, 1) in the main process."""
    info = get_worker_info()
    return (info.id, info.num_workers) if info else (0, 1)


def batch_tensors(batch: Batch) -> dict[str, Any]:
    """A Batch as tensors that share its buffer (no copy)."""
    return {"data": torch.from_numpy(batch.buffer), "offsets": torch.from_numpy(batch.offsets),
            "label": labels_value(list(batch.labels)), "key": list(batch.keys)}


def payloads(element: dict[str, Any]) -> list[torch.Tensor]:
    """The samples of a `BatchDataset` element: uint8 views of its data tensor."""
    data, offsets = element["data"], element["offsets"].tolist()
    return [data[start:end] for start, end in itertools.pairwise(offsets)]


def decode_batch(element: dict[str, Any], size: int = 224) -> dict[str, Any]:
    """A `BatchDataset` transform: decode every sample (torchvision), resize and crop to `size`: adds
    "image" (uint8 N x 3 x size x size) and drops the encoded bytes."""
    images = [resize_crop(decode_image_bytes(raw, key), size, antialias=True)
              for raw, key in zip(payloads(element), element["key"], strict=True)]
    return {"image": torch.stack(images) if images else torch.empty(0, 3, size, size, dtype=torch.uint8),
            "label": element["label"], "key": element["key"]}


def as_tuple(item: Item) -> tuple[bytes, int | bytes | None, str]:
    """The raw sample: (encoded bytes, label, key). Collate with `collate_raw`."""
    return item.data, item.label, item.key


def collate_raw(batch: list[tuple]) -> dict[str, list]:
    """Batches of raw samples stay lists: encoded images differ in length."""
    data, labels, keys = zip(*batch, strict=True)
    return {"data": list(data), "label": list(labels), "key": list(keys)}


def decode_transform(size: int = 224, on_corrupt: str = "raise") -> Callable[[Item], tuple | None]:
    """Decode (torchvision), resize the short side, center-crop to `size`: (CHW uint8 tensor, label).

    A corrupt image raises with its key, or yields None with on_corrupt="skip" (drop it with
    `skip_none` as collate function wrapper). A partial of a module function, so it pickles into
    forkserver/spawn workers.
    """
    return functools.partial(decode_item, size=size, on_corrupt=on_corrupt)


def decode_image_bytes(data: bytes | torch.Tensor, key: str, mode: str = "RGB") -> torch.Tensor:
    """Encoded bytes (or a uint8 tensor of them) -> CHW uint8 tensor; a corrupt image raises a WorkbenchError
    naming the sample."""
    from torchvision.io import ImageReadMode, decode_image

    encoded = data if isinstance(data, torch.Tensor) else torch.frombuffer(bytearray(data), dtype=torch.uint8)
    try:
        return decode_image(encoded, mode=ImageReadMode[mode])
    except RuntimeError as exc:
        raise WorkbenchError(f"sample {key}: cannot decode image ({first_line(exc)})") from exc


def resize_crop(image: torch.Tensor, size: int, **resize: Any) -> torch.Tensor:
    """Short side to `size`, then the centre `size` x `size` square."""
    from torchvision.transforms.v2 import functional as F

    return F.center_crop(F.resize(image, [size], **resize), [size, size])


def decode_item(item: Item, size: int = 224, on_corrupt: str = "raise") -> tuple | None:
    """One sample of `decode_transform`."""
    try:
        image = decode_image_bytes(item.data, item.key)
    except WorkbenchError:
        if on_corrupt == "skip":
            return None
        raise
    if isinstance(item.label, bytes):
        raise WorkbenchError(f"sample {item.key}: decode_transform yields class labels, this one is a blob "
                             "(label_type blob): decode masks/multilabels in a transform of your own")
    return resize_crop(image, size, antialias=True), -1 if item.label is None else item.label


def skip_none(collate: Callable[[list], Any]) -> Callable[[list], Any]:
    """`collate` over the samples that are not None (those a transform dropped); pickles if `collate` does."""
    return functools.partial(_collate_present, collate)


def _collate_present(collate: Callable[[list], Any], batch: list) -> Any:
    return collate([b for b in batch if b is not None])


# imported once by the forkserver, so each worker forks from a warm, thread-free process (a missing one is skipped)
WORKER_PRELOAD = ["torch", "torchvision.io", "torchvision.transforms.v2", "workbench.adapters.torch",
                  *sorted({path.split(":")[0] for path in LOADERS.values()})]


def worker_context(settings: Settings, workers: int) -> BaseContext | None:
    """The multiprocessing context of a DataLoader's `workers` (None when loading in-process).

    Why: forking a process that already runs threads (TF's pools, gRPC, the drivers' IO loops) can
    hand a worker a lock no thread will release, or crash it: a Lightning validation worker forked
    after Keras had run in the same process died of a segfault. forkserver (Python 3.14's default)
    forks from a clean server that imported torch and the loaders once; `settings.worker_start`
    picks spawn or fork instead. Datasets, transforms and collate functions must then pickle.
    """
    if workers == 0:
        return None
    context = multiprocessing.get_context(settings.worker_start)
    if settings.worker_start == "forkserver":
        context.set_forkserver_preload(WORKER_PRELOAD)  # only read when the server first starts
    return context


def pil_transform(item: Item):
    """(PIL image, label): for torchvision transforms that expect PIL."""
    from PIL import Image

    return Image.open(io.BytesIO(item.data)).convert("RGB"), item.label
