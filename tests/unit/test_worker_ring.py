"""Batches from DataLoader workers through the worker ring (reused shared memory), on the fs loader: no services."""

from __future__ import annotations

import uuid
from collections import Counter

import pytest
from shm_checks import in_shared_memory
from torch.utils.data import DataLoader

from workbench.adapters.torch import BatchDataset, payloads, worker_context
from workbench.adapters.worker_ring import SLOTS
from workbench.backends.registry import make_backend
from workbench.data import SyntheticSource
from workbench.ingest import ingest

N = 120


@pytest.fixture
def dataset(settings, tmp_path):
    """(name, root, {id: sample}) of an fs imagefolder dataset of N samples."""
    source = SyntheticSource(N, mean_kb=8, name=f"ring-{uuid.uuid4().hex[:6]}")
    root = tmp_path / "ring"
    ingest(source, make_backend("fs", settings, source.name, layout="imagefolder", root=root), progress=False)
    return source.name, root, {str(s.id): s for s in source if s.split == "train"}


def elements(settings, dataset, workers=2, **options):
    name, root, _ = dataset
    data = BatchDataset("fs", settings, dataset=name, root=str(root), batch_size=4, concurrency=4)
    return DataLoader(data, batch_size=None, num_workers=workers, timeout=60,
                      multiprocessing_context=worker_context(settings, workers), **options)


def check(element, expected) -> None:
    for key, raw, label in zip(element["key"], payloads(element), element["label"].tolist(), strict=True):
        assert raw.numpy().tobytes() == expected[key].data and label == expected[key].label


def test_batches_arrive_whole_in_reused_shared_memory(settings, dataset):
    *_, expected = dataset
    keys, addresses = Counter(), set()
    for element in elements(settings, dataset):
        assert in_shared_memory(element["data"])
        check(element, expected)
        keys.update(element["key"])
        addresses.add(element["data"].data_ptr())
        del element  # consumed: its slot is free again
    assert keys == Counter(list(expected))
    assert len(addresses) <= 2 * 3  # 30 batches from 2 workers in a few slots each, not a segment per batch


def test_batches_held_by_the_consumer_are_never_overwritten(settings, dataset):
    """Holding every batch uses up each worker's slots; the rest come the ordinary way and nothing changes
    under the batches held."""
    *_, expected = dataset
    held = list(elements(settings, dataset))
    assert len(held) == N // 4 > 2 * SLOTS
    for element in held:
        check(element, expected)
    assert Counter(k for element in held for k in element["key"]) == Counter(list(expected))


@pytest.mark.filterwarnings("ignore:.pin_memory. argument is set as true but no accelerator:UserWarning")
def test_persistent_workers_over_epochs_and_pinned_memory_where_there_is_an_accelerator(settings, dataset):
    *_, expected = dataset
    loader = elements(settings, dataset, persistent_workers=True, pin_memory=True)
    for _ in range(3):
        keys = Counter()
        for element in loader:
            check(element, expected)
            keys.update(element["key"])
        assert keys == Counter(list(expected))
