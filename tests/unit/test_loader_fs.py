"""The filesystem loader over both layouts of the fs backend: no services, everything under tmp_path."""

from __future__ import annotations

import json
import multiprocessing
import pickle
import uuid
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import settings as settings_profile
from hypothesis import strategies as st
from shared_sources import TwoSplits
from torch.utils.data import DataLoader

from workbench.adapters.torch import LoaderDataset, collate_raw, worker_context
from workbench.backends.registry import make_backend
from workbench.bench.loader_process import EpochRunner, fresh_process_epochs, loader_epochs
from workbench.data import SyntheticSource
from workbench.errors import WorkbenchError
from workbench.ingest import ingest
from workbench.layouts.objects import JOURNAL
from workbench.loaders import make_loader
from workbench.loaders.fs import FileEntry, FileList, raw_ceiling, read_journal

LAYOUTS = ["imagefolder", "shards"]
N = 60


@pytest.fixture(scope="module")
def source():
    return TwoSplits(SyntheticSource(N, mean_kb=8, name=f"fsl-{uuid.uuid4().hex[:6]}"))


@pytest.fixture(params=LAYOUTS)
def dataset(request, settings, source, tmp_path):
    """(layout, root, {id: sample} of the train split) ingested with the fs backend under tmp_path."""
    layout = request.param
    root = tmp_path / f"data-{layout}"
    options = {"maxcount": 5} if layout == "shards" else {}
    backend = make_backend("fs", settings, source.name, layout=layout, root=root, **options)
    ingest(source, backend, progress=False)
    train = {str(s.id): s for s in source if s.split == "train"}
    return layout, root, train


def read(settings, source, root, **config):
    with make_loader("fs", settings, dataset=source.name, root=root, **config) as loader:
        return list(loader)


def test_one_epoch_is_exactly_the_split_byte_identical(settings, source, dataset):
    _, root, train = dataset
    items = read(settings, source, root, shuffle=False)
    assert len(items) == len(train) == 45
    assert Counter(i.key for i in items) == Counter(list(train))
    for item in items:
        assert item.data == train[item.key].data
        assert item.label == train[item.key].label
    val = read(settings, source, root, split="val", shuffle=False)
    assert {i.key for i in val} == {str(s.id) for s in source if s.split == "val"}


def test_the_window_in_files_is_recorded_for_the_imagefolder_and_kept_across_epochs(settings, source, dataset):
    layout, root, _ = dataset
    with make_loader("fs", settings, dataset=source.name, root=root, files_per_request=4) as loader:
        list(loader)
        first = loader.window_history
        loader.set_epoch(1)
        list(loader)
        if layout == "shards":  # a fixed number of shards at once: no window to record
            assert first == loader.window_history == []
            return
        assert first[0] == 4 and all(depth % 4 == 0 for depth in first)  # requests of 4 files, counted in files
        assert loader.window_history[: len(first)] == first  # the same window went on in epoch 1


def test_root_comes_from_the_catalog(settings, source, dataset):
    _, _, train = dataset
    with make_loader("fs", settings, dataset=source.name) as loader:
        assert {i.key for i in loader} == set(train)


def test_ranks_are_disjoint_and_cover_the_split(settings, source, dataset):
    _, root, train = dataset
    parts = [read(settings, source, root, shard_id=r, num_shards=3, seed=4) for r in range(3)]
    keys = [{i.key for i in p} for p in parts]
    assert sum(len(p) for p in parts) == len(train)
    assert set().union(*keys) == set(train)
    assert all(not (a & b) for i, a in enumerate(keys) for b in keys[i + 1:])


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_dataloader_workers_deliver_each_sample_once(settings, source, dataset, workers):
    _, root, train = dataset
    ds = LoaderDataset("fs", settings, dataset=source.name, root=str(root), concurrency=4)
    loader = DataLoader(ds, batch_size=8, num_workers=workers, collate_fn=collate_raw,
                        multiprocessing_context=worker_context(settings, workers))
    keys = [k for batch in loader for k in batch["key"]]
    assert Counter(keys) == Counter(list(train))


def test_persistent_workers_read_each_epoch_in_the_order_set_epoch_gives(settings, source, dataset):
    """A persistent worker holds the dataset pickled at the first epoch: without the epoch channel every epoch
    came in epoch 0's order (same shuffle, no error)."""
    _, root, train = dataset
    ds = LoaderDataset("fs", settings, dataset=source.name, root=str(root), concurrency=4, shuffle_buffer=20)

    def keys(loader):
        return [k for batch in loader for k in batch["key"]]

    persistent = DataLoader(ds, batch_size=8, num_workers=2, collate_fn=collate_raw, persistent_workers=True,
                            multiprocessing_context=worker_context(settings, 2))
    orders = []
    for epoch in (0, 1, 2, 1):
        ds.set_epoch(epoch)
        got = keys(persistent)
        fresh = DataLoader(ds, batch_size=8, num_workers=2, collate_fn=collate_raw,
                           multiprocessing_context=worker_context(settings, 2))
        assert got == keys(fresh)  # workers started for this epoch see it: the reference
        orders.append(got)
    assert sorted(orders[0]) == sorted(train)
    assert orders[0] != orders[1] != orders[2] and orders[3] == orders[1]


def test_the_dataset_keeps_one_loader_per_process_from_epoch_to_epoch(settings, source, dataset):
    """As a training job keeps its connections and settled window: one loader for every epoch read here."""
    _, root, train = dataset
    ds = LoaderDataset("fs", settings, dataset=source.name, root=str(root), concurrency=4, shuffle_buffer=20)
    loaders = []
    for epoch in (0, 1, 2):
        ds.set_epoch(epoch)
        keys = [key for _, _, key in ds]
        with make_loader("fs", settings, dataset=source.name, root=root, concurrency=4, shuffle_buffer=20) as fresh:
            fresh.set_epoch(epoch)
            assert keys == [item.key for item in fresh]
        loaders.append(ds._kept[1])
    assert loaders[0] is loaders[1] is loaders[2] and loaders[0].samples == 3 * len(train)
    inner = iter(ds)  # a second iteration while one reads: a loader of its own, both whole
    assert Counter(k for (_, _, k), _ in zip(iter(ds), inner, strict=True)) == Counter(list(train))
    assert ds._kept[1] is loaders[0]


def test_after_a_failed_iteration_the_next_one_reads_with_a_new_loader(settings, source, dataset):
    layout, root, train = dataset
    ds = LoaderDataset("fs", settings, dataset=source.name, root=str(root), concurrency=4)
    assert len(list(ds)) == len(train)
    first = ds._kept[1]
    victim = next(p for p in sorted((root / "train").rglob("*")) if p.is_file() and (
        p.suffix == ".tar" if layout == "shards" else p.suffix == ".jpg"))
    kept = victim.read_bytes()
    victim.unlink()
    with pytest.raises(WorkbenchError, match="missing"):
        list(ds)
    assert ds._kept is None
    victim.write_bytes(kept)
    assert Counter(key for _, _, key in ds) == Counter(list(train))
    assert ds._kept[1] is not first


def test_a_forked_worker_makes_its_own_loader_after_the_parent_read(settings, source, dataset):
    """The parent's kept loader holds threads that a forked child does not have: using it there would hang."""
    _, root, train = dataset
    ds = LoaderDataset("fs", settings, dataset=source.name, root=str(root), concurrency=4)
    assert len(list(ds)) == len(train)
    loader = DataLoader(ds, batch_size=8, num_workers=2, collate_fn=collate_raw, timeout=60,
                        multiprocessing_context=multiprocessing.get_context("fork"))
    assert Counter(k for batch in loader for k in batch["key"]) == Counter(list(train))


def test_shuffle_epochs_differ_seed_reproducible(settings, source, dataset):
    _, root, train = dataset

    def epoch(e, seed=1, **kw):
        with make_loader("fs", settings, dataset=source.name, root=root, seed=seed, shuffle_buffer=20, **kw) as lo:
            lo.set_epoch(e)
            return [i.key for i in lo]

    e0, e1 = epoch(0), epoch(1)
    assert e0 != e1 and sorted(e0) == sorted(e1) == sorted(train)
    assert epoch(0) == e0  # same seed and epoch: same order
    assert epoch(0, seed=2) != e0
    assert epoch(0, shuffle=False) == epoch(1, shuffle=False)


def test_unordered_mode_same_set(settings, source, dataset):
    _, root, train = dataset
    items = read(settings, source, root, ordered=False, concurrency=8)
    assert Counter(i.key for i in items) == Counter(list(train))


def test_raw_ceiling_reads_every_file(settings, source, dataset):
    layout, root, train = dataset
    samples, nbytes = raw_ceiling(settings, {"dataset": source.name, "root": root, "concurrency": 4})
    assert samples == len(train)
    payload = sum(len(s.data) for s in train.values())
    assert nbytes == payload if layout == "imagefolder" else nbytes > payload


def test_loader_pickles_before_and_after_use(settings, source, dataset):
    _, root, train = dataset
    loader = make_loader("fs", settings, dataset=source.name, root=root)
    clone = pickle.loads(pickle.dumps(loader))
    assert {i.key for i in clone} == set(train)
    clone.close()
    again = pickle.loads(pickle.dumps(clone))
    assert len(list(again)) == len(train)
    again.close()


def test_missing_file_names_it(settings, source, dataset):
    layout, root, _ = dataset
    victim = next(p for p in sorted((root / "train").rglob("*")) if p.is_file() and (
        p.suffix == ".tar" if layout == "shards" else p.suffix == ".jpg"))
    victim.unlink()
    with pytest.raises(WorkbenchError, match=victim.name) as info:
        read(settings, source, root)
    assert str(victim) in str(info.value) and "missing" in str(info.value)


def test_unknown_split_and_root_are_clear_errors(settings, source, dataset, tmp_path):
    _, root, _ = dataset
    with pytest.raises(WorkbenchError, match=r"no split 'test'.*splits: train, val"):
        read(settings, source, root, split="test")
    with pytest.raises(WorkbenchError, match="does not exist"):
        read(settings, source, tmp_path / "nowhere")


def test_blob_labels(settings, tmp_path):
    src = SyntheticSource(12, mean_kb=8, kind="segmentation", name=f"seg-{uuid.uuid4().hex[:6]}")
    expected = {str(s.id): s for s in src}
    for layout in LAYOUTS:
        root = tmp_path / f"seg-{layout}"
        ingest(src, make_backend("fs", settings, src.name, layout=layout, root=root, label_type="blob",
                                 maxcount=5), progress=False)
        items = read(settings, src, root, label_type="blob")
        assert {i.key: (i.data, i.label) for i in items} == {k: (s.data, s.label) for k, s in expected.items()}
        assert all(i.label is None for i in read(settings, src, root, label_type="none"))


def test_invalid_config_fails_before_io(settings):
    with pytest.raises(WorkbenchError, match="shuffle_buffer"):
        make_loader("fs", settings, dataset="x", shuffle_buffer=-1)


def test_bench_measures_a_loader_in_a_fresh_process_with_the_same_epochs(settings, source, dataset):
    _, root, train = dataset
    config = {"dataset": source.name, "root": str(root), "concurrency": 4}
    (runs, cpu, windows), fresh = fresh_process_epochs("fs", settings, config, max_seconds=30, repeats=2)
    here, _, _ = loader_epochs("fs", settings, config, max_seconds=30, repeats=1)
    payload = sum(len(s.data) for s in train.values())
    assert fresh and len(runs) == len(cpu) == 2 and all(r[1:] == (45, payload) for r in runs + here)
    assert all(seconds > 0 for seconds, _, _ in runs) and isinstance(windows, list)


def test_the_bench_keeps_one_loader_from_epoch_to_epoch_as_a_training_job_does(settings, source, dataset):
    _, root, train = dataset
    config = {"dataset": source.name, "root": str(root), "concurrency": 4, "batch_size": 8}
    payload = sum(len(s.data) for s in train.values())
    with EpochRunner("fs", settings, config, max_seconds=30) as runner:
        first, *_ = runner.epoch()
        loader = runner.loader
        second, *_ = runner.epoch()
        assert runner.loader is loader and loader.epoch == 1  # the same loader, told the next epoch
        assert first[1:] == second[1:] == (45, payload)
    assert runner.loader is None
    with EpochRunner("fs", settings, config, max_seconds=0) as short:  # each epoch cut after its first batch
        assert [short.epoch()[0][1] for _ in range(2)] == [8, 8]


def test_a_loader_error_in_the_fresh_process_is_raised_here_as_it_is(settings, source, tmp_path):
    config = {"dataset": source.name, "root": str(tmp_path / "nowhere"), "concurrency": 4}
    with pytest.raises(WorkbenchError) as here:
        loader_epochs("fs", settings, config, max_seconds=30, repeats=1)
    with pytest.raises(WorkbenchError) as fresh:
        fresh_process_epochs("fs", settings, config, max_seconds=30, repeats=1)
    assert str(fresh.value) == str(here.value) and "nowhere" in str(fresh.value)


@settings_profile(max_examples=60, deadline=None)
@given(st.lists(st.builds(FileEntry, rel=st.text(min_size=1, max_size=40), id=st.text(max_size=40),
                          label=st.none() | st.integers(-(2**70), 2**70), blob=st.booleans(),
                          size=st.none() | st.integers(0, 2**62 - 1)), max_size=30))
def test_the_packed_file_list_gives_back_every_entry_as_it_was(entries):
    files = FileList(entries)
    assert len(files) == len(entries) and list(files) == entries
    assert [files.id(i) for i in range(len(entries))] == [e.id for e in entries]
    assert files.sizes(list(range(len(entries)))[::-1]) == [e.size for e in reversed(entries)]
    assert [files[i - len(entries)] for i in range(len(entries))] == entries
    for beyond in (len(entries), -len(entries) - 1):
        with pytest.raises(IndexError):
            files[beyond]


def test_a_journal_size_that_is_not_a_byte_count_is_left_unknown(tmp_path):
    (tmp_path / JOURNAL).mkdir()
    lines = [{"key": f"train/{n}.jpg", "id": str(n), "label": 1, "size": size}
             for n, size in enumerate([5, -1, "7", 2**70, None, 1.5])]
    (tmp_path / JOURNAL / "0001.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert [read_journal(tmp_path)[f"train/{n}.jpg"].size for n in range(6)] == [5, None, None, None, None, None]
