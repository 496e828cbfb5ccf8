"""Peer: AWS's ``s3torchconnector`` (the Mountpoint CRT client) reading our s3-objects layout from MinIO.

Layout: `workbench.backends.s3_objects` (``<prefix>/<split>/<class>/<basename>``, ``<split>/manifest.txt``,
``_journal/*.jsonl``). Every byte goes through s3torchconnector — manifest, journal and objects — via
its public datasets: ``S3MapDataset.from_objects`` (indexed reads, one ``S3Reader`` per object, read
fully) and ``S3IterableDataset.from_prefix`` (the journal parts). boto3 is not used.

Which id a key holds: the manifest names keys and labels but not ids, and s3torchconnector's readers
do not expose ``x-amz-meta-id``. Ids are ``uuid5(source name, sample name)``, which a key cannot be
turned back into, so the id of each key comes from the layout's journal (``{"key", "id", ...}`` lines,
later parts override earlier ones — the same rule the backend applies); keys are ``<split>/<rel>``
relative to the prefix, manifest keys are ``<rel>`` (percent-decoded). A manifest key the journal does
not know is an error naming it. Labels come from the manifest (int, or the ``.label`` sidecar key for
blob labels, read as a second GET through the connector).

One epoch of one reader: `epoch_order` of the manifest entries, then this reader's share
(`take_shard` of rank x DataLoader worker; objects are the unit of splitting). ``concurrency`` indexed
reads of the one ``S3MapDataset`` are kept in flight from a thread pool (`in_flight`, in order unless
``ordered=False``): the CRT client is thread-safe and asynchronous underneath, and this is how a
threaded sampler would drive a map-style dataset. ``concurrency=1`` is the stock behaviour of one
DataLoader worker indexing the dataset (one request at a time).

Connection: ``endpoint=settings.s3_endpoint(via_proxy)``, ``region=settings.s3_region``,
``S3ClientConfig(force_path_style=True)``. s3torchconnector has no credentials argument (only a named
profile or ``unsigned``): the CRT default chain reads ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``,
which are set in this process from Settings when the loader connects (never logged). They are
process-global: every s3torchconnector client in the process uses the same MinIO keys.

TLS (settings.tls): s3torchconnector has no CA option (awslabs/s3-connector-for-pytorch#409), but its
CRT client reads ``SSL_CERT_FILE`` when a client is made; it is set in this process to the system's CAs
plus the stack's (`workbench.loaders.peers.trust_bundle`) before the first client exists.
"""

from __future__ import annotations

import io
import json
import os
import threading
import uuid
from collections.abc import Iterator
from typing import Any, ClassVar

from pydantic import Field

from workbench.concurrency import HasWindow, LazyPool, PicklesWithoutLocks, make_window, map_in_flight
from workbench.config import Settings
from workbench.data.sample import int_label
from workbench.errors import WorkbenchError, with_type
from workbench.layouts.objects import JOURNAL, MANIFEST
from workbench.loaders.base import Item, LoaderConfig, RequestModel
from workbench.loaders.order import effective_shard, epoch_order, take_shard
from workbench.loaders.peers import Peer, trust_stack_ca
from workbench.loaders.s3_location import S3Location
from workbench.loaders.s3_objects import manifest_lines
from workbench.loaders.s3_shards import locate_prefix

Entry = tuple[str, str, str | None]  # (key relative to the prefix, sample id, manifest label field or None)


class S3TorchConnectorConfig(LoaderConfig, S3Location):
    part_size: int = Field(8 * 2**20, ge=5 * 2**20, le=5 * 2**30, description="CRT client part size in bytes")


def _import_connector():
    """The s3torchconnector module, or a one-line WorkbenchError saying why it cannot run here."""
    try:
        import s3torchconnector
        from s3torchconnectorclient import S3Exception  # noqa: F401 - the native extension must load
    except ImportError as exc:
        raise WorkbenchError(
            f"s3torchconnector is not usable here ({with_type(exc, 200)}): "
            "install the peers extra (`pip install s3torchconnector`; wheels exist for Linux/macOS x86_64 and arm64)"
        ) from None
    return s3torchconnector


class S3TorchConnectorPeer(PicklesWithoutLocks, HasWindow, Peer):
    """``S3MapDataset`` of the split's objects (ids from the layout's journal), `concurrency` reads in flight."""

    name = "s3torchconnector"
    request_model = RequestModel("one GET of one object (one sample)")
    backend = "s3-objects"
    Config = S3TorchConnectorConfig
    config: S3TorchConnectorConfig
    locks: ClassVar[tuple[str, ...]] = ("_lock", "_lock_connect")
    process_state: ClassVar[dict[str, Any]] = {"_dataset": None, "_sidecars": None, "_sidecar_of": {}, "_entries": None}

    def __init__(self, settings: Settings, config: LoaderConfig, worker_id: int = 0, num_workers: int = 1) -> None:
        super().__init__(settings, config, worker_id, num_workers)
        self._bucket: str | None = None
        self._prefix = ""
        self._entries: list[Entry] | None = None
        self._dataset = None  # S3MapDataset over every entry, in manifest order
        self._sidecars = None  # blob labels: S3MapDataset over the entries' sidecars, and entry -> its index
        self._sidecar_of: dict[int, int] = {}
        self._pool = LazyPool(self.config.concurrency, "s3torchconnector")
        self._window = make_window(self.config.concurrency)
        self._lock_connect = threading.Lock()

    # ---------------------------------------------------------------------------------- connecting

    def _uri(self, key: str) -> str:
        return f"s3://{self._bucket}/{self._prefix}/{key}" if self._prefix else f"s3://{self._bucket}/{key}"

    def _kwargs(self) -> dict[str, Any]:
        from s3torchconnector import S3ClientConfig

        return {"region": self.settings.s3_region, "endpoint": self.settings.s3_endpoint(self.config.via_proxy),
                "s3client_config": S3ClientConfig(force_path_style=True, part_size=self.config.part_size)}

    def _where(self) -> str:
        return f"s3://{self._bucket}/{self._prefix}" if self._prefix else f"s3://{self._bucket}"

    def _fail(self, exc: BaseException, what: str) -> WorkbenchError:
        return WorkbenchError(
            f"s3torchconnector failed {what} ({with_type(exc)}) at "
            f"{self.settings.s3_endpoint(self.config.via_proxy)}: is MinIO up (`workbench stack status`) and was "
            "the dataset ingested into s3-objects?"
        )

    def connect(self) -> None:
        """Credentials into the environment, manifest + journal read, the map dataset built (once)."""
        with self._lock_connect:
            if self._dataset is not None:
                return
            connector = _import_connector()

            self._bucket, self._prefix = locate_prefix(self.settings, self.backend, self.config)
            access, secret = self.settings.s3_credentials()
            os.environ["AWS_ACCESS_KEY_ID"] = access
            os.environ["AWS_SECRET_ACCESS_KEY"] = secret
            os.environ.pop("AWS_SESSION_TOKEN", None)  # MinIO root keys have none; a stale one would be sent
            trust_stack_ca(self.settings, "SSL_CERT_FILE")  # the CRT's only way to a CA (before its client exists)
            self._entries = self._read_entries(connector)
            dataset = connector.S3MapDataset.from_objects(
                [self._uri(key) for key, _, _ in self._entries], **self._kwargs())
            len(dataset)  # builds the client once, before reader threads share it
            if self.config.label_type == "blob":
                split = self.config.split
                with_sidecar = [(i, label) for i, (_, _, label) in enumerate(self._entries)
                                if label is not None and not label.lstrip("-").isdigit()]
                self._sidecar_of = {i: n for n, (i, _) in enumerate(with_sidecar)}
                self._sidecars = connector.S3MapDataset.from_objects(
                    [self._uri(f"{split}/{label}") for _, label in with_sidecar], **self._kwargs())
                len(self._sidecars)
            self._dataset = dataset

    def _read_entries(self, connector) -> list[Entry]:
        split = self.config.split
        manifest_uri = self._uri(f"{split}/{MANIFEST}")
        try:
            manifest = connector.S3MapDataset.from_objects([manifest_uri], **self._kwargs())[0].read()
        except Exception as exc:
            if any(text in str(exc) for text in ("NoSuchKey", "key does not exist")):
                raise WorkbenchError(
                    f"no manifest at {manifest_uri}: dataset '{self.config.dataset}' split '{split}' was not "
                    "ingested into s3-objects there (`workbench ingest --backend s3-objects`), or pass bucket/prefix"
                ) from None
            raise self._fail(exc, f"reading {manifest_uri}") from None
        ids = self._journal_ids(connector)
        entries: list[Entry] = []
        for number, rel, label in manifest_lines(io.BytesIO(manifest), manifest_uri):
            key = f"{split}/{rel}"
            if key not in ids:
                raise WorkbenchError(
                    f"{manifest_uri} line {number}: key {key!r} is in no journal line under "
                    f"{self._where()}/{JOURNAL}/, so its sample id is unknown (re-run the ingest to rebuild it)"
                )
            entries.append((key, ids[key], label))
        return entries

    def _journal_ids(self, connector) -> dict[str, str]:
        """key -> sample id from every journal part, oldest part first (later lines win)."""
        journal = connector.S3IterableDataset.from_prefix(self._uri(f"{JOURNAL}/"), **self._kwargs())
        try:
            parts = sorted((reader.key, reader.read()) for reader in journal if reader.key.endswith(".jsonl"))
        except Exception as exc:
            raise self._fail(exc, f"listing/reading {self._where()}/{JOURNAL}/") from None
        ids: dict[str, str] = {}
        for _, text in parts:
            for line in text.decode(errors="replace").splitlines():
                try:
                    record = json.loads(line)
                    ids[record["key"]] = str(uuid.UUID(record["id"]))
                except (ValueError, KeyError, TypeError, AttributeError):
                    continue  # the backend skips bad lines too
        return ids

    # ------------------------------------------------------------------------------------- reading

    def entries(self) -> list[Entry]:
        self.connect()
        assert self._entries is not None
        return self._entries

    def my_indices(self, epoch: int) -> list[int]:
        c = self.config
        order = epoch_order(range(len(self.entries())), c.seed, epoch, c.shuffle)
        return take_shard(order, *effective_shard(c.shard_id, c.num_shards, self.worker_id, self.num_workers))

    def fetch(self, i: int) -> Item:
        """Read object `i` fully through the connector (and its label sidecar for blob labels)."""
        assert self._dataset is not None and self._entries is not None
        key, sample_id, label_field = self._entries[i]
        try:
            data = self._dataset[i].read()
        except Exception as exc:
            raise self._fail(exc, f"reading {self._uri(key)}") from None
        label: int | bytes | None = None
        if self.config.label_type == "int":
            label = int_label(label_field, f"{self._uri(key)} (sample {sample_id})", f"manifest {label_field!r}")
        elif self.config.label_type == "blob":
            if i not in self._sidecar_of or self._sidecars is None:
                raise WorkbenchError(
                    f"{self._uri(key)} (sample {sample_id}) has no label sidecar in the manifest: "
                    "use label_type int or none"
                )
            try:
                label = self._sidecars[self._sidecar_of[i]].read()
            except Exception as exc:
                raise self._fail(exc, f"reading {self._uri(f'{self.config.split}/{label_field}')}") from None
        return Item(sample_id, label, data)

    def iter_epoch(self, epoch: int) -> Iterator[Item]:
        mine = self.unread(epoch, self.my_indices(epoch), key=lambda i: self.entries()[i][1])
        if not mine:
            return
        if self.config.concurrency == 1:
            for i in mine:
                yield self.fetch(i)
            return
        yield from map_in_flight(mine, self.fetch, self._pool.get(), self._window, self.config.ordered)

    def close(self) -> None:
        self._pool.close()
        self._dataset = self._sidecars = None
