"""A split file (JSON: dataset, seed, ratios, balance, ids per split), read with `SplitFile.load`."""

import json
import uuid

from common import ScratchFile, fuzz, instrumented

with instrumented():
    from workbench.data import SplitFile, make_split, sample_id

SCRATCH = ScratchFile("split")


def target(data: bytes) -> None:
    split = SplitFile.load(SCRATCH.write(data))
    assert all(isinstance(i, uuid.UUID) for ids in split.splits.values() for i in ids)


if __name__ == "__main__":
    seed = make_split([(sample_id("fuzz", str(i)), i % 3) for i in range(12)], ratios=(2, 1), dataset="fuzz")
    weighted = make_split([(sample_id("fuzz", str(i)), i % 2) for i in range(6)], balance=[1, 1], dataset="w")
    fuzz("split-file", target, [json.dumps(seed.to_json()).encode(), json.dumps(weighted.to_json()).encode()])
