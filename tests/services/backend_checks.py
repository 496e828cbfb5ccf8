"""What the backend tests share: sources that break or stall in the middle of an ingest, the re-ingest and resume
checks every backend passes, Cassandra backends whose keyspaces the `keyspaces` fixture (conftest.py) drops."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from shared_sources import Wrapped

from workbench.backends import Backend, make_backend
from workbench.errors import WorkbenchError
from workbench.ingest import ingest, verify


class SourceDied(RuntimeError):
    """Raised by `DiesAfter` where its stream breaks."""


class Hooked(Wrapped):
    """The same source, calling `hook` before it yields sample `at` (a fault in the middle of an ingest)."""

    def __init__(self, inner, at: int, hook: Callable[[], None]) -> None:
        super().__init__(inner)
        self.at, self.hook = at, hook

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


def check_reingest_writes_nothing(source, backend: Backend, n: int) -> None:
    """A second ingest of the same source finds all `n` samples stored and writes none."""
    ingest(source, backend, progress=False)
    again = ingest(source, backend, progress=False)
    assert (again.samples, again.bytes, again.already_stored) == (0, 0, n)
    assert sum(1 for _ in backend.scan()) == n


def check_resume_after_interrupted_ingest(source, backend: Backend, dies_after: int, stored: int, n: int) -> None:
    """An ingest whose source breaks after `dies_after` samples leaves `stored` of them; the next ingest stores
    the other `n - stored`, each sample once."""
    with pytest.raises(SourceDied):
        ingest(DiesAfter(source, dies_after), backend, progress=False)
    assert len(backend.stored_ids()) == stored

    resumed = ingest(source, backend, progress=False)
    assert (resumed.already_stored, resumed.samples) == (stored, n - stored)
    report = verify(source, backend)
    assert report.ok and report.found == n  # no duplicates, nothing missing


def check_verify_catches_changed_and_deleted(source, backend: Backend, corrupt: Callable[[Any, Any], None]) -> None:
    """After an ingest, `corrupt(changed, deleted)` flips a byte of one sample and deletes another behind the
    backend's back: verify names both, and nothing else."""
    ingest(source, backend, progress=False)
    changed, deleted = list(source)[3], list(source)[7]
    corrupt(changed, deleted)
    report = verify(source, backend)
    assert not report.ok
    assert report.mismatched == [changed.name]
    assert report.missing == [deleted.name]
    assert report.extra == []


def check_oversized_sample_names_the_sample(source, backend: Backend, service: str) -> None:
    """A sample over the backend's max_sample_bytes stops the ingest with one error naming it and `service`."""
    first = next(iter(source))
    with pytest.raises(WorkbenchError, match=f"sample {first.name} is {len(first.data)} bytes, over the {service}"):
        ingest(source, backend, progress=False)
