"""Sources the unit and services tests share (tests/ is on sys.path through its conftest)."""

from __future__ import annotations

import dataclasses


class Wrapped:
    """Another source's samples, name and classes: subclasses change what its stream yields."""

    def __init__(self, inner) -> None:
        self.inner, self.name, self.classes = inner, inner.name, inner.classes

    def __len__(self) -> int:
        return len(self.inner)


class TwoSplits(Wrapped):
    """Every `every`-th sample (0, every, 2 x every, ...) in 'val'; `grouped`: after all the 'train' ones (so shard
    packers see one run per split), else where it stands."""

    def __init__(self, inner, every: int = 4, grouped: bool = True) -> None:
        super().__init__(inner)
        self.every, self.grouped = every, grouped
        self.splits = ["train", "val"]

    def __iter__(self):
        samples = enumerate(self.inner)
        if not self.grouped:
            yield from (dataclasses.replace(s, split="val") if not i % self.every else s for i, s in samples)
            return
        samples = list(samples)
        yield from (s for i, s in samples if i % self.every)
        yield from (dataclasses.replace(s, split="val") for i, s in samples if not i % self.every)
