"""The Ignite loader, IgniteDataset (tf.data), IgniteTorchDataset and IgniteCheckpoint against the real server."""

from __future__ import annotations

import contextlib
import dataclasses
import socket
import time
import unittest.mock
import uuid
from collections import Counter, OrderedDict

import pytest
import torch
from torch.utils.data import DataLoader

from workbench.adapters.torch import LoaderDataset, collate_raw, worker_context
from workbench.backends.registry import make_backend
from workbench.checkpoints.ignite import IgniteCheckpoint
from workbench.clients import ignite_client
from workbench.clients.ignite import UnusualScan, scan_scalars
from workbench.compat.ignite_dataset import IgniteDataset, dataset_source
from workbench.compat.ignite_torch import IgniteTorchDataset
from workbench.concurrency import AUTO_CAP, AUTO_START, AutoWindow
from workbench.data import SyntheticSource
from workbench.errors import WorkbenchError
from workbench.ingest import ingest
from workbench.loaders import make_loader
from workbench.loaders.ignite import IgniteLoader, list_split_keys, raw_ceiling
from workbench.net.toxiproxy import Toxiproxy
from workbench.storage.ignite_chunks import chunk_cache_of

pytestmark = pytest.mark.services

N = 250  # every 5th sample goes to 'val': 200 in 'train'
PARTITIONS = 256
FIELDS = {"id", "split", "label", "data", "width", "height", "name", "checksum"}


class TwoSplits:
    """A source whose every 5th sample is in 'val', so a loader must read one split and nothing else."""

    def __init__(self, inner) -> None:
        self.inner, self.name, self.classes = inner, inner.name, inner.classes
        self.splits = ["train", "val"]

    def __len__(self) -> int:
        return len(self.inner)

    def __iter__(self):
        for i, s in enumerate(self.inner):
            yield dataclasses.replace(s, split="val") if i % 5 == 0 else s


@dataclasses.dataclass
class Ingested:
    name: str
    backend: object
    train: dict  # id string -> Sample
    everything: dict

    @property
    def cache(self) -> str:
        return self.backend.cache_name


def drop(settings, backend) -> None:
    try:
        backend.drop()
    except NotImplementedError:
        with ignite_client(settings) as client:
            for name in (backend.cache_name, f"{backend.cache_name}_IDS"):
                if name in client.get_cache_names():
                    client.get_cache(name).destroy()


def ingested(settings, source, **options) -> Ingested:
    backend = make_backend("ignite", settings, source.name, **options)
    try:
        ingest(source, backend, progress=False)
    except BaseException:
        drop(settings, backend)
        raise
    samples = list(source)
    return Ingested(source.name, backend, {str(s.id): s for s in samples if s.split == "train"},
                    {str(s.id): s for s in samples})


@pytest.fixture(scope="module")
def data(stack):
    # 256 partitions, not the default 1024: the tests that walk every partition (one scan each) take a quarter
    # of the time, and 250 keys still leave partitions with two or more keys and empty ones.
    d = ingested(stack, TwoSplits(SyntheticSource(N, mean_kb=20, name=f"t{uuid.uuid4().hex[:10]}")),
                 batch_size=32, workers=4, partitions=PARTITIONS)
    yield d
    drop(stack, d.backend)


@pytest.fixture
def scratch(stack):
    """Datasets a test ingests for itself (it may damage them); dropped afterwards."""
    made: list[Ingested] = []

    def make(count: int = 20, **options) -> Ingested:
        made.append(ingested(stack, SyntheticSource(count, mean_kb=10, name=f"t{uuid.uuid4().hex[:10]}",
                                                    kind=options.pop("kind", "classification")), **options))
        return made[-1]

    yield make
    for d in made:
        drop(stack, d.backend)


def read(settings, dataset: str, **config):
    with make_loader("ignite", settings, dataset=dataset, **config) as loader:
        return list(loader)


def dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------------------------------ loader


@pytest.mark.parametrize("mode", ["get_all", "scan"])
def test_one_epoch_is_exactly_the_split_byte_identical(stack, data, mode):
    items = read(stack, data.name, mode=mode, shuffle=False, concurrency=4)
    assert Counter(i.key for i in items) == Counter(list(data.train))
    for item in items:
        sample = data.train[item.key]
        assert (item.data, item.label) == (sample.data, sample.label)
    val = read(stack, data.name, mode=mode, split="val", ordered=False)
    assert {i.key for i in val} == set(data.everything) - set(data.train) and len(val) == N - len(data.train)


@pytest.mark.parametrize("mode", ["get_all", "scan"])
def test_two_ranks_are_disjoint_and_cover_the_split(stack, data, mode):
    ranks = [read(stack, data.name, mode=mode, shard_id=r, num_shards=2, seed=3) for r in range(2)]
    keys = [Counter(i.key for i in items) for items in ranks]
    assert all(ranks) and not (set(keys[0]) & set(keys[1]))
    assert keys[0] + keys[1] == Counter(list(data.train))


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_dataloader_workers_deliver_each_sample_once(stack, data, workers):
    ds = LoaderDataset("ignite", stack, dataset=data.name, concurrency=4, get_batch=16)
    loader = DataLoader(ds, batch_size=16, num_workers=workers, collate_fn=collate_raw,
                        multiprocessing_context=worker_context(stack, workers))
    batches = list(loader)
    assert Counter(k for b in batches for k in b["key"]) == Counter(list(data.train))
    first = batches[0]
    assert first["data"][0] == data.train[first["key"][0]].data


def test_dataloader_workers_in_scan_mode(stack, data):
    ds = LoaderDataset("ignite", stack, dataset=data.name, mode="scan", concurrency=4)
    loader = DataLoader(ds, batch_size=16, num_workers=2, collate_fn=collate_raw,
                        multiprocessing_context=worker_context(stack, 2))
    assert Counter(k for b in loader for k in b["key"]) == Counter(list(data.train))


@pytest.mark.parametrize("mode", ["get_all", "scan"])
def test_shuffle_epochs_differ_seed_reproducible(stack, data, mode):
    def epoch(e: int, seed: int = 7, **kw) -> list[str]:
        with make_loader("ignite", stack, dataset=data.name, mode=mode, seed=seed, **kw) as loader:
            loader.set_epoch(e)
            return [i.key for i in loader]

    e0, e1 = epoch(0), epoch(1)
    assert e0 != e1 and sorted(e0) == sorted(e1) == sorted(data.train)
    assert epoch(0) == e0
    assert epoch(0, seed=8) != e0
    assert epoch(0, shuffle=False) == epoch(1, shuffle=False)


def test_loader_reads_several_epochs_on_one_connection_set(stack, data):
    with make_loader("ignite", stack, dataset=data.name, concurrency=3) as loader:
        for e in range(3):
            loader.set_epoch(e)
            assert sorted(i.key for i in loader) == sorted(data.train)
        assert loader.samples == 3 * len(data.train)
        assert loader.bytes == 3 * sum(len(s.data) for s in data.train.values())


def test_page_size_one_still_correct_but_the_default_is_large(stack, data):
    assert IgniteLoader.Config(dataset="x").page_size >= 100
    items = read(stack, data.name, mode="scan", page_size=1, shuffle=False, concurrency=8)
    assert Counter(i.key for i in items) == Counter(list(data.train))
    with pytest.raises(WorkbenchError, match="page_size"):
        make_loader("ignite", stack, dataset=data.name, page_size=0)


def test_raw_ceiling_reads_every_sample(stack, data):
    samples, nbytes = raw_ceiling(stack, {"dataset": data.name, "concurrency": 4})
    assert (samples, nbytes) == (len(data.train), sum(len(s.data) for s in data.train.values()))
    assert IgniteLoader.raw_ceiling(stack, IgniteLoader.Config(dataset=data.name, split="val"))[0] == N - len(
        data.train)


def test_sql_table_mode(stack, scratch):
    d = scratch(30, mode="sql")
    assert d.cache == f"SQL_PUBLIC_{d.name.upper()}"
    for mode in ("get_all", "scan"):
        items = read(stack, d.name, mode=mode)
        assert {i.key: (i.data, i.label) for i in items} == {k: (s.data, s.label) for k, s in d.train.items()}
    elements = list(IgniteDataset(d.cache, settings=stack))
    assert len(elements) == 30
    for el in elements:
        sample = d.everything[el["key"].numpy().decode()]
        val = el["val"]
        assert {"DATA", "LABEL", "SPLIT", "NAME", "WIDTH", "HEIGHT", "CHECKSUM"} <= set(val)
        assert val["DATA"].numpy() == sample.data and int(val["LABEL"]) == sample.label
        assert val["NAME"].numpy().decode() == sample.name


def test_blob_labels(stack, scratch):
    d = scratch(10, kind="segmentation", label_type="blob")
    items = read(stack, d.name, label_type="blob")
    assert {i.key: i.label for i in items} == {k: s.label for k, s in d.train.items()}
    with pytest.raises(WorkbenchError, match="label_type blob"):
        read(stack, d.name)  # label_type int on blob labels


def test_ids_are_listed_page_by_page_as_pyignite_lists_them(stack, data):
    ids_cache = f"{data.cache}_IDS"
    with ignite_client(stack) as client:
        with client.get_cache(ids_cache).scan(page_size=1000) as cursor:
            expected = sorted(cursor)
        assert sorted(scan_scalars(client, ids_cache, page_size=30)) == expected  # 250 entries: 9 pages
        assert len(expected) == N and {s for _, s in expected} == {"train", "val"}


def test_the_asyncio_client_receives_answers_into_buffers_of_their_own(stack, data):
    with make_loader("ignite", stack, dataset=data.name) as loader:
        loader.connect()
        client = loader._aio.call(loader._aio_clients.get(), stack.timeout_s)
        assert {type(node._transport.get_protocol()).__name__ for node in client._nodes} == {"FramedProtocol"}
        items = list(loader)  # 20 KB samples, 64 to a get_all: answers of ~1.3 MB, many socket reads each
    assert {i.key: i.data for i in items} == {k: s.data for k, s in data.train.items()}


def test_an_auto_window_holds_at_most_the_read_budget_of_batches(stack, data):
    """Batches of 4 keys of ~20 KB and a budget of ~7 such batches: a window that starts at 16 comes down with the
    first answer, never widens again, and ends at what the budget holds of the largest batch (>= AUTO_START)."""
    budget = 7 * 4 * sum(len(s.data) for s in data.train.values()) // len(data.train)
    with make_loader("ignite", stack, dataset=data.name, get_batch=4) as loader:
        loader._window = AutoWindow(start=16, cap=AUTO_CAP)
        with unittest.mock.patch("workbench.concurrency.windows.READ_BUDGET", budget):
            items = list(loader)  # in order: batches are consecutive runs of 4
        history, cap = loader.window_history, loader._window.cap
    batches = [items[i:i + 4] for i in range(0, len(items), 4)]
    largest = max(4 * sum(len(i.data) for i in batch) // len(batch) for batch in batches)
    assert history[0] == 16 and history[1] < 16 and max(history[1:]) == history[1]
    assert cap == max(AUTO_START, budget // largest) and history[-1] <= cap
    assert sorted(i.key for i in items) == sorted(data.train)


def test_a_scan_left_early_or_refused_frees_its_cursor(stack, data):
    """Ignite keeps at most 128 open cursors a connection: 140 abandoned scans on one client fail unless each
    scan that stops early closes its cursor on the server."""
    ids_cache = f"{data.cache}_IDS"
    with ignite_client(stack) as client:
        for _ in range(140):
            pages = scan_scalars(client, ids_cache, page_size=10)
            next(pages)
            pages.close()
        for _ in range(140):  # binary objects: not scalars, handed to pyignite after the first page
            with pytest.raises(UnusualScan):
                list(scan_scalars(client, data.cache, page_size=10))
        assert len(list(scan_scalars(client, ids_cache, page_size=10))) == N


def test_ids_that_are_not_strings_are_listed_by_pyignite(stack, unique):
    """An ids cache written by something else (UUID keys): the struct reader hands it to pyignite's scan."""
    name = unique.upper()
    ids = [uuid.uuid4() for _ in range(12)]
    with ignite_client(stack) as client:
        client.get_or_create_cache(name)
        ids_cache = client.get_or_create_cache(f"{name}_IDS")
        try:
            for i, key in enumerate(ids):
                ids_cache.put(key, "val" if i % 4 == 0 else "train")
            with pytest.raises(UnusualScan):
                list(scan_scalars(client, f"{name}_IDS", page_size=5))
            listed = list_split_keys(client, "here", {"cache": name}, name, "train")
        finally:
            for cache in (name, f"{name}_IDS"):
                client.get_cache(cache).destroy()
    assert listed == sorted(str(key) for i, key in enumerate(ids) if i % 4)


def test_a_cache_without_an_ids_cache_is_listed_by_scanning_its_objects(stack, scratch):
    """Data written by something else (no ``<CACHE>_IDS``): the split's keys come from a scan of the objects."""
    d = scratch(15)
    with ignite_client(stack) as client:
        client.get_cache(f"{d.cache}_IDS").destroy()
        listed = list_split_keys(client, "here", {"cache": d.cache}, d.cache, "train")
    assert listed == sorted(d.train)


def test_unexpected_schema_is_a_clear_error(stack, scratch):
    d = scratch(10)
    victim = sorted(d.train)[4]
    with ignite_client(stack) as client:
        client.get_cache(d.cache).put(victim, "not a sample")
    for mode in ("get_all", "scan"):
        with pytest.raises(WorkbenchError, match=rf"cache {d.cache}: key '{victim}' holds a str.*'data'"):
            read(stack, d.name, mode=mode)


def test_missing_object_and_missing_cache(stack, scratch):
    d = scratch(10)
    victim = sorted(d.train)[2]
    with ignite_client(stack) as client:
        client.get_cache(d.cache).remove_key(victim)
    with pytest.raises(WorkbenchError, match=f"{victim}.*no object"):
        read(stack, d.name)
    with pytest.raises(WorkbenchError, match="NOPE_NOT_THERE does not exist"):
        read(stack, d.name, cache_name="NOPE_NOT_THERE")
    with pytest.raises(WorkbenchError, match=r"no sample of split 'test'.*splits found: train"):
        read(stack, d.name, split="test")


def test_unreachable_port_fails_fast_and_names_it(stack, data):
    port = dead_port()
    broken = stack.model_copy(update={"ignite_port": port})
    start = time.monotonic()
    with pytest.raises(WorkbenchError, match=rf"cannot reach Ignite at {stack.host}:{port}"):
        read(broken, data.name)
    with pytest.raises(WorkbenchError, match=rf"cannot reach Ignite at {stack.host}:{port}"):
        raw_ceiling(broken, {"dataset": data.name})
    with pytest.raises(WorkbenchError, match=rf"{stack.host}:{port}"):
        IgniteDataset(data.cache, port=port, settings=stack)
    assert time.monotonic() - start < stack.timeout_s + 5


def test_latency_is_hidden_by_batches_in_flight(stack, data):
    with Toxiproxy(stack).network("ignite", rtt_ms=20):
        def timed(**config) -> float:
            start = time.perf_counter()
            items = read(stack, data.name, via_proxy=True, shuffle=False, **config)
            assert len(items) == len(data.train) == 200
            return time.perf_counter() - start

        slow = timed(get_batch=1, concurrency=1)
        fast = timed(get_batch=32, concurrency=8)
    assert slow > 200 * 0.02  # really paid one round trip per sample
    assert fast < 0.3 * slow, (fast, slow)


# ---------------------------------------------------------------------------------- IgniteDataset


def test_ignite_dataset_yields_every_object_as_nested_tensors(stack, data):
    from workbench.tf_import import tensorflow
    tf = tensorflow()

    ds = IgniteDataset(data.cache, settings=stack, page_size=50)
    spec = ds.element_spec
    assert set(spec) == {"key", "val"} and set(spec["val"]) == FIELDS
    assert spec["val"]["data"].dtype == tf.string and spec["val"]["label"].dtype == tf.int32
    seen = Counter()
    for el in ds:
        key = el["key"].numpy().decode()
        seen[key] += 1
        sample = data.everything[key]
        val = el["val"]
        assert val["data"].numpy() == sample.data
        assert int(val["label"]) == sample.label and val["split"].numpy().decode() == sample.split
        assert (int(val["width"]), int(val["height"])) == (sample.width, sample.height)
    assert seen == Counter(list(data.everything))
    assert sum(1 for _ in ds.map(lambda el: el["val"]["data"]).batch(64)) == -(-N // 64)  # a normal tf.data pipeline


def test_ignite_dataset_structured_objects(stack, unique):
    """The article's IMAGES cache: nested binary objects -> nested dicts, int arrays -> 1-D tensors."""
    from workbench.tf_import import tensorflow
    tf = tensorflow()
    from pyignite import GenericObjectMeta
    from pyignite.datatypes import IntArrayObject, IntObject, String

    suffix = uuid.uuid4().hex[:8]
    meta_type = f"WbTestMeta{suffix}"
    image_type = f"WbTestImage{suffix}"
    Metadata = GenericObjectMeta(meta_type, (), {}, type_name=meta_type, schema=OrderedDict([
        ("file_name", String), ("label", String), ("width", IntObject), ("height", IntObject)]))
    from pyignite.datatypes import BinaryObject

    Image = GenericObjectMeta(image_type, (), {}, type_name=image_type, schema=OrderedDict([
        ("metadata", BinaryObject), ("pixels", IntArrayObject)]))
    cache_name = f"IMAGES_{unique.upper()}"
    with ignite_client(stack) as client:
        cache = client.get_or_create_cache(cache_name)
        try:
            cache.put("kitten.png", Image(metadata=Metadata(file_name="kitten.png", label="little ball of fur",
                                                            width=800, height=600), pixels=[0, 1, 2, 3]))
            cache.put("puppy.png", Image(metadata=Metadata(file_name="puppy.png", label="good boy", width=640,
                                                           height=480), pixels=[9, 8]))
            elements = {el["key"].numpy().decode(): el for el in IgniteDataset(cache_name, settings=stack)}
            assert set(elements) == {"kitten.png", "puppy.png"}
            kitten = elements["kitten.png"]["val"]
            assert kitten["metadata"]["label"].numpy() == b"little ball of fur"
            assert int(kitten["metadata"]["width"]) == 800 and kitten["metadata"]["width"].dtype == tf.int32
            assert kitten["pixels"].numpy().tolist() == [0, 1, 2, 3]
            assert elements["puppy.png"]["val"]["pixels"].shape == (2,)
            pixels = IgniteDataset(cache_name, settings=stack).map(lambda obj: obj["val"]["pixels"])
            assert sorted(len(p) for p in pixels) == [2, 4]
        finally:
            cache.destroy()


def test_ignite_dataset_empty_cache_is_an_error(stack, unique):
    name = f"EMPTY_{unique.upper()}"
    with ignite_client(stack) as client:
        cache = client.get_or_create_cache(name)
        try:
            with pytest.raises(WorkbenchError, match=f"{name} .*is empty"):
                IgniteDataset(name, settings=stack)
        finally:
            cache.destroy()
    with pytest.raises(WorkbenchError, match="does not exist"):
        IgniteDataset(name, settings=stack)


def test_part_reads_one_partition(stack, data, monkeypatch):
    monkeypatch.delenv("IGNITE_DATASET_PART", raising=False)
    source = dataset_source(data.cache, settings=stack)
    partitions = source.partitions()
    assert partitions == data.backend.describe()["partitions"] == PARTITIONS
    per_part = {p: [str(k) for k, _ in source.entries([p])] for p in range(partitions)}
    everything = Counter(k for keys in per_part.values() for k in keys)
    assert everything == Counter(list(data.everything))  # the partitions split the cache exactly
    full = [p for p, keys in per_part.items() if len(keys) >= 2][:2]
    empty = next(p for p, keys in per_part.items() if not keys)
    for p in [*full, empty]:
        keys = sorted(el["key"].numpy().decode() for el in IgniteDataset(data.cache, part=p, settings=stack))
        assert keys == sorted(per_part[p])
    monkeypatch.setenv("IGNITE_DATASET_PART", str(full[0]))  # the environment overrides the argument
    keys = sorted(el["key"].numpy().decode() for el in IgniteDataset(data.cache, part=full[1], settings=stack))
    assert keys == sorted(per_part[full[0]])


def test_environment_overrides_host_and_port(stack, data, monkeypatch):
    monkeypatch.delenv("IGNITE_DATASET_PART", raising=False)
    monkeypatch.setenv("IGNITE_DATASET_PORT", str(stack.proxy_ignite_port))
    monkeypatch.setenv("IGNITE_DATASET_HOST", "localhost")
    source = dataset_source(data.cache, settings=stack)
    assert (source.endpoint.host, source.endpoint.port) == ("localhost", stack.proxy_ignite_port)
    assert sum(1 for _ in IgniteDataset(data.cache, settings=stack)) == N
    port = dead_port()
    monkeypatch.setenv("IGNITE_DATASET_PORT", str(port))
    with pytest.raises(WorkbenchError, match=f"localhost:{port}"):
        IgniteDataset(data.cache, port=stack.ignite_port, settings=stack)
    monkeypatch.setenv("IGNITE_DATASET_PORT", "eighty")
    with pytest.raises(WorkbenchError, match="IGNITE_DATASET_PORT"):
        IgniteDataset(data.cache, settings=stack)


def test_torch_dataset_workers_split_partitions(stack, data, monkeypatch):
    monkeypatch.delenv("IGNITE_DATASET_PART", raising=False)
    ds = IgniteTorchDataset(data.cache, settings=stack, page_size=50)
    loader = DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context=worker_context(stack, 2))
    seen = Counter()
    for el in loader:
        seen[el["key"]] += 1
        assert el["val"]["data"] == data.everything[el["key"]].data
    assert seen == Counter(list(data.everything))
    one_worker = Counter(el["key"] for el in IgniteTorchDataset(data.cache, settings=stack))
    assert one_worker == seen


# ------------------------------------------------------------------------------------- checkpoints


def test_checkpoint_round_trip_overwrite_and_failed_write(stack, unique):
    store = IgniteCheckpoint(stack, cache_name=f"CKPT_{unique.upper()}")
    try:
        first = {"weight": torch.randn(5_000_000), "step": torch.tensor(1)}  # ~20 MB
        with store.writer("run/last") as f:
            torch.save(first, f)
        manifest = store.manifest("run/last")
        assert manifest["chunks"] == 5 and manifest["bytes"] > 20_000_000
        back = torch.load(store.reader("run/last"))
        assert torch.equal(back["weight"], first["weight"]) and int(back["step"]) == 1

        second = {"weight": torch.randn(2_000_000), "step": torch.tensor(2)}
        with store.writer("run/last") as f:
            torch.save(second, f)
        assert torch.equal(torch.load(store.reader("run/last"))["weight"], second["weight"])

        def entries() -> tuple[int, int]:
            """(manifests, chunks) stored: the manifest cache and its chunk cache."""
            with ignite_client(stack) as client:
                return (client.get_cache(store.cache_name).get_size(),
                        client.get_cache(chunk_cache_of(store.cache_name)).get_size())

        assert entries() == (1, store.manifest("run/last")["chunks"])  # the replaced version's chunks are gone

        with pytest.raises(RuntimeError, match="disk on fire"), store.writer("run/last") as f:
            torch.save({"weight": torch.randn(3_000_000)}, f)
            raise RuntimeError("disk on fire")
        back = torch.load(store.reader("run/last"))
        assert torch.equal(back["weight"], second["weight"]) and int(back["step"]) == 2
        assert entries() == (1, store.manifest("run/last")["chunks"])  # no leftover chunks

        abandoned = store.writer("run/last")
        abandoned.write(b"x" * 5_000_000)
        abandoned.abort()
        assert torch.load(store.reader("run/last"))["step"] == 2

        assert store.delete("run/last") and not store.exists("run/last")
        with pytest.raises(WorkbenchError, match="no checkpoint named 'run/last'"):
            store.reader("run/last")
    finally:
        store.drop()


# ------------------------------------------------------------------------------------- faults, misc


class Forwarder:
    """A TCP forwarder to Ignite that this test owns, so it can cut every connection mid-epoch."""

    def __init__(self, port: int) -> None:
        import threading

        self.upstream = port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import threading

        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.upstream))
            with self.lock:
                self.sockets += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass

    def cut(self) -> None:
        self.listener.close()
        with self.lock:
            for s in self.sockets:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()


def test_connection_lost_mid_epoch_is_a_clear_error(stack, data):
    forwarder = Forwarder(stack.ignite_port)
    settings = stack.model_copy(update={"ignite_port": forwarder.port})
    start = time.monotonic()
    with pytest.raises(WorkbenchError, match=rf"127.0.0.1:{forwarder.port}"), \
            make_loader("ignite", settings, dataset=data.name, get_batch=8, concurrency=2) as loader:
        for i, _ in enumerate(loader):
            if i == 20:
                forwarder.cut()
    assert time.monotonic() - start < 2 * stack.timeout_s + 5


def test_loader_pickles_and_connects_lazily(stack, data):
    import pickle

    loader = make_loader("ignite", stack, dataset=data.name, password="s3cret", username="ignite")
    assert loader._clients is None and loader._pool is None  # nothing opened by construction
    assert "s3cret" not in repr(loader.config)
    clone = pickle.loads(pickle.dumps(loader))
    assert clone.endpoint.client_kwargs()["username"] == "ignite"
    plain = make_loader("ignite", stack, dataset=data.name)
    assert sorted(i.key for i in plain) == sorted(data.train)
    again = pickle.loads(pickle.dumps(plain))  # after use: threads and connections stay behind
    assert sorted(i.key for i in again) == sorted(data.train)
    plain.close()
    again.close()


def test_ssl_and_credentials_reach_the_client():
    from workbench.clients.ignite import Endpoint

    kwargs = Endpoint("h", 1, 3.0, "user", "pw", "client.pem", "client.key", "secret").client_kwargs()
    assert kwargs == {"timeout": 3.0, "handshake_timeout": 3.0, "username": "user", "password": "pw",
                      "use_ssl": True, "ssl_certfile": "client.pem", "ssl_keyfile": "client.key",
                      "ssl_keyfile_password": "secret"}
    assert "use_ssl" not in Endpoint("h", 1).client_kwargs()


def test_local_scan_on_a_single_node_sees_everything(stack, data, monkeypatch):
    monkeypatch.delenv("IGNITE_DATASET_PART", raising=False)
    assert sum(1 for _ in IgniteDataset(data.cache, local=True, settings=stack)) == N
    items = read(stack, data.name, mode="scan", local=True)
    assert sorted(i.key for i in items) == sorted(data.train)
