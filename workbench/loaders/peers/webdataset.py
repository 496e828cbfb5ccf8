"""Peer: the ``webdataset`` library itself reading our s3-shards layout over presigned HTTP URLs.

Layout: `workbench.backends.s3_shards` (``<prefix>/<split>/shard-NNNNNN.tar`` + ``index.json``); nothing
is converted: webdataset reads the very tars our own ``s3-shards`` loader reads, so the two are measured
on identical bytes.

One epoch of one reader (rank x DataLoader worker):

1. the split's index is read once per loader (one GET through boto3, cached) — webdataset has no
   notion of an index, a shard list is what it is given;
2. shard order = `epoch_order(shards, seed, epoch, shuffle)`, then this reader takes every count-th
   shard from its flat index (`effective_shard`), exactly as our ``s3-shards`` loader does. Shards are
   the unit of splitting: with fewer shards than readers some readers deliver nothing;
3. each of those shards becomes a presigned GET URL (boto3 ``generate_presigned_url``, signed locally,
   valid ``url_expires_s``; the endpoint follows ``via_proxy``), and the URLs go to
   ``wds.WebDataset(urls, shardshuffle=False, nodesplitter=None, workersplitter=None)``: webdataset
   1.x appends its node/worker splitters only when they are truthy, so None disables both (we split
   above) and ``shardshuffle=False`` keeps our shard order. webdataset opens ``http(s)://`` URLs with
   a ``curl`` subprocess per shard (its ``gopen``), one shard after the other — the library's own I/O;
4. ``.shuffle(shuffle_buffer)`` (webdataset's buffer shuffle, seeded by seed/epoch/reader) when
   ``shuffle`` is on; samples become Items: key = the ``id`` entry, data = the image entry (``jpg``,
   else the first entry), label from ``cls`` (int) or ``seg.png``/``png``/``npy``/``lbl`` (blob).

``concurrency`` and ``prefetch_buffers`` are not used: webdataset reads one stream per pipeline, and its
parallelism is DataLoader workers (run it with workers for a like-for-like comparison).
Errors (curl failures, a damaged tar) surface as one-line WorkbenchErrors with the URL's query string
(the signature and the access key id) removed.

TLS (settings.tls): the URLs are https; curl takes no CA from webdataset, so ``CURL_CA_BUNDLE`` is set in
this process to the system's CAs plus the stack's (`workbench.loaders.peers.trust_bundle`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, ClassVar

from pydantic import Field

from workbench.concurrency import PicklesWithoutLocks
from workbench.config import Settings
from workbench.data import ID_ENTRY, META_ENTRIES, ShardInfo, entry_label
from workbench.errors import WorkbenchError
from workbench.layouts.shards import read_split_index
from workbench.loaders.base import Item, LoaderConfig, RequestModel
from workbench.loaders.order import effective_shard, epoch_order, take_shard
from workbench.loaders.peers import Peer, trust_stack_ca
from workbench.loaders.s3_location import S3Location
from workbench.loaders.s3_shards import s3_store

_QUERY = re.compile(r"\?[^\s'\"\]]*")


class WebDatasetConfig(LoaderConfig, S3Location):
    shuffle_buffer: int = Field(1000, ge=0, le=1_000_000, description="webdataset .shuffle() buffer (0/1: off)")
    url_expires_s: int = Field(3600, ge=60, le=7 * 24 * 3600, description="lifetime of the presigned shard URLs")


def redact(text: str) -> str:
    """A message without URL query strings (presigned URLs carry the access key id and a signature)."""
    return _QUERY.sub("?<signed>", text)


class WebDatasetPeer(PicklesWithoutLocks, Peer):
    """``wds.WebDataset`` over presigned URLs of our shards; split and shard order are ours."""

    name = "webdataset"
    request_model = RequestModel("one streamed GET of a whole shard, one at a time per reader", per_request="shard",
                                 window=1)
    backend = "s3-shards"
    Config = WebDatasetConfig
    config: WebDatasetConfig
    process_state: ClassVar[dict[str, Any]] = {"_store": None}  # boto3 clients do not pickle: each worker signs

    def __init__(self, settings: Settings, config: LoaderConfig, worker_id: int = 0, num_workers: int = 1) -> None:
        super().__init__(settings, config, worker_id, num_workers)
        self._store = None
        self._index: list[ShardInfo] | None = None

    @property
    def store(self):
        """Our S3 store of the dataset (boto3): the index GET and URL signing only, made on first use."""
        if self._store is None:
            self._store = s3_store(self.settings, self.backend, self.config, connections=4)
        return self._store

    def shards(self) -> list[ShardInfo]:
        if self._index is None:
            self._index = read_split_index(self.store, self.config.split, self.config.dataset)
        return self._index

    def urls(self, epoch: int) -> tuple[list[str], int]:
        """This reader's presigned shard URLs for `epoch`, in reading order, and its flat reader index."""
        c = self.config
        index, count = effective_shard(c.shard_id, c.num_shards, self.worker_id, self.num_workers)
        mine = take_shard(epoch_order(self.shards(), c.seed, epoch, c.shuffle), index, count)
        return [self.store.url(f"{c.split}/{info.name}", c.url_expires_s) for info in mine], index

    def pipeline(self, epoch: int):
        """The ``wds.WebDataset`` of this reader's shards for `epoch` (None when it has no shard)."""
        import webdataset as wds

        urls, index = self.urls(epoch)
        if not urls:
            return None
        c = self.config
        trust_stack_ca(self.settings, "CURL_CA_BUNDLE")  # webdataset's curl verifies the stack's https URLs
        dataset = wds.WebDataset(urls, shardshuffle=False, nodesplitter=None, workersplitter=None,
                                 empty_check=False, seed=0)
        if c.shuffle and c.shuffle_buffer > 1:
            dataset = dataset.shuffle(c.shuffle_buffer, seed=f"{c.seed}:{epoch}:{index}")
        return dataset

    def iter_epoch(self, epoch: int) -> Iterator[Item]:
        dataset = self.pipeline(epoch)
        if dataset is None:
            return
        samples = iter(dataset)
        while True:
            try:
                sample = next(samples)
            except StopIteration:
                return
            except WorkbenchError:
                raise
            except Exception as exc:  # curl exit codes, tar errors: one line, no signed URL
                first = redact(str(exc)).splitlines()[0][:300] if str(exc) else ""
                raise WorkbenchError(
                    f"webdataset failed reading {self.store.where}/{self.config.split}: {type(exc).__name__}: {first}"
                ) from None
            yield self.item(sample)

    def item(self, sample: dict[str, Any]) -> Item:
        url = redact(str(sample.get("__url__", "a shard")))
        raw_id = sample.get(ID_ENTRY)
        if raw_id is None:
            raise WorkbenchError(f"sample {sample.get('__key__')} in {url} has no 'id' entry: not a workbench shard")
        key = raw_id.decode() if isinstance(raw_id, bytes) else str(raw_id)
        entries = [k for k in sample if not k.startswith("__")]
        image_ext = "jpg" if "jpg" in sample else next((e for e in entries if e not in META_ENTRIES), None)
        if image_ext is None:
            raise WorkbenchError(f"sample {key} in {url} has no image entry")
        return Item(key, entry_label(sample, image_ext, self.config.label_type, f"sample {key} in {url}"),
                    sample[image_ext])
