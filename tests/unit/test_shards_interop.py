"""Version-2 shard sets stay plain WebDataset tars: the ``webdataset`` library and DALI's ``fn.readers.webdataset``
read them, and give the ids and bytes our index-sliced reader gives. DALI's own indexer (wds2idx) finds every
member exactly where our index says it is."""

from __future__ import annotations

import gc
import json
import uuid
from pathlib import Path

import numpy as np
import pytest

from workbench.data import Item, SyntheticSource
from workbench.layouts.shards import ShardSet, fetch_items, read_split_index
from workbench.storage import DirStore

KINDS = {"classification": ("int", "cls"), "segmentation": ("blob", "png")}


@pytest.fixture(scope="module", params=list(KINDS))
def shard_set(request, tmp_path_factory) -> tuple[str, Path, list, dict[str, Item]]:
    """(kind, split folder, index, {uid: Item} as our sliced reader reads them) of a 40-sample v2 set."""
    kind = request.param
    label_type, _ = KINDS[kind]
    root = tmp_path_factory.mktemp(f"v2-{kind}")
    store = DirStore(root)
    source = SyntheticSource(40, seed=5, mean_kb=5, kind=kind, name=f"interop-{kind}")  # type: ignore[arg-type]
    ShardSet(store, maxsize=1e8, maxcount=8, workers=2, label_type=label_type).write(source, lambda n, b: None)
    assert json.loads((root / "train" / "index.json").read_bytes())["version"] == 2
    infos = read_split_index(store, "train", source.name)
    assert len(infos) == 5 and all(i.members is not None for i in infos)
    items = {i.key: i for info in infos for i in fetch_items(store, "train", info, label_type)}
    originals = {str(s.id): s for s in source}
    assert {k: (i.data, i.label) for k, i in items.items()} == {k: (s.data, s.label) for k, s in originals.items()}
    return kind, root / "train", infos, items


@pytest.mark.filterwarnings("ignore::ResourceWarning")  # webdataset 1.0 leaves local shard files to the GC
def test_webdataset_reads_a_v2_shard_set(shard_set) -> None:
    wds = pytest.importorskip("webdataset")
    kind, folder, infos, items = shard_set
    _, label_ext = KINDS[kind]
    got = list(wds.WebDataset([str(folder / i.name) for i in infos], shardshuffle=False, empty_check=False))
    gc.collect()
    assert len(got) == len(items)
    for sample in got:
        item = items[sample["uid"].decode()]
        assert sample["__key__"] == uuid.UUID(item.key).hex
        assert sample["jpg"] == item.data
        assert (int(sample["cls"]) if label_ext == "cls" else sample["png"]) == item.label


def _dali_index(shard: Path) -> list[list[tuple[str, int, int]]]:
    """DALI's index of a tar (its wds2idx tool, which parses the tar): per sample, (ext, data offset, size)."""
    import wds2idx  # ships with the DALI wheel

    index = shard.with_suffix(".idx")
    creator = wds2idx.IndexCreator(str(shard), str(index), verbose=False)
    creator.create_index()
    creator.close()
    lines = index.read_text().splitlines()
    assert lines[0].split()[0] == "v1.2"
    rows = []
    for line in lines[1:]:
        parts = line.split()
        rows.append([(parts[i], int(parts[i + 1]), int(parts[i + 2])) for i in range(0, len(parts), 4)])
    return rows


def test_dali_reads_a_v2_shard_set(shard_set) -> None:
    pytest.importorskip("nvidia.dali", reason="DALI is the optional 'dali' extra")
    from nvidia.dali import fn, pipeline_def

    kind, folder, infos, items = shard_set
    _, label_ext = KINDS[kind]
    paths = [str(folder / i.name) for i in infos]
    for info in infos:  # DALI's indexer and ours agree on every member
        ours = [[(m.ext, m.offset, m.size) for m in span.members] for span in info.members]
        assert _dali_index(folder / info.name) == ours

    batch, total = 16, len(items)

    @pipeline_def(batch_size=batch, num_threads=1, device_id=None)
    def pipe():
        return tuple(fn.readers.webdataset(paths=paths, index_paths=[str(Path(p).with_suffix(".idx")) for p in paths],
                                           ext=["jpg", label_ext, "uid"], missing_component_behavior="error",
                                           name="reader"))

    p = pipe()
    p.build()
    assert p.reader_meta("reader")["epoch_size"] == total
    got = []
    for _ in range(-(-total // batch)):
        images, labels, ids = p.run()
        got += [(bytes(np.array(ids.at(i))).decode(), bytes(np.array(images.at(i))), bytes(np.array(labels.at(i))))
                for i in range(len(images))]
    got = got[:total]  # the last batch wraps around into the next epoch
    assert {g[0] for g in got} == set(items)
    for key, image, label in got:
        assert image == items[key].data
        assert (int(label) if label_ext == "cls" else label) == items[key].label
