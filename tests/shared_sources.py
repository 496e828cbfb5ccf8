"""Sources the unit and services tests share (tests/ is on sys.path through its conftest)."""

from __future__ import annotations

import dataclasses


class TwoSplits:
    """Every 4th sample in 'val', after the 'train' ones (so shard packers see one run per split)."""

    def __init__(self, inner) -> None:
        self.inner, self.name, self.classes = inner, inner.name, inner.classes
        self.splits = ["train", "val"]

    def __len__(self) -> int:
        return len(self.inner)

    def __iter__(self):
        samples = list(self.inner)
        yield from (s for i, s in enumerate(samples) if i % 4)
        yield from (dataclasses.replace(s, split="val") for i, s in enumerate(samples) if not i % 4)
