"""`in_flight_collected`: the window driver for clients that submit without waiting and collect in batches.

The client here finishes requests in an order the test chooses (no threads, no sleeping), so ordering, the
window's bound, timeouts and cancellation are checked exactly.
"""

from __future__ import annotations

import random

import pytest

from workbench.concurrency import AutoWindow, in_flight_collected


class ScriptedClient:
    """Finishes outstanding requests `per_collect` at a time, in a seeded random order; counts what is outstanding."""

    def __init__(self, per_collect: int = 3, seed: int = 0, stall: bool = False) -> None:
        self.outstanding: dict[int, str] = {}
        self.most_outstanding = 0
        self.per_collect, self.stall = per_collect, stall
        self.rng = random.Random(seed)
        self.cancelled = False
        self.submitted: list[str] = []

    def submit(self, token: int, key: str) -> None:
        assert token not in self.outstanding
        self.outstanding[token] = key
        self.submitted.append(key)
        self.most_outstanding = max(self.most_outstanding, len(self.outstanding))

    def collect(self, timeout_s: float) -> list[tuple[int, str]]:
        if self.stall:
            return []
        tokens = self.rng.sample(sorted(self.outstanding), min(self.per_collect, len(self.outstanding)))
        return [(token, f"got {self.outstanding.pop(token)}") for token in tokens]

    def cancel(self) -> None:
        self.cancelled = True
        self.outstanding.clear()


KEYS = [f"k{i}" for i in range(50)]


def test_in_order_every_key_once_in_submission_order():
    client = ScriptedClient(per_collect=4)
    got = list(in_flight_collected(KEYS, client, 8))
    assert got == [(key, f"got {key}") for key in KEYS]
    assert client.most_outstanding <= 8 and not client.cancelled


def test_out_of_order_every_key_once_as_they_finish():
    client = ScriptedClient(per_collect=4, seed=3)
    got = list(in_flight_collected(KEYS, client, 8, ordered=False))
    assert sorted(got) == sorted((key, f"got {key}") for key in KEYS)
    assert [key for key, _ in got] != KEYS  # finished out of order, handed over that way
    assert client.most_outstanding <= 8


def test_results_held_for_order_count_against_the_window():
    """In order, a finished result waiting for an older one still holds its place: memory stays bounded."""
    client = ScriptedClient(per_collect=1, seed=1)
    results = in_flight_collected(KEYS, client, 5)
    held_plus_outstanding = []
    for _ in results:
        held_plus_outstanding.append(len(client.submitted) - len(held_plus_outstanding))  # not yet handed over
    assert max(held_plus_outstanding) <= 5


def test_request_maps_each_key_to_what_is_submitted():
    client = ScriptedClient()
    got = list(in_flight_collected([1, 2, 3], client, 2, request=lambda n: f"object-{n}"))
    assert got == [(1, "got object-1"), (2, "got object-2"), (3, "got object-3")]


def test_nothing_finishing_raises_timeout_naming_the_wait():
    with pytest.raises(TimeoutError, match=r"none of 4 requests in flight finished within 0.5s"):
        list(in_flight_collected(KEYS, ScriptedClient(stall=True), 4, timeout_s=0.5))


def test_closing_early_cancels_what_is_outstanding():
    client = ScriptedClient()
    results = in_flight_collected(KEYS, client, 8)
    next(results)
    results.close()
    assert client.cancelled and len(client.submitted) < len(KEYS)


def test_an_auto_window_sees_every_completion_and_widens():
    window = AutoWindow(start=2, cap=32)
    got = list(in_flight_collected(KEYS * 20, ScriptedClient(per_collect=8), window))
    assert len(got) == len(KEYS) * 20
    assert window.history[0] == 2 and max(window.history) > 2
