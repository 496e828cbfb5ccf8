"""The Cassandra loaders against the real server: exact epochs, shards, workers, adapters, errors, latency.

Every test runs on both loaders: `cassandra` (C++ driver, acsylla) and `cassandra-py` (Python driver).

Datasets are ingested once per module into keyspaces of their own and dropped at the end.
"""

from __future__ import annotations

import importlib.util
import platform
import threading
import time
import uuid
from collections import Counter
from importlib import import_module

import pytest
from loader_checks import check_pickles_before_and_after_an_epoch

from workbench import catalog
from workbench.backends.registry import make_backend
from workbench.clients import cassandra_session
from workbench.data import SyntheticSource
from workbench.errors import WorkbenchError
from workbench.ingest import ingest
from workbench.loaders import LOADERS as LOADERS_BY_NAME
from workbench.loaders import make_loader
from workbench.loaders.cassandra_native import CassandraNativeLoader

pytestmark = pytest.mark.services

LOADERS = ["cassandra", "cassandra-py"]  # the native (C++ driver) loader and the Python-driver one: same behaviour
N = 200  # enough for the latency test: 200 sequential reads at 20 ms would take 4 s


class Ingested:
    def __init__(self, stack, name: str, source: SyntheticSource, **options) -> None:
        self.name = name
        self.backend = make_backend("cassandra", stack, name, **options)
        ingest(source, self.backend, progress=False)
        self.samples = {str(s.id): s for s in source}

    @property
    def keys(self) -> Counter:
        return Counter(self.samples.keys())


@pytest.fixture(scope="module")
def data(stack):
    """A classification set (int labels), a segmentation set (blob masks) and one stored without labels."""
    tag = uuid.uuid4().hex[:8]
    made: list[Ingested] = []
    try:
        made.append(Ingested(stack, f"tcls_{tag}", SyntheticSource(N, mean_kb=20, seed=3, name=f"tcls_{tag}")))
        made.append(Ingested(stack, f"tseg_{tag}", SyntheticSource(24, mean_kb=20, kind="segmentation",
                                                                    name=f"tseg_{tag}"), label_type="blob"))
        made.append(Ingested(stack, f"tnone_{tag}", SyntheticSource(12, mean_kb=20, name=f"tnone_{tag}"),
                             label_type="none"))
        yield {"cls": made[0], "seg": made[1], "none": made[2]}
    finally:
        with cassandra_session(stack) as session:
            for d in made:
                session.execute(f'DROP KEYSPACE IF EXISTS "{d.backend.keyspace}"')
        for d in made:
            catalog.catalog_path(stack, "cassandra", d.name).unlink(missing_ok=True)


@pytest.fixture(params=LOADERS)
def loader(request) -> str:
    return request.param


def epoch(stack, loader: str, name: str, **config) -> list:
    with make_loader(loader, stack, dataset=name, **config) as source:
        return list(source)


def prefetching(source) -> list:
    """What still fetches ahead: the Python-driver loader's prefetch threads, the native loader's epoch tasks."""
    if isinstance(source, CassandraNativeLoader):
        return [None] * source.producing()
    return [t for t in threading.enumerate() if t.name.startswith("cassandra-prefetch")]


def io_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("cassandra-native-io")]


# ------------------------------------------------------------------------------------ exact epochs


@pytest.mark.parametrize("ordered", [True, False])
def test_one_epoch_is_the_split_byte_for_byte(stack, loader, data, ordered):
    d = data["cls"]
    items = epoch(stack, loader, d.name, ordered=ordered, concurrency=16, batch_size=7, prefetch_buffers=3)
    assert Counter(i.key for i in items) == d.keys
    for item in items:
        sample = d.samples[item.key]
        assert item.data == sample.data
        assert item.label == sample.label and isinstance(item.label, int)


def test_counts_and_raw_ceiling_agree_with_the_source(stack, loader, data):
    d = data["cls"]
    with make_loader(loader, stack, dataset=d.name) as source:
        assert sum(1 for _ in source) == N
        assert (source.samples, source.bytes) == (N, sum(len(s.data) for s in d.samples.values()))
        config = source.config
    raw_ceiling = import_module(LOADERS_BY_NAME[loader].split(":")[0]).raw_ceiling
    assert raw_ceiling(stack, config) == (N, sum(len(s.data) for s in d.samples.values()))


def test_explicit_table_columns_and_source_uuids(stack, loader, data):
    d = data["cls"]
    wanted = sorted(d.samples)[:10]
    items = epoch(stack, loader, d.name, table=f"{d.backend.keyspace}.data_train", id_col="id", label_col="label",
                  data_col="data", source_uuids=[u.upper() for u in wanted], cassandra_ips=[stack.host],
                  cassandra_port=stack.cassandra_port, io_threads=1, shuffle=False)
    assert [i.key for i in items] == wanted
    assert all(i.data == d.samples[i.key].data for i in items)


def test_two_shards_are_disjoint_and_cover_the_split(stack, loader, data):
    d = data["cls"]
    shards = [Counter(i.key for i in epoch(stack, loader, d.name, shard_id=r, num_shards=2)) for r in range(2)]
    assert not set(shards[0]) & set(shards[1])
    assert shards[0] + shards[1] == d.keys
    assert abs(sum(shards[0].values()) - sum(shards[1].values())) <= 1


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize("workers", [1, 2, 4])
def test_dataloader_workers_deliver_each_sample_once(stack, loader, data, workers):
    from torch.utils.data import DataLoader

    from workbench.adapters.torch import LoaderDataset, collate_raw, worker_context

    d = data["cls"]
    dataset = LoaderDataset(loader, stack, dataset=d.name, batch_size=8, concurrency=8)
    keys: Counter = Counter()
    for batch in DataLoader(dataset, batch_size=16, num_workers=workers, collate_fn=collate_raw,
                            multiprocessing_context=worker_context(stack, workers)):
        keys.update(batch["key"])
        assert all(b == d.samples[k].data for k, b in zip(batch["key"], batch["data"], strict=True))
    assert keys == d.keys


def test_shuffled_epochs_differ_and_a_seed_reproduces_its_order(stack, loader, data):
    d = data["cls"]
    with make_loader(loader, stack, dataset=d.name, seed=9) as source:
        first = [i.key for i in source]
        source.set_epoch(1)
        second = [i.key for i in source]
    assert first != second and Counter(first) == Counter(second) == d.keys
    assert [i.key for i in epoch(stack, loader, d.name, seed=9)] == first
    assert [i.key for i in epoch(stack, loader, d.name, seed=10)] != first
    assert [i.key for i in epoch(stack, loader, d.name, shuffle=False)] == sorted(d.samples)


# ----------------------------------------------------------------------------------------- labels


def test_blob_labels_of_a_segmentation_set(stack, loader, data):
    d = data["seg"]
    items = epoch(stack, loader, d.name, label_type="blob")
    assert Counter(i.key for i in items) == d.keys
    for item in items:
        assert isinstance(item.label, bytes) and item.label == d.samples[item.key].label
        assert item.data == d.samples[item.key].data


def test_label_type_none(stack, loader, data):
    for d in (data["none"], data["cls"]):  # stored without labels; labels stored but not read
        items = epoch(stack, loader, d.name, label_type="none")
        assert Counter(i.key for i in items) == d.keys
        assert all(i.label is None and i.data == d.samples[i.key].data for i in items)


def test_label_type_that_does_not_match_the_stored_labels(stack, loader, data):
    with pytest.raises(WorkbenchError, match="label_type"):
        epoch(stack, loader, data["cls"].name, label_type="blob")
    with pytest.raises(WorkbenchError, match="label_type"):
        epoch(stack, loader, data["none"].name, label_type="int")
    d = data["cls"]  # no catalog involved: the column's type itself is checked
    with pytest.raises(WorkbenchError, match="has type int, not blob: set label_type='int'"):
        epoch(stack, loader, d.name, table=f"{d.backend.keyspace}.data_train", id_col="id", label_col="label",
              data_col="data", label_type="blob")


def test_a_failed_prepare_fails_the_same_way_again(stack, loader, data):
    d = data["cls"]  # the connection is made, the statement refused: no half-made state stays behind
    with make_loader(loader, stack, dataset=d.name, table=f"{d.backend.keyspace}.data_train", id_col="id",
                     label_col="label", data_col="data", label_type="blob") as source:
        for _ in range(2):
            with pytest.raises(WorkbenchError, match="has type int, not blob"):
                list(source)


# --------------------------------------------------------------------------------------- adapters


def test_tf_data_adapter_delivers_every_id(stack, loader, data):
    from workbench.adapters.tf import tf_dataset

    d = data["cls"]
    keys: Counter = Counter()
    for element in tf_dataset(loader, stack, dataset=d.name, concurrency=8).as_numpy_iterator():
        key = element["key"].decode()
        keys[key] += 1
        assert element["data"] == d.samples[key].data and element["label"] == d.samples[key].label
    assert keys == d.keys


def test_dali_adapter_decodes_every_sample_on_cpu(stack, loader, data):
    from nvidia.dali.backend import TensorListGPU

    from workbench.adapters.dali import image_pipeline

    d = data["cls"]
    batch_size = 32  # N = 6 full batches + a partial one of 8
    with make_loader(loader, stack, dataset=d.name, concurrency=16) as source:
        pipe = image_pipeline(source, batch_size, gpu=False)
        count, labels = 0, Counter()
        while True:
            try:
                images, batch_labels = pipe.run()
            except StopIteration:
                break
            assert not isinstance(images, TensorListGPU)
            for i in range(len(images)):
                assert images.at(i).shape == (3, 224, 224)
                labels[int(batch_labels.at(i)[0])] += 1
            count += len(images)
    assert count == N
    assert labels == Counter(s.label for s in d.samples.values())


# ----------------------------------------------------------------------------------------- errors


def test_a_missing_id_names_the_id_and_the_table(stack, loader, data):
    d = data["cls"]
    missing = str(uuid.uuid4())
    with pytest.raises(WorkbenchError, match=f"{missing}.*{d.backend.keyspace}.data_train"):
        epoch(stack, loader, d.name, source_uuids=[*sorted(d.samples)[:5], missing])


def test_an_unreachable_port_fails_fast_with_host_and_port(stack, loader, data):
    start = time.monotonic()
    with pytest.raises(WorkbenchError, match=r"127\.0\.0\.1:1\b"):
        epoch(stack, loader, data["cls"].name, cassandra_ips=["127.0.0.1"], cassandra_port=1)
    assert time.monotonic() - start < stack.timeout_s + 5


@pytest.mark.parametrize("bad", [
    {"concurrency": 0}, {"prefetch_buffers": 0}, {"label_type": "float"}, {"io_threads": 0},
    {"source_uuids": ["not-a-uuid"]}, {"source_uuids": []}, {"table": "no dots here"}, {"data_col": "Data-1"},
    {"cassandra_ips": ["127.0.0.1:9042"]}, {"cassandra_port": 0}, {"username": "alone"},
    {"ssl_certificate": "/no/such.pem"}, {"use_ssl": True, "ssl_certificate": "/no/such.pem"},
])
def test_invalid_settings_are_rejected_before_io(stack, loader, bad):
    unreachable = stack.model_copy(update={"host": "192.0.2.1", "cassandra_port": 1})  # any I/O would hang
    start = time.monotonic()
    with pytest.raises(WorkbenchError, match=f"invalid {loader} loader setting"):
        make_loader(loader, unreachable, dataset="never_ingested", **bad)
    assert time.monotonic() - start < 1


# ------------------------------------------------------------------------------- threads, pickling


def test_stopping_early_and_close_stop_the_prefetch_thread(stack, loader, data):
    d = data["cls"]
    with make_loader(loader, stack, dataset=d.name, batch_size=4, prefetch_buffers=2) as source:
        iterator = iter(source)
        first = [next(iterator) for _ in range(5)]
        assert len(first) == 5 and prefetching(source)
        iterator.close()  # the consumer leaves mid-epoch
        assert not prefetching(source)
        partial = iter(source)
        next(partial)
        assert prefetching(source)
    assert not prefetching(source)  # close() stopped the producer of an abandoned epoch too
    assert not io_threads()  # and the native loader's event loop thread
    del partial


def test_a_loader_pickles_before_and_after_connecting(stack, loader, data):
    check_pickles_before_and_after_an_epoch(stack, loader, data["cls"].name, seed=4)


# ---------------------------------------------------------------------------------------- latency


def test_requests_overlap_to_hide_latency(stack, loader, data):
    from workbench.net.toxiproxy import Toxiproxy

    d = data["cls"]
    toxiproxy = Toxiproxy(stack)
    toxiproxy.ensure_proxies()

    def timed(concurrency: int) -> float:
        """Seconds to read the split after connecting (a session's start is not a request), its ids checked."""
        with make_loader(loader, stack, dataset=d.name, via_proxy=True, concurrency=concurrency) as source:
            source.connect()
            start = time.perf_counter()
            keys = Counter(item.key for item in source)
            elapsed = time.perf_counter() - start
        assert keys == d.keys
        return elapsed

    with toxiproxy.network("cassandra", rtt_ms=20):
        one, many = timed(1), timed(32)
    # a ratio within one run, as the S3 and Ignite latency tests: a loaded machine slows both alike
    assert one > N * 0.020, one  # really one round trip per read
    assert many < 0.5 * one, f"{N} reads took {many:.2f} s with 32 in flight, {one:.2f} s one by one: no overlap"


# ----------------------------------------------------------------------------------------- plugin


def test_the_plugin_variant_says_why_it_cannot_load(stack, data):
    if importlib.util.find_spec("crs4") is not None and importlib.util.find_spec("crs4.cassandra_utils") is not None:
        pytest.skip("cassandra-dali-plugin is installed here")
    glibc = platform.libc_ver()[1]
    expected = ("cassandra-dali-plugin is not loadable here: its wheel needs CPython 3.12 on glibc >= 2.39 with "
                f"DALI 2.1 (this is CPython {platform.python_version()} on glibc {glibc}); use loader 'cassandra'")
    with pytest.raises(WorkbenchError) as info:
        make_loader("cassandra-plugin", stack, dataset=data["cls"].name)
    assert str(info.value) == expected and "\n" not in str(info.value)
    with pytest.raises(WorkbenchError, match="invalid cassandra-plugin loader setting"):
        make_loader("cassandra-plugin", stack, dataset=data["cls"].name, prefetch_buffers=0)
