"""A source whose first Spark task attempt breaks in the middle of its partition (the Spark ingest tests)."""

from __future__ import annotations

import sys
from collections.abc import Iterator


class TaskDied(RuntimeError):
    """Raised by `FailsFirstAttempt` in the first attempt of the task that reads sample `at`."""


class FailsFirstAttempt:
    """The same indexed source, except that sample `at` raises in a task's first attempt (the retry reads it)."""

    def __init__(self, inner, at: int) -> None:
        self.inner, self.at = inner, at
        self.name, self.classes = inner.name, inner.classes

    def __len__(self) -> int:
        return len(self.inner)

    def __iter__(self) -> Iterator:
        return (self.sample(i) for i in range(len(self)))

    def sample(self, i: int):
        from pyspark import TaskContext

        context = TaskContext.get()
        if i == self.at and context is not None and context.attemptNumber() == 0:
            raise TaskDied(f"task died at sample {i} (first attempt of partition {context.partitionId()})")
        return self.inner.sample(i)


def ship_by_value() -> None:
    """Spark workers cannot import tests/: this module travels with the pickled source instead."""
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
