"""What the backend tests share: a source that dies in the middle of an ingest, like a crashed reader."""

from __future__ import annotations


class SourceDied(RuntimeError):
    """Raised by `DiesAfter` where its stream breaks."""


class DiesAfter:
    """The same source, but its stream breaks after `k` samples (a crash in the middle of an ingest)."""

    def __init__(self, inner, k: int) -> None:
        self.inner, self.k = inner, k
        self.name, self.classes = inner.name, inner.classes

    def __len__(self) -> int:
        return len(self.inner)

    def __iter__(self):
        for i, sample in enumerate(self.inner):
            if i == self.k:
                raise SourceDied(f"source died: stream broken after {self.k} samples")
            yield sample
