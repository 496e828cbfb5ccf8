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


def test_nothing_is_copied_until_the_buffer_is_asked_for():
    payloads = [b"abc", b"", b"defg"]
    batch = Batch.from_items(items(payloads))
    view = batch.view(2)
    assert view.tobytes() == b"defg" and np.shares_memory(view, np.frombuffer(payloads[2], np.uint8))
    assert all(i.data is p for i, p in zip(batch.items(), payloads, strict=True))  # the payloads themselves
    assert batch.nbytes == 7 and batch.sizes().tolist() == [3, 0, 4] and batch.tobytes() == b"abcdefg"
    target = np.full(9, 0xEE, np.uint8)
    batch.copy_into(target)
    assert target.tobytes() == b"abcdefg\xee\xee"
    joined = batch.buffer  # now one copy of each, kept
    assert joined.tobytes() == b"abcdefg" and batch.buffer is joined
    assert np.shares_memory(batch.view(2), joined) and batch.view(2).tobytes() == b"defg"
    assert [i.data for i in batch.items()] == payloads and batch.tobytes() == b"abcdefg"
    again = np.zeros(7, np.uint8)
    batch.copy_into(again)
    assert again.tobytes() == b"abcdefg"


def test_a_batch_over_a_buffer_reads_it():
    batch = Batch(["a", "b"], [1, None], np.frombuffer(b"xyzw", np.uint8), np.array([0, 1, 4], np.int64))
    assert [i.data for i in batch.items()] == [b"x", b"yzw"] and batch.tobytes() == b"xyzw"
    assert np.shares_memory(batch.view(1), batch.buffer)


def test_inconsistent_batches_are_refused():
    with pytest.raises(ValueError, match="offsets"):
        Batch(["a"], [1], np.zeros(3, np.uint8), np.array([0, 2], np.int64))
    with pytest.raises(ValueError, match="labels"):
        Batch(["a"], [], np.zeros(3, np.uint8), np.array([0, 3], np.int64))
    with pytest.raises(ValueError, match="payloads"):
        Batch.of(["a", "b"], [1, 2], [b"x"])
    with pytest.raises(ValueError, match="batch size"):
        list(batched([], 0))
