"""A loader's resume state (workbench.loaders.resume) asserted directly, field by field (tests/mutation): the
loaders' tests reach it through whole epochs, which a mutant can outlast; the compat datasets rely on its
defaults (a state for a reader not built yet)."""

from __future__ import annotations

import pytest

from workbench.errors import WorkbenchError
from workbench.loaders.base import LoaderConfig
from workbench.loaders.resume import STATE_VERSION, Resume, check_state, make_state


def _config(**changes) -> LoaderConfig:
    return LoaderConfig(dataset="d", split="val", seed=3, shard_id=1, num_shards=2, **changes)


def test_a_state_for_a_reader_not_built_yet_is_the_start_of_its_epoch():
    state = make_state("fs", _config(), 1, 4, 7)
    assert state == {"version": STATE_VERSION, "loader": "fs", "epoch": 7, "position": 0, "done": False,
                     "reader": [5, 8], "order": {"dataset": "d", "split": "val", "seed": 3, "shuffle": True,
                                                 "ordered": True}}
    assert check_state("fs", state, _config(), 1, 4) == Resume(7, 0, False, None)


def test_an_out_of_order_state_lists_what_it_delivered():
    config = _config(ordered=False)
    state = make_state("fs", config, 0, 1, 2, position=2, done=True, delivered=("a", "b"))
    assert state["delivered"] == ["a", "b"] and make_state("fs", config, 0, 1, 2)["delivered"] == []
    resume = check_state("fs", state, config, 0, 1)
    assert resume == Resume(2, 2, True, ("a", "b")) and resume.skip == frozenset({"a", "b"})
    assert Resume(0, 0, False, None).skip == frozenset()


@pytest.mark.parametrize("state,message", [
    ([1], "loader 'fs': not a loader state of version 1 (got 'list'): pass what state_dict() returned"),
    ({"version": 2}, "loader 'fs': not a loader state of version 1 (got 2): pass what state_dict() returned"),
    ({"version": 1, "loader": "s3"}, "loader 'fs' cannot resume a state of loader 's3'"),
    ({"version": 1, "loader": "fs", "reader": [0, 1]},
     "loader 'fs': the state is reader 0 of 1 (ranks x DataLoader workers), this is reader 1 of 2: resume with "
     "the same ranks, shard_id and DataLoader workers"),
    ({"version": 1, "loader": "fs"},
     "loader 'fs': the state is reader ? of ? (ranks x DataLoader workers), this is reader 1 of 2: resume with "
     "the same ranks, shard_id and DataLoader workers"),
])
def test_a_state_that_is_not_this_readers_is_one_line(state, message):
    with pytest.raises(WorkbenchError) as info:
        check_state("fs", state, _config(), 0, 1)
    assert str(info.value) == message


def _state(**changes) -> dict:
    return {**make_state("fs", _config(), 0, 1, 4, position=9), **changes}


@pytest.mark.parametrize("state,message", [
    (_state(order={**_state()["order"], "seed": 4}),
     "loader 'fs': the state was saved with seed=4, this loader has seed=3: resume with the settings the state "
     "was saved with"),
    (_state(order=None), "loader 'fs': the state was saved with dataset=None, this loader has dataset='d'"),
    (_state(epoch="x"), "loader 'fs': a damaged state (ValueError: "),
    ({k: v for k, v in _state().items() if k != "done"},
     "loader 'fs': a damaged state (KeyError: 'done'): pass what state_dict() returned"),
    (_state(epoch=-1), "loader 'fs': a damaged state (epoch -1, position 9)"),
    (_state(position=-2), "loader 'fs': a damaged state (epoch 4, position -2)"),
])
def test_a_state_saved_otherwise_or_damaged_says_how(state, message):
    with pytest.raises(WorkbenchError) as info:
        check_state("fs", state, _config(), 0, 1)
    assert str(info.value).startswith(message)


def test_a_state_resumes_where_it_stopped():
    assert check_state("fs", _state(done=1), _config(), 0, 1) == Resume(4, 9, True, None)
    assert check_state("fs", _state(epoch="4", position=0), _config(), 0, 1) == Resume(4, 0, False, None)
