"""A WebDataset tar shard as the s3-shards loader, `verify` and the fs layout read it (`read_shard`)."""

from common import fuzz, instrumented, tiny_samples

with instrumented():
    from workbench.data import check_entries, pack_shards, read_shard


def target(data: bytes) -> None:
    for entries in read_shard(data, "fuzz.tar"):
        assert isinstance(entries["__key__"], str)
        reason = check_entries(entries)
        assert reason is None or isinstance(reason, str)


if __name__ == "__main__":
    fuzz("tar-shard", target, [data for _, data in pack_shards(tiny_samples(3), maxcount=2)])
