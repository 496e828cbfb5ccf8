"""cortx_pytorch's API: ``make_client``, ``upload_cv_dataset`` and ``RemoteDataset`` over our s3-shards layout.

    client = make_client(url, access_key, secret_key)
    upload_cv_dataset(torch_ds, client=client, bucket=bucket, base_folder=folder, maxsize=1e8, maxcount=100_000,
                      workers=8)
    ds = RemoteDataset(client, bucket, folder).decode("pil").to_tuple("jpg;png", "cls")
    ds = ds.map_tuple(preproc, lambda x: x).batched(64)
"""

from __future__ import annotations

import copy
import dataclasses
import multiprocessing
import os
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

from pydantic import ValidationError
from torch.utils.data import IterableDataset

from workbench.compat.resumable import Resumable, worker
from workbench.concurrency import in_flight
from workbench.config import Settings
from workbench.data import META_ENTRIES, Sample, TorchDatasetSource
from workbench.errors import WorkbenchError, first_line
from workbench.layouts.common import check_split
from workbench.layouts.shards import ShardSet, sample_item
from workbench.loaders.s3_shards import S3ShardsConfig, S3ShardsLoader
from workbench.storage import S3Store, s3_client_at


def make_client(url: str, access_key: str, secret_key: str, region: str = "us-east-1", timeout_s: float = 10.0,
                max_pool_connections: int = 64, verify: bool | str | None = None):
    """A boto3 S3 client for an endpoint URL, like cortx_pytorch's ``make_client`` (path-style, timeouts).

    `verify` is boto3's: None/True for the system's CAs, or a CA bundle path (an https stack:
    ``str(settings.ca_file())``). TLS failures become one clear WorkbenchError (`workbench.storage.s3`).
    """
    return s3_client_at(url, access_key, secret_key, region=region, timeout_s=timeout_s,
                        max_pool_connections=max_pool_connections, verify=verify)


# --------------------------------------------------------------------------- upload_cv_dataset

_CHUNK = 32  # items per worker task: small enough to keep every worker busy, big enough to amortise pickling
_UPLOAD_THREADS = 4
_FORMATS = {"jpg": "JPEG", "png": "PNG"}


@dataclasses.dataclass(frozen=True)
class UploadSummary:
    """What one `upload_cv_dataset` call did: samples and bytes uploaded now, samples already there."""

    samples: int
    bytes: int
    skipped: int
    uri: str


class _PilImages:
    """The dataset with CHW tensor images as PIL images (the source encodes PIL images, arrays and bytes)."""

    def __init__(self, ds: Any) -> None:
        self.ds = ds
        self.classes = getattr(ds, "classes", None)

    def __len__(self) -> int:
        return len(self.ds)

    def __getitem__(self, index: int) -> Any:
        item = self.ds[index]
        if not isinstance(item, tuple | list) or len(item) != 2:
            raise WorkbenchError(f"dataset item {index} is not an (image, label) pair: got {type(item).__name__}")
        image, label = item
        if hasattr(image, "detach"):  # a torch tensor (CHW, float in [0, 1] or uint8)
            from torchvision.transforms.functional import to_pil_image

            image = to_pil_image(image.detach().cpu())
        return image, label


def upload_source(ds: Any, base_folder: str, image_format: str = "jpg", split: str = "train") -> TorchDatasetSource:
    """The samples `upload_cv_dataset` stores for `ds`: ids (and so tar keys) from the folder and the item index."""
    if image_format not in _FORMATS:
        raise WorkbenchError(f"image_format must be one of {', '.join(_FORMATS)}, got {image_format!r}")
    return TorchDatasetSource(_PilImages(ds), base_folder.strip("/"), image_format=_FORMATS[image_format],  # type: ignore[arg-type]
                              split=check_split(split))


class _Encoder:
    """Encodes runs of indices into Samples, leaving out stored ids; one per process (sent once, not per task)."""

    def __init__(self, source: TorchDatasetSource, stored: set[uuid.UUID]) -> None:
        self.source, self.stored = source, stored

    def __call__(self, indices: Sequence[int]) -> list[Sample]:
        samples = []
        for index in indices:
            try:
                sample = self.source.sample(index)
            except (TypeError, ValueError) as exc:  # a label or image the source cannot store
                raise WorkbenchError(f"dataset item {index}: {first_line(exc)}") from None
            if sample.id not in self.stored:
                samples.append(sample)
        return samples


_WORKER_ENCODER: _Encoder | None = None


def _start_worker(encoder: _Encoder) -> None:
    global _WORKER_ENCODER
    _WORKER_ENCODER = encoder


def _encode_in_worker(indices: Sequence[int]) -> list[Sample]:
    assert _WORKER_ENCODER is not None
    return _WORKER_ENCODER(indices)


def _encoded(encoder: _Encoder, count: int, workers: int) -> Iterator[Sample]:
    """The samples of items 0..count-1, in index order, encoded by `workers` processes (1: here)."""
    chunks = [range(i, min(i + _CHUNK, count)) for i in range(0, count, _CHUNK)]
    if workers == 1:
        for chunk in chunks:
            yield from encoder(chunk)
        return
    with ProcessPoolExecutor(workers, multiprocessing.get_context(), _start_worker, (encoder,)) as pool:
        def submit(chunk: range) -> Future:
            return pool.submit(_encode_in_worker, chunk)

        for _, samples in in_flight(chunks, submit, 2 * workers):
            yield from samples


def upload_cv_dataset(ds: Any, client: Any, bucket: str, base_folder: str, maxsize: float = 1e8,
                      maxcount: int = 100_000, workers: int = 1, *, split: str = "train", image_format: str = "jpg",
                      create_bucket: bool = True, progress: Callable[[int, int], None] | None = None,
                      ) -> UploadSummary:
    """cortx_pytorch's ``upload_cv_dataset``: a map-style (image, label) dataset into ``s3://bucket/base_folder/split/``.

    `workers` processes encode the items (`TorchDatasetSource`, as ``workbench ingest`` does: JPEG, or
    lossless PNG with ``image_format="png"``; PIL images, uint8 arrays, CHW tensors or encoded bytes; int or
    bytes labels) in runs of consecutive indices, which come back in index order; the workbench shard writer
    (`ShardSet`, the s3-shards layout) packs them into tar shards of at most `maxsize` bytes and `maxcount`
    samples, uploads them on threads and writes the index `RemoteDataset` reads. Sample ids derive from the
    folder and the index (`upload_source`), so the shards are the same for any `workers`, and an upload run
    again (or resumed after a failure) leaves out the samples already stored: never a duplicate.
    Packing stays in this process: the writer numbers shards and writes their records and index in one place.
    """
    if not isinstance(workers, int) or workers < 1:
        raise WorkbenchError(f"workers must be an integer >= 1, got {workers!r}")
    if maxcount < 1 or maxsize <= 0:
        raise WorkbenchError(f"maxcount must be >= 1 and maxsize > 0, got maxcount={maxcount} maxsize={maxsize}")
    if not hasattr(ds, "__len__") or not hasattr(ds, "__getitem__"):
        raise WorkbenchError(f"upload_cv_dataset needs a map-style dataset (len and [i]), got {type(ds).__name__}")
    source = upload_source(ds, base_folder, image_format, split)
    count = len(source)
    store = S3Store.from_client(client, bucket, base_folder.strip("/"))
    store.ensure_bucket(create_bucket)
    shards = ShardSet(store, maxsize, maxcount, _UPLOAD_THREADS, "any")
    stored = shards.stored_ids()
    done = [0, 0]

    def counted(samples: int, size: int) -> None:
        done[0] += samples
        done[1] += size
        if progress is not None:
            progress(samples, size)

    shards.write(_encoded(_Encoder(source, stored), count, workers), counted)
    return UploadSummary(done[0], done[1], count - done[0], f"{store.where}/{split}")


# -------------------------------------------------------------------------------- RemoteDataset


class _ClientSpec:
    """How to rebuild a given boto3 client in another process (endpoint, region, credentials, config)."""

    def __init__(self, client: Any) -> None:
        self.endpoint_url = client.meta.endpoint_url
        self.region = client.meta.region_name
        self.config = client.meta.config
        # botocore keeps the signing credentials here; there is no public getter on a client.
        creds = getattr(getattr(client, "_request_signer", None), "_credentials", None)
        frozen = creds.get_frozen_credentials() if creds is not None else None
        self.access_key = frozen.access_key if frozen else None
        self.secret_key = frozen.secret_key if frozen else None
        self.token = frozen.token if frozen else None
        # TLS verification (True, False or a CA bundle path, e.g. the stack's CA): botocore keeps it on the
        # client's HTTP session only, and without it a worker's client would not trust a private CA.
        session = getattr(getattr(client, "_endpoint", None), "http_session", None)
        self.verify = getattr(session, "_verify", None)

    def make(self) -> Any:
        return s3_client_at(self.endpoint_url, self.access_key, self.secret_key, region=self.region,
                            timeout_s=self.config.connect_timeout or 10.0, verify=self.verify,
                            session_token=self.token, config=self.config)


class RemoteDataset(Resumable, IterableDataset):
    """cortx_pytorch's dataset: s3-shards streamed into a webdataset-style pipeline.

    ``RemoteDataset(settings_or_client, bucket, folder, split="train", **loader_config)`` reads
    ``s3://bucket/folder/<split>/`` (the s3-shards layout) with `S3ShardsLoader` (``shuffle_buffer``,
    ``parallel_shards``, ``shuffle``, ``seed``, ``shard_id``/``num_shards``... as loader settings) and
    yields webdataset sample dicts: ``{"__key__", "__url__", "jpg": bytes, "cls": bytes, "uid": str,
    "sum": str}``. Each method returns a new dataset with one more stage (webdataset's own filters)::

        ds = (RemoteDataset(client, bucket, folder)
              .decode("pil")                     # images -> PIL ("rgb8", "torchrgb", ... or None), cls -> int
              .to_tuple("jpg;png", "cls")        # the first present of jpg/png, then cls
              .map_tuple(preproc, lambda x: x)
              .batched(64))                      # tensors stacked, ints -> arrays
        DataLoader(ds, num_workers=3, batch_size=None)

    DataLoader workers split the shards (shards are the unit of splitting: keep at least as many as
    ranks x workers). A boto3 client is rebuilt in each worker from its endpoint, region, credentials
    and config; with `Settings`, the workbench's own client is made there. Call `set_epoch` each epoch.

    Resumable (torchdata's Stateful convention): `state_dict()` / `load_state_dict()` are the s3-shards
    loader's state (per DataLoader worker, as `StatefulDataLoader` keeps it): a fresh dataset given the state
    of one stopped after k elements delivers exactly the rest of that epoch.
    """

    _state_name = "s3-shards"

    def __init__(self, settings_or_client: Any, bucket: str, prefix: str = "", split: str = "train",
                 **loader_config: Any) -> None:
        super().__init__()
        if isinstance(settings_or_client, Settings):
            self.settings: Settings | None = settings_or_client
            self._client, self._spec = None, None
        elif hasattr(settings_or_client, "get_object") and hasattr(settings_or_client, "meta"):
            self.settings = None
            self._client, self._spec = settings_or_client, _ClientSpec(settings_or_client)
        else:
            raise WorkbenchError(
                f"RemoteDataset needs workbench Settings or a boto3 S3 client, got {type(settings_or_client).__name__}"
            )
        self._client_pid = os.getpid()
        loader_config.setdefault("dataset", f"s3://{bucket}/{prefix.strip('/')}")
        try:
            self.config = S3ShardsConfig(split=split, bucket=bucket, prefix=prefix, **loader_config)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first["loc"]) or "config"
            raise WorkbenchError(f"invalid RemoteDataset setting '{field}': {first['msg']}") from exc
        self.stages: list[Callable[[Iterator], Iterator]] = []
        self._start_epochs()

    # ------------------------------------------------------------------------------------ pipeline

    def _then(self, stage: Callable[[Iterator], Iterator]) -> RemoteDataset:
        new = copy.copy(self)
        new.stages = [*self.stages, stage]
        return new

    def compose(self, stage: Callable[[Iterator], Iterator]) -> RemoteDataset:
        """Any iterator -> iterator stage (a webdataset filter, a generator function)."""
        return self._then(stage)

    def decode(self, *handlers: Any, **kw: Any) -> RemoteDataset:
        """webdataset decoding: an image spec ("pil", "rgb8", "torchrgb", ...) or handler functions, or
        None/nothing for the basic decoders only (cls -> int, json, npy...)."""
        import webdataset as wds

        kw.setdefault("partial", True)  # id/sum are already text
        return self._then(wds.filters.decode(*[h for h in handlers if h is not None], **kw))

    def to_tuple(self, *fields: str, **kw: Any) -> RemoteDataset:
        import webdataset as wds

        return self._then(wds.filters.to_tuple(*fields, **kw))

    def map_tuple(self, *fns: Callable | None, **kw: Any) -> RemoteDataset:
        import webdataset as wds

        return self._then(wds.filters.map_tuple(*fns, **kw))

    def map(self, fn: Callable, **kw: Any) -> RemoteDataset:
        import webdataset as wds

        return self._then(wds.filters.map(fn, **kw))

    def batched(self, batchsize: int, collation_fn: Callable | None = None, partial: bool = True) -> RemoteDataset:
        import webdataset as wds

        if batchsize < 1:
            raise WorkbenchError(f"batch size must be >= 1, got {batchsize}")
        kw = {"collation_fn": collation_fn} if collation_fn is not None else {}
        return self._then(wds.filters.batched(batchsize, partial=partial, **kw))

    # ------------------------------------------------------------------------------------- reading

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_client"] = None  # rebuilt from _spec in the worker
        state["_live"] = None  # a reading loader stays in its process
        return state

    def _store(self) -> S3Store | None:
        if self._spec is None:
            return None
        if self._client is None or self._client_pid != os.getpid():
            self._client, self._client_pid = self._spec.make(), os.getpid()
        return S3Store.from_client(self._client, self.config.bucket or "", self.config.prefix or "")

    def loader(self, worker_id: int = 0, num_workers: int = 1) -> S3ShardsLoader:
        settings = self.settings if self.settings is not None else Settings.model_construct()
        return S3ShardsLoader(settings, self.config, worker_id, num_workers, store=self._store())

    # resuming (torchdata's Stateful convention): the state is the s3-shards loader's own, of the loader that
    # reads the raw samples (`_RawSamples`); it resumes by fetching only the shard members still to come.

    def _order(self) -> S3ShardsConfig:
        return self.config

    def __iter__(self) -> Iterator[Any]:
        # Not a generator: the loaded state is taken now (StatefulDataLoader asks for a state at once).
        return self._read(self._begin())

    def _read(self, resume: dict[str, Any] | None) -> Iterator[Any]:
        settings = self.settings if self.settings is not None else Settings.model_construct()
        with _RawSamples(settings, self.config, *worker(), store=self._store()) as loader:
            loader.set_epoch(self.epoch)
            if resume is not None:
                loader.load_state_dict(resume)
            self._live = loader
            try:
                source: Iterator[Any] = (_as_text(raw.sample) for raw in loader)
                for stage in self.stages:
                    source = stage(source)
                yield from source
            finally:
                self._end(loader)


@dataclasses.dataclass(frozen=True)
class _Raw:
    """A raw sample dict as the loaders' Item: its id (`key`) and image bytes (`data`) for counting and states."""

    key: str
    data: bytes
    sample: dict[str, Any]


class _RawSamples(S3ShardsLoader):
    """The s3-shards loader yielding webdataset's raw sample dicts, so the loader's own resume and counting apply
    (`Loader.state_dict`, `load_state_dict`): a state counts samples the pipeline pulled. Stages that pull ahead
    of what they yield (a shuffle buffer) make that more than the consumer saw; map, decode, to_tuple and
    batched pull exactly what they yield."""

    def iter_epoch(self, epoch: int) -> Iterator[Any]:
        for sample in self.raw_samples(epoch):
            item = sample_item(sample, "none")
            yield _Raw(item.key, item.data, sample)


def _as_text(sample: dict[str, Any]) -> dict[str, Any]:
    """The shard's sample id and checksum entries as text, for readers that expect str."""
    for ext in META_ENTRIES:
        if isinstance(sample.get(ext), bytes):
            sample[ext] = sample[ext].decode()
    return sample
