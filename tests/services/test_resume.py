"""Every registered loader, stopped mid-epoch, resumes at the next unread sample against the real services.

For each loader: stop after k batches, save the state, build a fresh loader (or a fresh torchdata
StatefulDataLoader with 2 workers), load the state, finish the epoch: together exactly the split, no sample
twice, none missed, and the same sequence an unbroken epoch gives. Out of order (ordered=False) the state
lists the delivered ids, and the resumed epoch is still exactly the rest.
"""

from __future__ import annotations

import random
import uuid
from collections import Counter

import pytest
from resume_checks import collated_keys, interrupted

from workbench.backends import make_backend
from workbench.data import SyntheticSource
from workbench.errors import WorkbenchError
from workbench.ingest import ingest
from workbench.loaders import LOADERS, loader_class, make_loader
from workbench.loaders.order import resume_shards
from workbench.loaders.s3_shards import S3ShardsConfig, S3ShardsLoader

pytestmark = pytest.mark.services

LAYOUTS = {"cassandra": {}, "s3-objects": {}, "s3-shards": {"maxcount": 6}, "ignite": {}, "fs": {}}
OUT_OF_ORDER = ["cassandra", "cassandra-py", "s3-objects", "ignite", "fs", "s3-shards", "s3torchconnector"]


@pytest.fixture(scope="module")
def dataset(stack):
    """(name, ids) of 48 small synthetic JPEGs ingested into every backend (s3-shards: 8 shards of 6), plus the
    peers' own layouts."""
    name = f"resume_{uuid.uuid4().hex[:8]}"
    source = SyntheticSource(48, mean_kb=8, seed=12)
    backends = [make_backend(b, stack, name, **opts) for b, opts in LAYOUTS.items()]
    for backend in backends:
        ingest(source, backend, progress=False)
    for cls in {loader_class(n) for n in LOADERS}:
        cls.prepare_dataset(stack, name, source)
    yield name, [str(s.id) for s in source]
    for backend in backends:
        backend.drop()


def loader_or_skip(stack, loader: str, **config):
    """The loader, or a skip naming why it cannot run here (the plugin's wheel needs CPython 3.12 + glibc 2.39)."""
    try:
        return make_loader(loader, stack, **config)
    except WorkbenchError as exc:
        if "not loadable here" in str(exc):  # allowed under CI=true (tests/skip_policy.py): a GPU machine's test
            pytest.skip(f"{exc} (measured on the lent GPU machine, which has them)")
        raise


def batch_keys(stack, loader: str, state: dict | None = None, stop: int | None = None, **config):
    """Keys of each batch of one epoch (from `state` when given), and the state after `stop` batches."""
    batches, saved = [], None
    with loader_or_skip(stack, loader, **config) as source:
        if state is not None:
            source.load_state_dict(state)
        for batch in source.batches():
            batches.append(list(batch.keys))
            if len(batches) == stop:
                saved = source.state_dict()
                break
    return batches, saved


@pytest.mark.parametrize("loader", list(LOADERS))
def test_a_stopped_loader_resumes_at_the_next_sample(stack, dataset, loader):
    name, ids = dataset
    config = {"dataset": name, "batch_size": 5, "seed": 3}
    whole, _ = batch_keys(stack, loader, **config)
    head, state = batch_keys(stack, loader, stop=3, **config)
    assert state["position"] == 15 and not state["done"]
    rest, _ = batch_keys(stack, loader, state=state, **config)
    assert [k for b in head + rest for k in b] == [k for b in whole for k in b]
    assert Counter(k for b in head + rest for k in b) == Counter(ids)


@pytest.mark.parametrize("loader", OUT_OF_ORDER)
def test_out_of_order_states_list_the_delivered_ids(stack, dataset, loader):
    name, ids = dataset
    config = {"dataset": name, "batch_size": 4, "ordered": False, "seed": 1}
    head, state = batch_keys(stack, loader, stop=5, **config)
    assert sorted(state["delivered"]) == sorted(k for b in head for k in b)
    rest, _ = batch_keys(stack, loader, state=state, **config)
    assert Counter(k for b in head + rest for k in b) == Counter(ids)


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")
@pytest.mark.parametrize("loader", list(LOADERS))
def test_stateful_dataloader_with_two_workers_resumes(stack, dataset, loader):
    """torchdata's StatefulDataLoader keeps each worker's dataset state: stop after 3 batches, save, build all
    afresh, load, finish."""
    StatefulDataLoader = pytest.importorskip("torchdata.stateful_dataloader").StatefulDataLoader
    from workbench.adapters.torch import BatchDataset, worker_context

    name, ids = dataset
    loader_or_skip(stack, loader, dataset=name).close()

    def data_loader() -> StatefulDataLoader:
        data = BatchDataset(loader, stack, dataset=name, batch_size=4, seed=7)
        return StatefulDataLoader(data, batch_size=None, num_workers=2,
                                  multiprocessing_context=worker_context(stack, 2))

    whole = [collated_keys(b) for b in data_loader()]
    head, state, rest = interrupted(data_loader, 3)
    workers = state["_snapshot"]["_worker_snapshots"]
    assert sorted(workers[w]["dataset_state"]["position"] for w in workers) == [4, 8]  # the datasets' own states
    assert head + rest == whole
    assert Counter(k for b in head + rest for k in b) == Counter(ids)


class CountingShards(S3ShardsLoader):
    """s3-shards, counting whole-shard GETs and the members it fetched by range."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.whole: list[str] = []
        self.ranged: list[tuple[str, int]] = []

    def fetch(self, info, reserved=None):
        self.whole.append(info.name)
        return super().fetch(info, reserved)

    def _fetch_members(self, info, members, fetch):
        if info.members is not None and len(members) < info.samples:
            self.ranged.append((info.name, len(members)))
        return super()._fetch_members(info, members, fetch)


def test_s3_shards_skips_emptied_shards_and_fetches_only_members_to_come(stack, dataset):
    name, ids = dataset
    config = S3ShardsConfig(dataset=name, shuffle_buffer=4, seed=2, parallel_shards=2)
    with CountingShards(stack, config) as first:
        epoch = iter(first)
        head = [next(epoch).key for _ in range(31)]
        state = first.state_dict()
    with CountingShards(stack, config) as again:
        again.load_state_dict(state)
        rest = [item.key for item in again]
    assert Counter(head + rest) == Counter(ids)
    mine = again.my_shards(0)[0]
    plan = resume_shards([info.samples for info in mine], 4, random.Random("2:0:0"), 31).plan
    assert len(plan) < len(mine)  # shards the buffer had emptied: no GET at all
    assert sorted(again.whole) == sorted(mine[s].name for s, members in plan if len(members) == mine[s].samples)
    assert sorted(again.ranged) == sorted((mine[s].name, len(members)) for s, members in plan
                                          if len(members) < mine[s].samples)
    assert again.ranged  # partial shards: only the members still to come, by ranged GETs
