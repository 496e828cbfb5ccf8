"""EpochChannel: set_epoch's epochs reach a dataset's copies in other processes (persistent DataLoader workers)."""

from __future__ import annotations

import gc
import multiprocessing
import os

import pytest

from workbench.loaders.epoch_channel import EpochChannel


def _answer(channel: EpochChannel, conn) -> None:
    """In the child: one `receive()` per request, until told to stop (and then let its copy be collected)."""
    while conn.recv() == "receive":
        conn.send(channel.receive())
    del channel
    gc.collect()
    conn.send(None)


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_a_copy_in_another_process_receives_each_sent_epoch_once(start):
    channel = EpochChannel()
    context = multiprocessing.get_context(start)
    here, there = context.Pipe()
    child = context.Process(target=_answer, args=(channel, there))
    child.start()
    try:
        def ask():
            here.send("receive")
            assert here.poll(30), "the child did not answer"
            return here.recv()

        assert ask() is None  # nothing sent since the copy was made
        channel.send(3)
        assert ask() == 3
        assert ask() is None  # once
        channel.send(3)
        assert ask() == 3  # sent again: news again (the dataset decides whether it changes anything)
        channel.send(4)
        channel.send(5)
        assert ask() == 5  # the latest
        assert channel.receive() is None  # the owner applied its epochs when it sent them
        here.send("stop")
        assert here.poll(30) and here.recv() is None
        assert os.path.exists(channel._path)  # a copy collected elsewhere leaves the owner's file
    finally:
        child.join(30)
        if child.is_alive():
            child.kill()


def test_the_file_goes_with_the_owner():
    channel = EpochChannel()
    path = channel._path
    assert os.path.exists(path)
    del channel
    gc.collect()
    assert not os.path.exists(path)
