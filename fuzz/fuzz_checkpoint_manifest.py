"""The manifest of an `IgniteCheckpoint` (JSON in a cache entry), as read back before a restore."""

import json

from common import fuzz, instrumented

with instrumented():
    from workbench.checkpoints.ignite import FORMAT, _parse


def target(data: bytes) -> None:
    doc = _parse(data, "ckpt", "cache")
    assert doc is None or isinstance(doc, dict)


if __name__ == "__main__":
    fuzz("checkpoint-manifest", target, [json.dumps({"format": FORMAT, "size": 3, "chunks": 1}).encode()])
