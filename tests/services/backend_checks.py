"""What the backend tests share: sources that break or stall in the middle of an ingest, Cassandra backends
whose keyspaces the `keyspaces` fixture (conftest.py) drops."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from workbench.backends import Backend, make_backend


class SourceDied(RuntimeError):
    """Raised by `DiesAfter` where its stream breaks."""


class Hooked:
    """The same source, calling `hook` before it yields sample `at` (a fault in the middle of an ingest)."""

    def __init__(self, inner, at: int, hook: Callable[[], None]) -> None:
        self.inner, self.at, self.hook = inner, at, hook
        self.name, self.classes = inner.name, inner.classes

    def __len__(self) -> int:
        return len(self.inner)

    def __iter__(self) -> Iterator:
        for i, sample in enumerate(self.inner):
            if i == self.at:
                self.hook()
            yield sample


class DiesAfter(Hooked):
    """The same source, but its stream breaks after `k` samples (a crash in the middle of an ingest)."""

    def __init__(self, inner, k: int) -> None:
        super().__init__(inner, k, self._die)
        self.k = k

    def _die(self) -> None:
        raise SourceDied(f"source died: stream broken after {self.k} samples")


def cassandra_backend(settings, keyspaces: list[str], dataset: str, **options) -> Backend:
    """A Cassandra backend whose keyspace the `keyspaces` fixture drops after the test."""
    b = make_backend("cassandra", settings, dataset, **options)
    keyspaces.append(b.keyspace)
    return b
