"""A WebDataset tar shard as the s3-shards loader, `verify` and the fs layout read it (`read_shard`, `sample_item`)."""

from common import fuzz, instrumented, tiny_samples

with instrumented():
    from workbench.data import check_entries, pack_shards, read_shard
    from workbench.errors import WorkbenchError
    from workbench.layouts.shards import sample_item


def target(data: bytes) -> None:
    for entries in read_shard(data, "fuzz.tar"):
        assert isinstance(entries["__key__"], str)
        reason = check_entries(entries)
        assert reason is None or isinstance(reason, str)
        for label_type in ("int", "blob", "none", "any"):  # what every shard reader makes of the entries
            try:
                item = sample_item({**entries, "__url__": "fuzz.tar"}, label_type)
            except WorkbenchError as exc:
                assert "\n" not in str(exc), repr(exc)
                continue
            assert isinstance(item.key, str) and isinstance(item.data, bytes)


if __name__ == "__main__":
    fuzz("tar-shard", target, [data for _, data in pack_shards(tiny_samples(3), maxcount=2)])
