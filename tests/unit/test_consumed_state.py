"""ConsumedState: the state a read-ahead pipeline saves is the one recorded with the last element taken."""

from __future__ import annotations

import threading

import pytest

from workbench.loaders.consumed import ConsumedState


def _state(position: int, done: bool = False) -> dict:
    return {"epoch": 0, "position": position, "done": done}


def test_the_state_follows_the_consumer_not_the_producer():
    consumed = ConsumedState(_state(0))
    for position in (5, 10, 15, 20):  # the producer ran 4 elements ahead
        consumed.produced(_state(position))
    assert consumed.state_dict() == _state(0)
    consumed.taken()
    assert consumed.state_dict() == _state(5)
    consumed.taken(2)
    assert consumed.state_dict() == _state(15)


def test_the_end_of_the_iteration_is_the_producers_final_state():
    consumed = ConsumedState(_state(0))
    consumed.produced(_state(3))
    consumed.finished(_state(3, done=True))
    consumed.taken()
    assert not consumed.state_dict()["done"]
    consumed.exhausted()
    assert consumed.state_dict() == _state(3, done=True)


def test_a_restart_drops_what_was_produced_and_never_taken():
    consumed = ConsumedState(_state(0))
    consumed.produced(_state(4))
    consumed.restart(_state(8))
    assert consumed.state_dict() == _state(8)
    with pytest.raises(RuntimeError, match="more elements than were produced"):
        consumed.taken()


def test_the_returned_state_is_a_copy():
    consumed = ConsumedState(_state(0))
    consumed.state_dict()["position"] = 99
    assert consumed.state_dict()["position"] == 0


def test_a_producer_thread_and_a_consumer_agree():
    consumed, ready = ConsumedState(_state(0)), threading.Semaphore(0)

    def produce() -> None:
        for position in range(1, 1001):
            consumed.produced(_state(position))
            ready.release()

    thread = threading.Thread(target=produce)
    thread.start()
    for position in range(1, 1001):
        ready.acquire()
        consumed.taken()
        assert consumed.state_dict()["position"] == position
    thread.join()
