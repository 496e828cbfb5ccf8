"""`set_epoch` in the main process, seen by persistent DataLoader workers.

Why: with ``persistent_workers=True`` a DataLoader pickles its dataset into each worker once, at the first epoch.
A later ``dataset.set_epoch(e)`` in the main process changes the main copy only, so the workers would read
every epoch in the first epoch's order: the same shuffle each epoch, and no error. The datasets send each
epoch they are given through an `EpochChannel`, and a worker's copy applies what was sent since it last looked
when an iteration starts (and before a state is loaded, so the two keep the main process's order).

A small file, not a `multiprocessing.Value`: its name pickles at any time and a forked worker inherits it, so it
works under every start method (fork, forkserver, spawn). It is removed when the main copy is collected or the
process exits.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import weakref


def _write(path: str, sent: int, epoch: int) -> None:
    partial = f"{path}.{os.getpid()}"
    with open(partial, "w") as f:
        f.write(f"{sent} {epoch}")
    os.replace(partial, path)  # a reader sees the old line or the new one, never half of one


def _remove(path: str, owner: int) -> None:
    if os.getpid() != owner:
        return  # a forked worker collecting its inherited copy: the file is the owner's
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


class EpochChannel:
    """Epochs sent by the process that made the channel, received by its copies in other processes (pickled into
    them or inherited by fork)."""

    def __init__(self) -> None:
        self._owner = os.getpid()
        self._sent = 0  # epochs sent so far (the owner), or received so far (a copy)
        fd, self._path = tempfile.mkstemp(prefix="workbench-epoch-")
        os.close(fd)
        _write(self._path, 0, 0)
        weakref.finalize(self, _remove, self._path, self._owner)

    def send(self, epoch: int) -> None:
        """In the owning process: `epoch` is the one every copy's next `receive` returns (in a copy: nothing, its
        dataset applied the epoch itself)."""
        if os.getpid() != self._owner:
            return
        self._sent += 1
        _write(self._path, self._sent, epoch)

    def receive(self) -> int | None:
        """In a copy: the epoch the owner sent since this copy last looked, else None (and always None in the
        owner, whose dataset applied its epoch when it sent it)."""
        if os.getpid() == self._owner:
            return None
        try:
            with open(self._path) as f:
                sent, epoch = (int(word) for word in f.read().split())
        except (OSError, ValueError):
            return None  # the owner is gone, its file with it: this process is being shut down too
        if sent == self._sent:
            return None
        self._sent = sent
        return epoch


class FollowsSetEpoch:
    """Mixin for a torch dataset: `set_epoch` that also reaches the dataset's copies in persistent workers.

    Call `_start_epochs()` in `__init__` and `_follow_main()` where an iteration starts and before a state is
    loaded; `_reset_state()` forgets a loaded state when the epoch changes.
    """

    epoch: int = 0
    _epochs: EpochChannel

    def _start_epochs(self) -> None:
        self.epoch, self._epochs = 0, EpochChannel()

    def _reset_state(self) -> None:
        raise NotImplementedError

    def set_epoch(self, epoch: int) -> None:
        """Like DistributedSampler.set_epoch: the next iteration reads this epoch's order, here and in workers."""
        self._apply_epoch(epoch)
        self._epochs.send(epoch)

    def _apply_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self._reset_state()
        self.epoch = epoch

    def _follow_main(self) -> None:
        """In a persistent worker: the epoch the main process set since this copy last looked."""
        if (epoch := self._epochs.receive()) is not None:
            self._apply_epoch(epoch)
