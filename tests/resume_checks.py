"""What the resume tests share (tests/ is on sys.path through its conftest): stop a reader, save, start afresh."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def collated_keys(batch: dict) -> list:
    """The keys of one collated batch (what a DataLoader over our datasets yields)."""
    return list(batch["key"])


def interrupted(make: Callable[[], Any], stop: int,
                key: Callable[[Any], Any] = collated_keys) -> tuple[list, dict, list]:
    """Read `stop` elements of a fresh `make()`, save its state_dict, drop it, and read the rest with another
    fresh `make()` that loaded the state: (head, state, rest), each element as `key` gives it."""
    first, head = make(), []
    for element in first:
        head.append(key(element))
        if len(head) == stop:
            break
    state = first.state_dict()
    del first
    again = make()
    again.load_state_dict(state)
    return head, state, [key(element) for element in again]
