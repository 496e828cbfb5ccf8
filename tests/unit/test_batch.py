"""Batches: payloads back to back in one buffer, views without copies, the same samples as the items."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from workbench.data import Item
from workbench.data.batch import Batch, batched


def items(payloads: list[bytes]) -> list[Item]:
    return [Item(f"k{i}", i if i % 3 else None, p) for i, p in enumerate(payloads)]


@given(st.lists(st.binary(max_size=64), max_size=40), st.integers(1, 9))
def test_batches_hold_exactly_the_items_in_order(payloads, size):
    source = items(payloads)
    batches = list(batched(source, size))
    assert all(len(b) == size for b in batches[:-1]) and all(1 <= len(b) <= size for b in batches)
    assert [i for b in batches for i in b.items()] == source
    assert sum(b.nbytes for b in batches) == sum(map(len, payloads))


def test_views_share_the_buffer():
    batch = Batch.from_items(items([b"abc", b"", b"defg"]))
    view = batch.view(2)
    assert view.tobytes() == b"defg" and np.shares_memory(view, batch.buffer)
    assert batch.sizes().tolist() == [3, 0, 4]


def test_inconsistent_batches_are_refused():
    with pytest.raises(ValueError, match="offsets"):
        Batch(["a"], [1], np.zeros(3, np.uint8), np.array([0, 2], np.int64))
    with pytest.raises(ValueError, match="labels"):
        Batch(["a"], [], np.zeros(3, np.uint8), np.array([0, 3], np.int64))
    with pytest.raises(ValueError, match="batch size"):
        list(batched([], 0))
