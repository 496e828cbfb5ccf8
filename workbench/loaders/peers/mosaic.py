"""Peer: MosaicML ``streaming`` (StreamingDataset over MDS shards written by its own MDSWriter) on MinIO.

Layout (its own, beside the dataset's s3-shards layout: same bucket and prefix, from the catalog)::

    s3://<bucket>/<prefix>/mds/<split>/index.json          MDSWriter's index
    s3://<bucket>/<prefix>/mds/<split>/shard.NNNNN.mds     columns: id (str), data (bytes), and
                                                           label (int, or bytes for blob labels; absent for none)

`write_mds` writes that copy (idempotent: nothing happens when the index exists); the benchmark calls it
after ingesting (it is the loader's ``prepare_dataset`` hook), from the same source or, with no source,
from the dataset's s3-shards layout. `drop_mds` deletes it. ``s3-objects``' ``drop`` deletes it too when
both layouts share the prefix (it removes every non-shard key there).

How streaming reaches MinIO: its S3 up/downloaders make a plain ``boto3.session.Session().client("s3",
endpoint_url=os.environ["S3_ENDPOINT_URL"])`` — endpoint and credentials only come from the environment.
So ``S3_ENDPOINT_URL`` (``settings.s3_endpoint(via_proxy)``), ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``
(Settings; never logged) and ``AWS_DEFAULT_REGION`` are set in this process when writing or connecting;
with settings.tls also ``AWS_CA_BUNDLE`` (the system's CAs plus the stack's, `peers.trust_bundle`).
They are process-global, and a dataset keeps the client it made when it read the index: two loaders in
one process with different ``via_proxy`` must not be built at the same moment (the construction holds
a lock). Path-style addressing follows from the endpoint being an IP address (botocore's rule).

Reading: one ``StreamingDataset(remote=..., local=<state_dir>/mosaic-cache/<dataset>/<split>/<unique>,
shuffle=shuffle, shuffle_seed=seed, batch_size=batch_size)`` per loader instance, built on the first
epoch and reused, so later epochs read the shards it already downloaded (that is how streaming works;
set ``cache_limit`` to make it evict). The epoch is set through streaming's own counter
(``next_epoch``), so shuffled epochs differ and a seed reproduces an order. ``concurrency`` is not used
(streaming downloads ahead with its own threads, ``predownload`` samples).

Ranks and workers — how shard_id/num_shards map onto streaming: streaming partitions an epoch over a
`World` (nodes x ranks x workers) that it detects from WORLD_SIZE/RANK/LOCAL_WORLD_SIZE and torch's
worker info. Setting those variables in-process is not possible: with WORLD_SIZE > 1 streaming calls
``torch.distributed.init_process_group`` in its constructor and waits for the other ranks, and its
DataLoader workers coordinate through a shared-memory barrier that all workers of a rank join (ours
are separate loaders, so they would wait for each other forever). Instead each loader instance
(one rank x DataLoader worker reader) is built as a one-process world (WORLD_SIZE=1 and no DataLoader
worker info while the constructor runs, under a lock) and then given a pinned World:
``num_nodes = count`` physical nodes of one rank and one worker each, this reader being node
``index`` (`effective_shard`). Streaming then applies its own partitioning (canonical nodes, shuffle
blocks), each reader downloads only the shards its partition needs, and readers never overlap. As in
any streaming run, an epoch whose sample count is not a multiple of the reader count is padded by
repeating up to count-1 samples so that every reader gets as many samples as the others. This pins two
attributes of StreamingDataset (``_unique_rank_world``, ``_parallel_rank_world``; streaming 0.13); a
version without them fails with a WorkbenchError rather than splitting wrongly.

Shared memory: a dataset registers shared-memory blocks and file locks keyed by its (unique) local dir.
`close` releases this instance's blocks and lock files and deletes its cache dir. It does not call
``streaming.base.util.clean_stale_shared_memory()``: that unlinks every streaming block on the host,
including those of other loaders still running (DataLoader workers of the same run).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import tempfile
import threading
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field

from workbench.backends import locate, make_backend
from workbench.backends.base import storage_name
from workbench.concurrency import PicklesWithoutLocks
from workbench.config import Settings
from workbench.errors import WorkbenchError, with_type
from workbench.layouts.common import check_split
from workbench.loaders.base import Item, LoaderConfig, RequestModel
from workbench.loaders.order import effective_shard
from workbench.loaders.peers import Peer, trust_stack_ca
from workbench.storage import S3Store

log = logging.getLogger(__name__)

MDS_DIR = "mds"
MDS_INDEX = "index.json"  # MDS's own index, not our shard index
_ENV_LOCK = threading.RLock()


@contextlib.contextmanager
def _machine_lock(path: Path) -> Iterator[None]:
    """Serialise StreamingDataset construction across processes: streaming picks shared-memory names
    (e.g. /000000_locals) by probing which are free, so two DataLoader workers starting together can
    pick the same one and fail with FileExistsError."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
_WORLD_VARS = ("WORLD_SIZE", "RANK", "LOCAL_WORLD_SIZE", "LOCAL_RANK")


class MosaicConfig(LoaderConfig):
    bucket: str | None = Field(None, description="bucket (default: the catalog's s3-shards bucket)")
    prefix: str | None = Field(None, description="dataset prefix; the MDS copy is under <prefix>/mds/<split>/")
    predownload: int | None = Field(None, ge=1, description="samples downloaded ahead (default 8 x batch_size)")
    cache_limit: str | None = Field(None, description="streaming's local cache limit, e.g. '1gb' (default: keep all)")


def _import_streaming():
    try:
        import streaming
    except ImportError as exc:
        raise WorkbenchError(
            f"mosaicml-streaming is not usable here ({with_type(exc, 200)}): "
            "install the peers extra (`pip install mosaicml-streaming`)"
        ) from None
    return streaming


def mds_location(settings: Settings, dataset: str, split: str = "train", bucket: str | None = None,
                 prefix: str | None = None) -> tuple[str, str]:
    """(bucket, key prefix of the split's MDS copy): ``<prefix>/mds/<split>`` beside the s3-shards layout."""

    check_split(split)
    bucket, prefix = dataset_location(settings, dataset, bucket, prefix)
    return bucket, f"{prefix}/{MDS_DIR}/{split}" if prefix else f"{MDS_DIR}/{split}"


def dataset_location(settings: Settings, dataset: str, bucket: str | None = None,
                     prefix: str | None = None) -> tuple[str, str]:
    """(bucket, prefix) of the dataset's s3-shards layout: the overrides, else the catalog's, else the default."""
    if bucket is None or prefix is None:
        entry = locate(settings, "s3-shards", dataset)
        bucket = bucket if bucket is not None else entry.get("bucket") or settings.s3_bucket
        prefix = prefix if prefix is not None else entry.get("prefix", "")
    return bucket, prefix.strip("/")


def _set_streaming_env(settings: Settings, via_proxy: bool) -> None:
    """What streaming's boto3 sessions read: endpoint, credentials, region (process-global)."""
    access, secret = settings.s3_credentials()
    os.environ["S3_ENDPOINT_URL"] = settings.s3_endpoint(via_proxy)
    os.environ["AWS_ACCESS_KEY_ID"] = access
    os.environ["AWS_SECRET_ACCESS_KEY"] = secret
    os.environ["AWS_DEFAULT_REGION"] = settings.s3_region
    os.environ.pop("AWS_SESSION_TOKEN", None)
    trust_stack_ca(settings, "AWS_CA_BUNDLE")  # https endpoint: streaming's clients take no verify= argument


@contextlib.contextmanager
def _one_process_world() -> Iterator[None]:
    """A single-process World while a StreamingDataset is built: WORLD_SIZE/RANK/LOCAL_* of one process and
    no DataLoader worker info (streaming's `World.detect` reads both; inside a DataLoader worker it would
    otherwise wait for worker 0 to download the index into worker 0's local dir). Restored after."""
    from streaming.base import world

    saved = {k: os.environ.get(k) for k in _WORLD_VARS}
    os.environ.update({"WORLD_SIZE": "1", "RANK": "0", "LOCAL_WORLD_SIZE": "1", "LOCAL_RANK": "0"})
    detect = world.get_worker_info
    world.get_worker_info = lambda: None
    try:
        yield
    finally:
        world.get_worker_info = detect
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _store(settings: Settings, bucket: str, key_prefix: str, via_proxy: bool = False):
    return S3Store(settings, bucket, key_prefix, via_proxy, connections=8)


def _label_type_of(label: Any) -> str:
    if label is None:
        return "none"
    if isinstance(label, bytes | bytearray):
        return "blob"
    if isinstance(label, int) and not isinstance(label, bool):
        return "int"
    raise WorkbenchError(f"label of type {type(label).__name__} cannot be written to MDS: int, bytes or None")


def write_mds(settings: Settings, dataset: str, samples_or_source: Iterable[Any] | None = None, split: str = "train",
              *, label_type: Literal["int", "blob", "none"] | None = None, size_limit: int | str = 1 << 26,
              via_proxy: bool = False, bucket: str | None = None, prefix: str | None = None) -> str:
    """Write the MDS copy of `dataset`'s `split` with streaming's MDSWriter; returns its ``s3://`` URL.

    `samples_or_source`: anything yielding samples with ``id``, ``label``, ``data`` and ``split`` (a
    `workbench.data` source, `Sample`s, `StoredSample`s); None reads the dataset's s3-shards layout.
    Only samples of `split` are written. `label_type` None: taken from the first sample. Idempotent:
    returns at once when ``index.json`` already exists (delete the copy with `drop_mds` to rewrite it).
    """
    _import_streaming()
    from streaming import MDSWriter

    bucket, key_prefix = mds_location(settings, dataset, split, bucket, prefix)
    remote = f"s3://{bucket}/{key_prefix}"
    store = _store(settings, bucket, key_prefix, via_proxy)
    store.ensure_bucket(True)
    if store.get_or_none(MDS_INDEX) is not None:
        return remote
    if samples_or_source is None:
        shards_bucket, shards_prefix = dataset_location(settings, dataset, bucket, prefix)
        samples_or_source = make_backend("s3-shards", settings, dataset, bucket=shards_bucket,
                                         prefix=shards_prefix, via_proxy=via_proxy).scan()
    samples = (s for s in samples_or_source if getattr(s, "split", split) == split)
    first = next(samples, None)
    if first is None:
        raise WorkbenchError(f"no sample of split '{split}' to write to {remote}")
    label_type = label_type or _label_type_of(first.label)
    columns = {"id": "str", "data": "bytes"}
    if label_type != "none":
        columns["label"] = "int" if label_type == "int" else "bytes"

    work = Path(settings.state_dir) / "mosaic-write"
    work.mkdir(parents=True, exist_ok=True)
    local = Path(tempfile.mkdtemp(prefix=f"{dataset[:40]}-{split}-", dir=work))
    written = 0
    try:
        with _ENV_LOCK:
            _set_streaming_env(settings, via_proxy)
            writer = MDSWriter(out=(str(local / "out"), remote), columns=columns, size_limit=size_limit,
                               compression=None, progress_bar=False)
        with writer:
            for s in _chain(first, samples):
                sample = {"id": str(s.id), "data": bytes(s.data)}
                if label_type != "none":
                    if _label_type_of(s.label) != label_type:
                        raise WorkbenchError(
                            f"sample {s.id} has a {type(s.label).__name__} label but the MDS copy of '{dataset}' is "
                            f"written with label_type {label_type}"
                        )
                    sample["label"] = int(s.label) if label_type == "int" else bytes(s.label)
                writer.write(sample)
                written += 1
    except WorkbenchError:
        raise
    except Exception as exc:
        text = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
        raise WorkbenchError(f"writing the MDS copy to {remote} failed: {type(exc).__name__}: {text}") from None
    finally:
        shutil.rmtree(local, ignore_errors=True)
    log.info("wrote %d samples of %s/%s as MDS to %s", written, dataset, split, remote)
    return remote


def _chain(first: Any, rest: Iterator[Any]) -> Iterator[Any]:
    yield first
    yield from rest


def drop_mds(settings: Settings, dataset: str, split: str | None = None, *, bucket: str | None = None,
             prefix: str | None = None) -> None:
    """Delete the MDS copy of one split (or of every split); idempotent."""
    bucket, key_prefix = mds_location(settings, dataset, split or "train", bucket, prefix)
    if split is None:
        key_prefix = key_prefix.rsplit("/", 1)[0]
    store = _store(settings, bucket, key_prefix)
    if store.bucket_exists():
        store.delete([k for k, _ in store.list()])


class MosaicStreamingPeer(PicklesWithoutLocks, Peer):
    """A StreamingDataset of the MDS copy, one per loader instance, pinned to this reader's partition."""

    name = "mosaic-streaming"
    request_model = RequestModel("streaming's own download threads decide what is in flight, not a window of ours",
                                 per_request=None)
    backend = "s3-shards"  # where the dataset is ingested first; the MDS copy is written beside it
    Config = MosaicConfig
    config: MosaicConfig
    prepare_dataset = staticmethod(write_mds)  # the sweep calls it after ingesting
    # each process builds its own (shared memory, threads)
    process_state: ClassVar[dict[str, Any]] = {"_dataset": None, "_local": None}

    def __init__(self, settings: Settings, config: LoaderConfig, worker_id: int = 0, num_workers: int = 1) -> None:
        super().__init__(settings, config, worker_id, num_workers)
        self._dataset = None
        self._local: Path | None = None

    def remote(self) -> str:
        bucket, key_prefix = mds_location(self.settings, self.config.dataset, self.config.split,
                                          self.config.bucket, self.config.prefix)
        return f"s3://{bucket}/{key_prefix}"

    def connect(self):
        if self._dataset is not None:
            return self._dataset
        _import_streaming()
        from streaming import StreamingDataset
        from streaming.base.world import World


        c = self.config
        index, count = effective_shard(c.shard_id, c.num_shards, self.worker_id, self.num_workers)
        remote = self.remote()
        local = Path(self.settings.state_dir) / "mosaic-cache" / storage_name(c.dataset) / c.split / uuid.uuid4().hex
        local.parent.mkdir(parents=True, exist_ok=True)
        self._local = local
        try:
            with _ENV_LOCK, _machine_lock(local.parent.parent.parent / ".streaming.lock"), _one_process_world():
                _set_streaming_env(self.settings, c.via_proxy)
                dataset = StreamingDataset(
                    remote=remote, local=str(local), shuffle=c.shuffle, shuffle_seed=c.seed % 2**31,
                    batch_size=c.batch_size, predownload=c.predownload, cache_limit=c.cache_limit,
                    download_timeout=max(60.0, self.settings.timeout_s), allow_unsafe_types=False,
                )
        except Exception as exc:
            self._remove_local()
            text = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
            if "not found" in text.lower() or "404" in text or isinstance(exc, FileNotFoundError):
                raise WorkbenchError(
                    f"no MDS copy at {remote}/{MDS_INDEX}: write it after ingesting "
                    f"(workbench.loaders.peers.mosaic.write_mds(settings, '{c.dataset}', source))"
                ) from None
            raise WorkbenchError(f"mosaic streaming cannot open {remote}: {type(exc).__name__}: {text}") from None
        if not (hasattr(dataset, "_unique_rank_world") and hasattr(dataset, "_parallel_rank_world")):
            self._release(dataset)
            raise WorkbenchError(
                "this mosaicml-streaming version has no _unique_rank_world/_parallel_rank_world: the loader cannot "
                "pin its partition (ranks x workers); use streaming 0.13"
            )

        class PinnedWorld(World):
            """This reader as node `index` of `count`, one rank and one worker: torch's worker info is ignored."""

            @classmethod
            def _get_worker_info(cls) -> tuple[int, int]:
                return 0, 1

        dataset._unique_rank_world = PinnedWorld(num_nodes=count, ranks_per_node=1, workers_per_rank=1, worker=index)
        dataset._parallel_rank_world = PinnedWorld(num_nodes=count, ranks_per_node=1, workers_per_rank=1, worker=index)
        self._dataset = dataset
        return dataset

    def iter_epoch(self, epoch: int) -> Iterator[Item]:
        dataset = self.connect()
        dataset.next_epoch = epoch  # streaming pre-increments its own counter in __iter__
        for sample in dataset:
            yield Item(str(sample["id"]), self._label(sample), bytes(sample["data"]))

    def _label(self, sample: dict[str, Any]) -> int | bytes | None:
        """The label per label_type: int column -> int, bytes column -> bytes; a mismatch names the sample."""
        wanted = self.config.label_type
        if wanted == "none":
            return None
        stored = sample.get("label")
        stored_type = "none" if stored is None else "blob" if isinstance(stored, bytes | bytearray) else "int"
        if stored_type != wanted:
            raise WorkbenchError(
                f"sample {sample.get('id')} in {self.remote()} has label type {stored_type} but label_type is "
                f"{wanted}: use label_type {stored_type}"
            )
        return int(stored) if wanted == "int" else bytes(stored)

    def close(self) -> None:
        dataset, self._dataset = self._dataset, None
        if dataset is not None:
            self._release(dataset)
        self._remove_local()

    def _remove_local(self) -> None:
        """Delete this instance's cache dir (downloaded shards), and its <split>/<dataset> parents once empty."""
        if self._local is not None:
            shutil.rmtree(self._local, ignore_errors=True)
            for parent in (self._local.parent, self._local.parent.parent):
                with contextlib.suppress(OSError):
                    parent.rmdir()
            self._local = None

    @staticmethod
    def _release(dataset) -> None:
        """Stop its threads, release its own shared memory and file locks (no other dataset's)."""
        iterator = getattr(dataset, "_iterator", None)
        if iterator is not None:
            iterator.exit()
        executor = getattr(dataset, "_executor", None)
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)
        holders = [
            getattr(dataset, "_locals_shm", None),
            getattr(getattr(getattr(dataset, "_shared_barrier", None), "_arr", None), "shm", None),
            getattr(getattr(getattr(dataset, "_next_epoch", None), "arr", None), "shm", None),
            getattr(getattr(getattr(dataset, "_cache_usage", None), "arr", None), "shm", None),
            getattr(getattr(dataset, "_shard_states", None), "shm", None),
            getattr(getattr(dataset, "_shard_access_times", None), "shm", None),
            getattr(dataset, "_resume_shm", None),
        ]
        for shm in holders:
            if shm is not None and hasattr(shm, "cleanup"):
                with contextlib.suppress(Exception):
                    shm.cleanup()
        prefix = getattr(dataset, "_shm_prefix_int", None)
        if prefix is not None:
            from streaming.base.constant import BARRIER_FILELOCK, CACHE_FILELOCK
            from streaming.base.shared.prefix import _get_path

            for name in (BARRIER_FILELOCK, CACHE_FILELOCK):
                with contextlib.suppress(OSError):
                    os.remove(os.path.join(tempfile.gettempdir(), _get_path(prefix, name)))
