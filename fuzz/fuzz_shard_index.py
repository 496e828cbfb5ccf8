"""The ``index.json`` of a shard set (s3-shards and fs shards), as read from storage."""

from common import fuzz, instrumented

with instrumented():
    from workbench.data import ShardInfo, read_index, write_index


def target(data: bytes) -> None:
    for info in read_index(data):
        assert isinstance(info.samples, int) and isinstance(info.bytes, int) and isinstance(info.name, str)


if __name__ == "__main__":
    fuzz("shard-index", target, [write_index([ShardInfo("shard-000000.tar", 3, 30720, "a", "b"),
                                              ShardInfo("shard-000001.tar", 1, 10240, "c", "c")])])
