"""Index-sliced shards on the real MinIO, through the `Store` interface only: whole-shard GETs and ranged GETs of
some samples give the Items tar parsing gives; a replaced or shortened shard is an error naming it."""

from __future__ import annotations

import uuid

import pytest

from workbench.backends.registry import make_backend
from workbench.data import SyntheticSource, read_shard
from workbench.errors import WorkbenchError
from workbench.ingest import ingest
from workbench.layouts.shards import fetch_items, fetch_shard, read_split_index, sample_item

pytestmark = pytest.mark.services


@pytest.fixture(scope="module")
def shard_set(stack, tmp_path_factory):
    settings = stack.model_copy(update={"state_dir": tmp_path_factory.mktemp("state")})
    source = SyntheticSource(24, mean_kb=12, name=f"sliced-{uuid.uuid4().hex[:6]}")
    backend = make_backend("s3-shards", settings, source.name, maxcount=8, workers=2)
    ingest(source, backend, progress=False)
    yield backend, source
    backend.drop()


def test_whole_and_ranged_reads_give_what_parsing_gives(shard_set) -> None:
    backend, source = shard_set
    store = backend.store
    infos = read_split_index(store, "train", source.name)
    assert len(infos) == 3 and all(info.members is not None for info in infos)
    originals = {str(s.id): s for s in source}
    for info in infos:
        data = fetch_shard(store, "train", info)
        parsed = [sample_item({**e, "__url__": f"{store.where}/train/{info.name}"}, "int") for e in read_shard(data)]
        assert fetch_items(store, "train", info, "int") == parsed
        picked = [7, 2, 3, 5]
        assert fetch_items(store, "train", info, "int", which=picked) == [parsed[i] for i in picked]
        for item in parsed:
            assert (item.data, item.label) == (originals[item.key].data, originals[item.key].label)


def test_a_changed_shard_is_an_error_naming_it(shard_set) -> None:
    backend, source = shard_set
    store = backend.store
    info = read_split_index(store, "train", source.name)[1]
    key = f"train/{info.name}"
    original = store.get(key)[0]
    try:
        store.put(key, original[:-512])
        for which in (None, [0, 1]):
            with pytest.raises(WorkbenchError, match=r"shard .*shard-000001\.tar: corrupt or truncated"):
                fetch_items(store, "train", info, "int", which=which)
        damaged = bytearray(original)
        span = info.members[3]
        damaged[span.start + 130] ^= 0x01  # the size field of the sample's first header
        store.put(key, bytes(damaged))
        for which in (None, [3], [2, 3, 4]):
            with pytest.raises(WorkbenchError, match=rf"shard .*shard-000001\.tar: corrupt .*byte {span.start}"):
                fetch_items(store, "train", info, "int", which=which)
        assert len(fetch_items(store, "train", info, "int", which=[0, 7])) == 2  # the samples around it are fine
    finally:
        store.put(key, original)
