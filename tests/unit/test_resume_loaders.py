"""Loaders stopped mid-epoch resume at the next unread sample: the base class's state, loaders defined here (one
that skips its list, one that reads again), and the fs loader over both layouts, alone and in torchdata's
StatefulDataLoader with 2 workers. No services: everything under tmp_path."""

from __future__ import annotations

import itertools
import random
import uuid
from collections import Counter
from collections.abc import Iterator

import pytest
from resume_checks import collated_keys, interrupted
from shared_sources import TwoSplits

from workbench.adapters.torch import BatchDataset, LoaderDataset, collate_raw, worker_context
from workbench.backends.registry import make_backend
from workbench.config import Settings
from workbench.data import Item, SyntheticSource
from workbench.errors import WorkbenchError
from workbench.ingest import ingest
from workbench.loaders import Loader, LoaderConfig, make_loader
from workbench.loaders.fs import FilesystemLoader, FilesystemLoaderConfig
from workbench.loaders.order import effective_shard, epoch_order, resume_shards, take_shard

KEYS = [f"k{i:03d}" for i in range(50)]


class ListLoader(Loader):
    """KEYS in this reader's order; resumes through `unread`, so it never reads a delivered key again."""

    name = "test-list"
    backend = "none"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.reads: list[str] = []

    def order(self, epoch: int) -> list[str]:
        c = self.config
        mine = take_shard(epoch_order(KEYS, c.seed, epoch, c.shuffle),
                          *effective_shard(c.shard_id, c.num_shards, self.worker_id, self.num_workers))
        if not c.ordered:  # "completion order": pairs swapped
            mine = [k for pair in itertools.zip_longest(mine[1::2], mine[::2]) for k in pair if k is not None]
        return mine

    def read(self, keys: list[str]) -> Iterator[Item]:
        for key in keys:
            self.reads.append(key)
            yield Item(key, 0, key.encode())

    def iter_epoch(self, epoch: int) -> Iterator[Item]:
        return self.read(self.unread(epoch, self.order(epoch), key=str))


class ReadAgainLoader(ListLoader):
    """The same order, but no skipping of its own: the base reads the epoch again and drops what was delivered."""

    name = "test-read-again"

    def iter_epoch(self, epoch: int) -> Iterator[Item]:
        return self.read(self.order(epoch))


def build(cls: type[ListLoader], worker_id: int = 0, num_workers: int = 1, **config) -> ListLoader:
    return cls(Settings(), LoaderConfig(dataset="d", **config), worker_id, num_workers)


def keys_of(items) -> list[str]:
    return [i.key for i in items]


@pytest.mark.parametrize("cls", [ListLoader, ReadAgainLoader])
@pytest.mark.parametrize("stop", [0, 1, 17, 49, 50])
@pytest.mark.parametrize("ordered", [True, False])
def test_a_fresh_loader_given_the_state_delivers_exactly_the_rest(cls, stop, ordered):
    full = keys_of(build(cls, seed=3, ordered=ordered))
    first = build(cls, seed=3, ordered=ordered)
    epoch = iter(first)
    head = [next(epoch).key for _ in range(stop)]
    state = first.state_dict()
    assert (state["epoch"], state["position"]) == (0, stop)
    again = build(cls, seed=3, ordered=ordered)
    again.load_state_dict(state)
    assert again.state_dict() == state  # saved again before reading: the same state
    rest = keys_of(again)
    assert head + rest == full
    if cls is ListLoader:
        assert again.reads == rest  # nothing delivered was read again
    else:
        assert len(again.reads) == len(full)
    assert again.state_dict()["done"] and again.state_dict()["position"] == len(full)
    assert keys_of(again) == full  # iterating again: the whole epoch


@pytest.mark.parametrize("cls", [ListLoader, ReadAgainLoader])
def test_the_batch_path_resumes_in_samples_whatever_the_batch_size(cls):
    full = keys_of(build(cls, seed=1))
    first = build(cls, seed=1, batch_size=8)
    batches = first.batches()
    head = [k for _ in range(3) for k in next(batches).keys]
    state = first.state_dict()
    assert state["position"] == 24
    again = build(cls, seed=1, batch_size=5)
    again.load_state_dict(state)
    rest = [k for b in again.batches() for k in b.keys]
    assert head + rest == full and len(rest) == 26


def test_a_finished_epoch_resumes_to_nothing_without_reading():
    first = build(ListLoader)
    list(first)
    again = build(ReadAgainLoader)
    state = first.state_dict()
    state["loader"] = ReadAgainLoader.name
    again.load_state_dict(state)
    assert list(again) == [] and again.reads == []


def test_the_state_names_its_epoch_and_set_epoch_moves_on():
    first = build(ListLoader, seed=2)
    first.set_epoch(4)
    epoch = iter(first)
    head = [next(epoch).key for _ in range(5)]
    state = first.state_dict()
    again = build(ListLoader, seed=2)
    again.load_state_dict(state)
    assert again.epoch == 4
    assert head + keys_of(again) == keys_of(build_at(ListLoader, 4, seed=2))
    dropped = build(ListLoader, seed=2)
    dropped.load_state_dict(state)
    dropped.set_epoch(5)  # another epoch: the loaded state no longer applies
    assert keys_of(dropped) == keys_of(build_at(ListLoader, 5, seed=2))


def build_at(cls, epoch: int, **config) -> ListLoader:
    loader = build(cls, **config)
    loader.set_epoch(epoch)
    return loader


def test_workers_resume_their_own_share():
    states, heads = [], []
    for worker in range(2):
        loader = build(ListLoader, worker, 2, seed=9)
        epoch = iter(loader)
        heads.append([next(epoch).key for _ in range(4 + worker)])
        states.append(loader.state_dict())
    delivered = list(heads[0] + heads[1])
    for worker in range(2):
        again = build(ListLoader, worker, 2, seed=9)
        again.load_state_dict(states[worker])
        delivered += keys_of(again)
    assert Counter(delivered) == Counter(KEYS)


@pytest.mark.parametrize("change,message", [
    ({"loader": "s3-shards"}, "loader 'test-list' cannot resume a state of loader 's3-shards'"),
    ({"reader": [1, 2]}, "the state is reader 1 of 2 .* this is reader 0 of 1: resume with the same ranks"),
    ({"order": {"dataset": "d", "split": "train", "seed": 7, "shuffle": True, "ordered": True}},
     "saved with seed=7, this loader has seed=0: resume with the settings the state was saved with"),
    ({"version": 99}, "not a loader state of version 1 .got 99.: pass what state_dict.. returned"),
    ({"position": "many"}, "a damaged state .ValueError"),
    ({"position": 51}, "the state says 51 items of epoch 0 were delivered, but this reader's order has 50"),
])
def test_a_state_that_does_not_fit_is_one_clear_line(change, message):
    state = {**build(ListLoader).state_dict(), **change}
    loader = build(ListLoader)
    with pytest.raises(WorkbenchError, match=message):
        loader.load_state_dict(state)
        list(loader)


def test_out_of_order_states_list_the_delivered_ids_and_must_match_the_order():
    first = build(ListLoader, ordered=False)
    epoch = iter(first)
    head = [next(epoch).key for _ in range(7)]
    state = first.state_dict()
    assert sorted(state["delivered"]) == sorted(head)
    state["delivered"] = [*state["delivered"], "k999"]
    again = build(ListLoader, ordered=False)
    again.load_state_dict(state)
    with pytest.raises(WorkbenchError, match="1 ids the state lists as delivered are not in this reader's order"):
        list(again)
    with pytest.raises(WorkbenchError, match="saved with ordered=False, this loader has ordered=True"):
        build(ListLoader).load_state_dict(state)


# ----------------------------------------------------------------------------------------- fs loader

N = 60  # 45 train samples


@pytest.fixture(scope="module")
def source():
    return TwoSplits(SyntheticSource(N, mean_kb=4, name=f"fsr-{uuid.uuid4().hex[:6]}"))


@pytest.fixture(params=["imagefolder", "shards"])
def dataset(request, settings, source, tmp_path):
    """(root, ids of the train split) of the fs backend in one layout (shards of 5 samples)."""
    root = tmp_path / f"data-{request.param}"
    options = {"maxcount": 5} if request.param == "shards" else {}
    ingest(source, make_backend("fs", settings, source.name, layout=request.param, root=root, **options),
           progress=False)
    return root, [str(s.id) for s in source if s.split == "train"]


class CountingFs(FilesystemLoader):
    """The fs loader, counting the shard files it reads."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.shard_reads = 0

    def _read_shard_file(self, info):
        self.shard_reads += 1
        return super()._read_shard_file(info)


@pytest.mark.parametrize("ordered", [True, False])
@pytest.mark.parametrize("stop", [3, 27])
def test_fs_resumes_both_layouts(settings, source, dataset, stop, ordered):
    root, train = dataset
    config = FilesystemLoaderConfig(dataset=source.name, root=root, seed=5, shuffle_buffer=8, ordered=ordered)
    with CountingFs(settings, config) as whole:
        full = keys_of(whole)
    with CountingFs(settings, config) as first:
        epoch = iter(first)
        head = [next(epoch).key for _ in range(stop)]
        state = first.state_dict()
    with CountingFs(settings, config) as again:
        again.load_state_dict(state)
        rest = keys_of(again)
    assert Counter(head + rest) == Counter(train)
    if ordered:
        assert head + rest == full
        if again.layout == "shards":  # only shards still holding samples to come are read
            plan = resume_shards([5] * 9, 8, random.Random("5:0:0"), stop).plan
            assert again.shard_reads == len(plan) and (stop < 10 or len(plan) < 9)


def worker_positions(state: dict) -> list[int]:
    """Samples each worker's dataset state says it delivered (torchdata keeps one state per worker)."""
    workers = state["_snapshot"]["_worker_snapshots"]
    return [workers[w]["dataset_state"]["position"] for w in sorted(workers)]


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")
@pytest.mark.parametrize("batches", [True, False])
def test_fs_in_a_stateful_dataloader_with_two_workers(settings, source, dataset, batches):
    """Stop after k batches, save the DataLoader's state, build everything afresh, load it: the rest of the
    epoch, and together exactly the split, each sample once; the same batches an unbroken epoch gives."""
    StatefulDataLoader = pytest.importorskip("torchdata.stateful_dataloader").StatefulDataLoader

    root, train = dataset

    def loader() -> StatefulDataLoader:
        if batches:
            data = BatchDataset("fs", settings, dataset=source.name, root=root, seed=2, batch_size=4)
            return StatefulDataLoader(data, batch_size=None, num_workers=2,
                                      multiprocessing_context=worker_context(settings, 2))
        data = LoaderDataset("fs", settings, dataset=source.name, root=root, seed=2)
        return StatefulDataLoader(data, batch_size=4, num_workers=2, collate_fn=collate_raw,
                                  multiprocessing_context=worker_context(settings, 2))

    whole = [collated_keys(b) for b in loader()]
    head, state, rest = interrupted(loader, 4)
    assert worker_positions(state) == [8, 8]  # the datasets' own states: no fast-forwarding by re-reading
    assert head + rest == whole
    assert Counter(k for b in head + rest for k in b) == Counter(train)


def test_loader_dataset_state_in_the_main_process(settings, source, dataset):
    root, train = dataset
    data = LoaderDataset("fs", settings, dataset=source.name, root=root, seed=4)
    assert data.state_dict()["position"] == 0
    epoch = iter(data)
    head = [next(epoch)[2] for _ in range(10)]
    state = data.state_dict()
    assert state["position"] == 10
    fresh = LoaderDataset("fs", settings, dataset=source.name, root=root, seed=4)
    fresh.load_state_dict(state)
    assert fresh.state_dict() == state
    rest = [key for _, _, key in fresh]
    assert Counter(head + rest) == Counter(train)
    assert fresh.state_dict()["done"]
    assert len([key for _, _, key in fresh]) == len(train)  # the next iteration: a whole epoch
    with pytest.raises(WorkbenchError, match="saved with seed=4, this loader has seed=5"):
        LoaderDataset("fs", settings, dataset=source.name, root=root, seed=5).load_state_dict(state)


def test_make_loader_round_trip_through_the_registry(settings, source, dataset):
    root, train = dataset
    with make_loader("fs", settings, dataset=source.name, root=root, batch_size=7) as first:
        head = [k for b in itertools.islice(first.batches(), 2) for k in b.keys]
        state = first.state_dict()
    with make_loader("fs", settings, dataset=source.name, root=root, batch_size=7) as again:
        again.load_state_dict(state)
        assert Counter(head + [k for b in again.batches() for k in b.keys]) == Counter(train)
