"""S3 WebDataset shards (the cortx_pytorch way): few big GETs, a shuffle buffer, shards as the unit of split.

Layout: `workbench.backends.s3_shards` (``<prefix>/<split>/shard-NNNNNN.tar`` + ``index.json``).

One epoch of one reader (rank x DataLoader worker):

1. the split's index is read once per loader (one GET) and cached;
2. shard order = `epoch_order(shards, seed, epoch, shuffle)`; this reader takes every count-th shard
   from its flat index (`effective_shard`). **Shards are the unit of splitting**: with fewer shards
   than ranks x workers, some readers get no shard at all and deliver nothing that epoch (a warning
   says so; nothing hangs). Ingest with a smaller ``maxcount``/``maxsize`` to give every reader work;
3. shard GETs are kept in flight on a thread pool (`in_flight`, in order unless ``ordered=False``): a number
   `parallel_shards` of them, or with ``parallel_shards="auto"`` (the default) an `AutoWindow` that starts at
   what `READ_BUDGET` bytes of shards per process hold (at least 4) and narrows where fewer GETs hold the rate,
   plus the GETs a long round trip keeps waiting for their first byte (`shard_window`, `RoundTripWindow`).
   Each shard is fetched and cut into Items in a pool thread: read as the pieces a version-2 index names,
   straight into their `bytes` (`workbench.layouts.shards.fetch_items`, no tar parsing, no whole-shard buffer;
   the pieces are made beforehand in the consuming thread, `reserve_items`), parsed only for a version-1 index.
   At most the window + 1 shards are held in memory;
4. samples pass through a `shuffle_buffer` of `shuffle_buffer` items seeded by (seed, epoch, reader),
   the WebDataset-style approximate shuffle (0 or 1, or ``shuffle=False``: shard order only).

Resuming mid-epoch (a loaded `state_dict`): the shuffle buffer is replayed on positions alone
(`workbench.loaders.order.resume_shards`), so shards it had emptied are skipped without a GET, and of the
others only the members still to come are fetched (ranged GETs with a version-2 index).

cortx_pytorch's API over this reader (``make_client``, ``RemoteDataset``) is `workbench.compat.cortx`.
"""

from __future__ import annotations

import functools
import logging
import random
import time
import warnings
from abc import abstractmethod
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import Field

from workbench.backends import locate
from workbench.concurrency import (
    AUTO,
    AUTO_START,
    AutoWindow,
    FixedWindow,
    HasWindow,
    LazyPool,
    RoundTripWindow,
    Window,
    budget_depth,
    fixed_depth,
    in_flight,
    make_window,
)
from workbench.config import Settings
from workbench.data import ShardInfo, read_shard
from workbench.data.shards import slice_shard
from workbench.errors import WorkbenchError
from workbench.layouts.shards import INDEX, fetch_items, fetch_shard, read_split_index, reserve_items, sample_item
from workbench.loaders.base import Item, Loader, LoaderConfig, RequestModel
from workbench.loaders.order import effective_shard, epoch_order, resume_shards, shuffle_buffer, take_shard
from workbench.loaders.retry import RetryConfig, policy_of
from workbench.loaders.s3_location import S3Location
from workbench.storage import S3Store

log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_PARALLEL_SHARDS = 64  # shard GETs in flight at most (threads and pooled connections are sized for it)
ROUND_TRIP_PROBES = 3  # HEADs timed for the round trip: the fastest is the one least delayed by a busy client


class S3ShardsConfig(LoaderConfig, S3Location, RetryConfig):
    shuffle_buffer: int = Field(1000, ge=0, le=1_000_000, description="samples in the shuffle buffer (0/1: off)")
    parallel_shards: Annotated[int, Field(ge=1, le=MAX_PARALLEL_SHARDS)] | Literal["auto"] = Field(
        AUTO, description="shard GETs in flight ahead of the reader, or 'auto': what READ_BUDGET bytes of shards "
                          "hold (at least 4), narrowed where fewer GETs hold the rate, plus those a long round "
                          "trip keeps waiting for their first byte")


def shard_window(parallel_shards: int | Literal["auto"], shards: Sequence[ShardInfo], readers: int,
                 round_trip_s: float = 0.0) -> Window:
    """The window of shard GETs: `parallel_shards` of them, or for "auto" an AutoWindow of what `READ_BUDGET`,
    shared by the process's `readers` (DataLoader workers), holds of the largest shard, which starts there and
    narrows where fewer GETs hold the rate; with a round trip (`round_trip_s`, measured by the reader), a
    `RoundTripWindow` over it: the GETs still waiting for their first byte come on top, at most as many again.

    Why a byte budget: a shard in flight is held whole in memory (as its pieces, allocated when its GET starts), and
    shards run from a few MB to GBs. A wider window hides a longer round trip (measured here, 50 ms RTT, 12 MB
    shards: 4 GETs 2,395-2,761 samples/s, 8 GETs 3,042-3,248), but up to 23 of them (a 256 MiB budget) took peak
    RSS from 300-390 MB to 450-870. Never below AUTO_START, the fixed default before "auto": shards too big for
    the budget keep 4 in flight as before. Why start at the budget, not at 4 and widen: memory is the only cost
    of a wider window and the budget bounds it; started at 4, a short epoch (2,000 samples, 20 shards) ended
    before the window had opened (0.85-0.89 of the Go ceiling at 0 and 50 ms in one run, at 2-4 GETs, against
    1.05 and 1.01 started at 8, same run), and a longer one opened it later, so peak RSS grew with the epoch's
    length (251 -> 308 MB from 2,000 to 20,000 samples; 290 -> 308 started at 8). It narrows where the GETs'
    latency rises with no gain in rate, and in a later epoch's re-check by rate alone.
    """
    if parallel_shards != AUTO:
        return make_window(parallel_shards)
    largest = max((info.bytes for info in shards), default=1)
    cap = min(MAX_PARALLEL_SHARDS, budget_depth(largest, readers))
    held = AutoWindow(start=cap, cap=cap)
    return RoundTripWindow(held, round_trip_s, most=min(cap, MAX_PARALLEL_SHARDS - cap)) if round_trip_s else held


def locate_prefix(settings: Settings, backend: str, config: LoaderConfig) -> tuple[str, str]:
    """(bucket, prefix) of `config.dataset`: the config's S3Location overrides, else the catalog's layout."""
    bucket, prefix = (config.bucket, config.prefix) if isinstance(config, S3Location) else (None, None)
    if bucket is None or prefix is None:
        entry = locate(settings, backend, config.dataset)
        bucket = bucket if bucket is not None else entry.get("bucket") or settings.s3_bucket
        prefix = prefix if prefix is not None else entry.get("prefix", "")
    return bucket, prefix.strip("/")


def s3_store(settings: Settings, backend: str, config: LoaderConfig, connections: int) -> S3Store:
    """The store a reader of `config.dataset` GETs through: where `locate_prefix` says, through toxiproxy or not
    (`config.via_proxy`), with `connections` pooled connections (requests in flight plus a few spare)."""
    bucket, prefix = locate_prefix(settings, backend, config)
    return S3Store(settings, bucket, prefix, config.via_proxy, connections=connections)


class S3StoreLoader(Loader):
    """A loader that GETs through one S3Store: the one it is given (compat wrappers, tests), else one made for its
    config (`s3_store`) with a pooled connection per request it keeps in flight, and 4 spare."""

    def __init__(self, settings: Settings, config: LoaderConfig, worker_id: int = 0, num_workers: int = 1,
                 *, store: S3Store | None = None) -> None:
        super().__init__(settings, config, worker_id, num_workers)
        self.store = store if store is not None else s3_store(settings, self.backend, config,
                                                              self.requests_in_flight() + 4)

    @abstractmethod
    def requests_in_flight(self) -> int:
        """The most GETs this loader has in flight at once."""


class S3ShardsLoader(HasWindow, S3StoreLoader):
    """Streams the split's tar shards from S3: shard-level split and order, sample-level shuffle buffer."""

    name = "s3-shards"
    request_model = RequestModel("one GET of a whole shard (the sweep's concurrency does not apply)",
                                 per_request="shard", window="parallel_shards")
    chaos_window: ClassVar[dict[str, Any] | None] = {"parallel_shards": 2, "shuffle_buffer": 0}
    backend = "s3-shards"
    Config = S3ShardsConfig
    config: S3ShardsConfig

    @classmethod
    def raw_ceiling(cls, settings: Settings, config: LoaderConfig) -> tuple[int, int]:
        """What plain boto3 GETs deliver: every shard of the split, `config.concurrency` threads, no parsing.

        Returns (samples, bytes): samples counted from the index, bytes = **whole shard objects** as
        transferred (tar headers, labels and the id/sum entries included, a few percent above the image
        bytes a loader counts). Time the call to get the ceiling rates. Reads all ranks' shards.
        """
        store = s3_store(settings, "s3-shards", config, fixed_depth(config.concurrency) + 4)
        split = config.split
        infos = read_split_index(store, split, config.dataset)

        def get(info: ShardInfo) -> int:
            return len(store.get(f"{split}/{info.name}")[0])

        with ThreadPoolExecutor(fixed_depth(config.concurrency), thread_name_prefix="s3-ceiling") as pool:
            total = sum(pool.map(get, infos))
        return sum(i.samples for i in infos), total

    def __init__(self, settings: Settings, config: LoaderConfig, worker_id: int = 0, num_workers: int = 1,
                 *, store: S3Store | None = None) -> None:
        super().__init__(settings, config, worker_id, num_workers, store=store)
        self._index: list[ShardInfo] | None = None
        self._pool = LazyPool(self.requests_in_flight(), "s3-shard-get")
        # shard GETs in flight, recorded in results, so a native ceiling under "auto" runs the same number of
        # shard GETs as the loader; "auto" is sized on the first epoch, once the index gives the shards' sizes
        self._window: Window = FixedWindow(AUTO_START if self.auto_window else int(self.config.parallel_shards))
        self._sized = not self.auto_window
        self._warned = False

    @property
    def auto_window(self) -> bool:
        return self.config.parallel_shards == AUTO

    def requests_in_flight(self) -> int:
        return MAX_PARALLEL_SHARDS if self.auto_window else int(self.config.parallel_shards)

    # ------------------------------------------------------------------------------------ index

    def shards(self) -> list[ShardInfo]:
        """The split's shards, from its index (one GET, cached for the loader's life)."""
        if self._index is None:
            c = self.config
            self._index = policy_of(c).call(lambda: read_split_index(self.store, c.split, c.dataset),
                                            f"reading the shard index of {self.store.where}/{c.split}")
        return self._index

    def my_shards(self, epoch: int) -> tuple[list[ShardInfo], int]:
        """This reader's shards for `epoch`, in reading order, and its flat reader index."""
        c = self.config
        index, count = effective_shard(c.shard_id, c.num_shards, self.worker_id, self.num_workers)
        shards = self.shards()
        mine = take_shard(epoch_order(shards, c.seed, epoch, c.shuffle), index, count)
        if not mine and not self._warned:
            self._warned = True
            warnings.warn(
                f"s3-shards: reader {index} of {count} (rank {c.shard_id}/{c.num_shards}, worker "
                f"{self.worker_id}/{self.num_workers}) gets no shard: {self.store.where}/{c.split} has only "
                f"{len(shards)} shard(s); shards are the unit of splitting, so ingest with a smaller "
                "maxcount/maxsize to keep every reader busy",
                RuntimeWarning, stacklevel=3,
            )
        return mine, index

    def round_trip_s(self) -> float:
        """The round trip to the store, for an "auto" window: the fastest of ROUND_TRIP_PROBES requests with no
        body (HEADs of the split's index): what a shard GET waits before its first byte (`RoundTripWindow`)."""
        key = f"{self.config.split}/{INDEX}"

        def timed_head() -> float:
            started = time.perf_counter()
            policy_of(self.config).call(lambda: self.store.head(key), f"HEAD {self.store.where}/{key}")
            return time.perf_counter() - started

        return min(timed_head() for _ in range(ROUND_TRIP_PROBES))

    # ---------------------------------------------------------------------------------- reading

    def shard_url(self, info: ShardInfo) -> str:
        return f"{self.store.where}/{self.config.split}/{info.name}"

    def fetch_retrying(self, info: ShardInfo, fetch: Callable[[ShardInfo], list[T]] | None = None) -> list[T]:
        """`fetch` (default: `fetch_raw`), re-tried on transient failures: the whole shard again, so no sample is
        lost or repeated."""
        fn = fetch or self.fetch_raw
        return policy_of(self.config).call(lambda: fn(info), f"GET {self.shard_url(info)}")

    def fetch(self, info: ShardInfo, reserved: Any | None = None) -> list[Item]:
        """GET one shard and cut it into Items (read as pieces, into `reserved` when given, or sliced by the
        index, or parsed for a version-1 index)."""
        return fetch_items(self.store, self.config.split, info, self.config.label_type, reserved=reserved)

    def fetch_raw(self, info: ShardInfo) -> list[dict[str, Any]]:
        """GET one shard as webdataset-style sample dicts (with ``__key__`` and ``__url__``), for `raw_samples`."""
        url = self.shard_url(info)
        data = fetch_shard(self.store, self.config.split, info)  # any damage: a WorkbenchError naming the shard
        samples = list(read_shard(data, url) if info.members is None else slice_shard(data, info.members, url))
        for entries in samples:
            entries["__url__"] = url
        return samples

    def raw_samples(self, epoch: int) -> Iterator[dict[str, Any]]:
        """This reader's raw sample dicts for `epoch`: shards in flight, then the shuffle buffer."""
        return self._samples(epoch, self.fetch_raw)

    def _samples(self, epoch: int, fetch: Callable[[ShardInfo], list[T]]) -> Iterator[T]:
        """What `fetch` makes of this reader's shards for `epoch`: shards in flight, then the shuffle buffer."""
        mine, index = self.my_shards(epoch)
        if not mine:
            return
        if not self._sized:  # kept across epochs: a settled "auto" stays
            self._window = shard_window(self.config.parallel_shards, self.shards(), self.num_workers,
                                        self.round_trip_s())
            self._sized = True
        pool = self._pool.get()
        size = self.config.shuffle_buffer if self.config.shuffle else 0
        rng = random.Random(f"{self.config.seed}:{epoch}:{index}")
        start = self.resume_position(epoch)
        if start:  # resuming: skip the shards the buffer had emptied, GET only the members still to come
            resume = resume_shards([info.samples for info in mine], size, rng, start)
            wanted = in_flight(resume.plan, lambda p: pool.submit(self._fetch_members, mine[p[0]], p[1], fetch),
                               self._window)
            try:
                yield from resume.items(got for _, got in wanted)
            finally:
                wanted.close()
            return

        def submit(info: ShardInfo) -> Future[list[T]]:
            # the shard's pieces are made here, in the thread that consumes them, so that one heap holds the
            # pieces of every shard, not one heap per pool thread (`reserve_items`)
            reserved = reserve_items(self.store, info) if fetch == self.fetch else None
            return pool.submit(self.fetch_retrying, info, fetch if reserved is None else
                               functools.partial(self.fetch, reserved=reserved))

        fetched = in_flight(mine, submit, self._window, ordered=self.config.ordered)

        def stream() -> Iterator[T]:
            for _, shard_samples in fetched:
                yield from shard_samples

        try:
            yield from shuffle_buffer(stream(), size, rng)
        finally:
            fetched.close()  # cancels the GETs not yet started when the consumer stops early

    def _fetch_members(self, info: ShardInfo, members: list[int], fetch: Callable[[ShardInfo], list[T]]) -> list[T]:
        """The samples at positions `members` of one shard (a resumed epoch): ranged GETs of just those when the
        index has the shard's spans, else the whole shard."""
        if fetch == self.fetch and info.members is not None and len(members) < info.samples:
            return policy_of(self.config).call(
                lambda: fetch_items(self.store, self.config.split, info, self.config.label_type, members),
                f"GET {self.shard_url(info)} (ranges)")
        samples = self.fetch_retrying(info, fetch)
        if len(samples) != info.samples:
            raise WorkbenchError(f"shard {self.shard_url(info)} holds {len(samples)} samples, its index says "
                                 f"{info.samples}: cannot resume mid-epoch exactly; re-run the ingest")
        return [samples[m] for m in members]

    def iter_epoch(self, epoch: int) -> Iterator[Item]:
        return self._samples(epoch, self.fetch)

    def item(self, entries: dict[str, Any]) -> Item:
        return sample_item(entries, self.config.label_type)

    def close(self) -> None:
        self._pool.close()


raw_ceiling = S3ShardsLoader.raw_ceiling  # the same loop as a function
