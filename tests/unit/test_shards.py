"""WebDataset shards: limits, completeness, byte-exact round trips, determinism, readability."""

from __future__ import annotations

import gc
import io
import itertools
import tarfile
import uuid
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from workbench.data import SyntheticSource
from workbench.data.sample import PNG_MAGIC, Sample, decode_multilabel, encode_multilabel
from workbench.data.shards import (  # the module under test
    ShardInfo,
    check_entries,
    pack_shards,
    read_index,
    read_shard,
    sample_key,
    sample_to_entries,
    write_index,
)
from workbench.errors import WorkbenchError


@pytest.fixture(scope="module")
def samples() -> list[Sample]:
    return list(SyntheticSource(30, seed=4, mean_kb=6))


def _entry_names(shard: bytes) -> list[str]:
    with tarfile.open(fileobj=io.BytesIO(shard)) as tar:
        return tar.getnames()


def test_entries_per_label_kind() -> None:
    sid = uuid.UUID(int=7)
    cls = sample_to_entries(Sample(id=sid, name="c/x.jpg", label=3, data=b"\xff\xd8\xffimg"))
    assert list(cls) == ["jpg", "cls", "uid", "sum"]
    assert cls["cls"] == b"3" and cls["uid"] == str(sid).encode()
    mask = PNG_MAGIC + b"mask"
    seg = sample_to_entries(Sample(id=sid, name="x.jpg", label=mask, data=b"\xff\xd8\xffimg"))
    assert list(seg) == ["jpg", "png", "uid", "sum"] and seg["png"] == mask
    png_img = sample_to_entries(Sample(id=sid, name="x.png", label=mask, data=PNG_MAGIC + b"img"))
    assert list(png_img) == ["png", "seg.png", "uid", "sum"]
    vec = encode_multilabel(np.array([1, 0, 1], dtype=np.uint8))
    ml = sample_to_entries(Sample(id=sid, name="x.jpg", label=vec, data=b"\xff\xd8\xffimg"))
    assert list(ml) == ["jpg", "npy", "uid", "sum"]
    none = sample_to_entries(Sample(id=sid, name="x.jpg", label=None, data=b"\xff\xd8\xffimg"))
    assert list(none) == ["jpg", "uid", "sum"]
    assert sample_key(Sample(id=sid, name="x", label=None, data=b"")) == sid.hex
    assert "." not in sid.hex


def test_maxcount_is_respected(samples: list[Sample]) -> None:
    shards = list(pack_shards(samples, maxcount=7))
    assert [info.samples for info, _ in shards] == [7, 7, 7, 7, 2]
    assert [info.name for info, _ in shards][:2] == ["shard-000000.tar", "shard-000001.tar"]


def test_maxsize_is_respected(samples: list[Sample]) -> None:
    maxsize = 60_000
    shards = list(pack_shards(samples, maxsize=maxsize))
    assert len(shards) > 2
    for info, data in shards:
        assert info.bytes == len(data)
        assert len(data) <= maxsize or info.samples == 1
    # Closing is not premature: the next sample would not have fit.
    for (info, _), (_, nxt) in itertools.pairwise(shards):
        first_next = next(read_shard(nxt))
        extra = sum(512 + -(-len(v) // 512) * 512 for k, v in first_next.items() if k != "__key__")
        assert info.bytes - 1024 + extra > maxsize - 10240


def test_oversized_sample_gets_its_own_shard(samples: list[Sample]) -> None:
    shards = list(pack_shards(samples[:3], maxsize=1000))
    assert [info.samples for info, _ in shards] == [1, 1, 1]


def test_every_sample_once_and_byte_identical(samples: list[Sample]) -> None:
    by_key = {sample_key(s): s for s in samples}
    seen: Counter[str] = Counter()
    shards = list(pack_shards(samples, maxsize=50_000, maxcount=8))
    for info, data in shards:
        got = list(read_shard(data, info.name))
        assert len(got) == info.samples
        assert got[0]["__key__"] == info.first_key and got[-1]["__key__"] == info.last_key
        for entries in got:
            key = entries.pop("__key__")
            seen[key] += 1
            assert entries == sample_to_entries(by_key[key])
            assert check_entries({"__key__": key, **entries}) is None
    assert seen == Counter(list(by_key))
    order = [n for _, d in shards for n in _entry_names(d)]
    assert [n.split(".", 1)[1] for n in order[:4]] == ["jpg", "cls", "uid", "sum"]  # contiguous, in order


def test_check_entries_detects_corruption(samples: list[Sample]) -> None:
    entries = {"__key__": "k", **sample_to_entries(samples[0])}
    entries["jpg"] = entries["jpg"][:-1] + b"\x00"
    assert "checksum" in (check_entries(entries) or "")


def test_shards_are_deterministic(samples: list[Sample]) -> None:
    a = list(pack_shards(samples, maxcount=10))
    b = list(pack_shards(list(SyntheticSource(30, seed=4, mean_kb=6)), maxcount=10))
    assert a == b
    with tarfile.open(fileobj=io.BytesIO(a[0][1])) as tar:
        m = tar.getmembers()[0]
        assert (m.mtime, m.uid, m.gid, m.uname, m.gname, m.mode) == (0, 0, 0, "", "", 0o444)


def test_segmentation_and_multilabel_round_trip() -> None:
    for kind in ("segmentation", "multilabel"):
        src = SyntheticSource(3, num_classes=4, kind=kind, mean_kb=5)  # type: ignore[arg-type]
        originals = {sample_key(s): s for s in src}
        [(_, data)] = list(pack_shards(src))
        for entries in read_shard(data):
            s = originals[entries["__key__"]]
            if kind == "segmentation":
                assert entries["png"] == s.label
            else:
                assert isinstance(s.label, bytes)
                np.testing.assert_array_equal(decode_multilabel(entries["npy"]), decode_multilabel(s.label))


def test_index_round_trip() -> None:
    infos = [ShardInfo("a.tar", 3, 10240, "k1", "k3"), ShardInfo("b.tar", 1, 20480, "k4", "k4")]
    assert read_index(write_index(infos)) == infos
    for bad in (b"{", b'{"format": "x"}', b'{"format": "workbench-shards", "shards": [{"name": 1}]}'):
        with pytest.raises(WorkbenchError, match="shard index"):
            read_index(bad)


def test_truncated_shard_raises(samples: list[Sample]) -> None:
    [(info, data)] = list(pack_shards(samples[:4]))
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        sizes = [m.size for m in tar.getmembers()]
    member_boundary = sum(512 + -(-n // 512) * 512 for n in sizes[:4])  # after the first sample
    for cut in (len(data) // 2, 700, member_boundary, len(data) - 10240):
        with pytest.raises(WorkbenchError, match=r"shard-000000\.tar"):
            list(read_shard(data[:cut], info.name))


def _shard_files(samples: list[Sample], folder: Path) -> list[str]:
    """The samples packed 12 to a shard, each shard a file in `folder`: the files' paths, in order."""
    paths = []
    for info, data in pack_shards(samples, maxcount=12):
        (folder / info.name).write_bytes(data)
        paths.append(str(folder / info.name))
    return paths


@pytest.mark.filterwarnings("ignore::ResourceWarning")  # webdataset 1.0 leaves local shard files to the GC
def test_readable_by_webdataset(samples: list[Sample], tmp_path: Path) -> None:
    wds = pytest.importorskip("webdataset")
    urls = _shard_files(samples, tmp_path)
    by_key = {sample_key(s): s for s in samples}
    got = list(wds.WebDataset(urls, shardshuffle=False, empty_check=False))
    gc.collect()  # close its leaked file objects while the warning filter above applies
    assert [g["__key__"] for g in got] == [sample_key(s) for s in samples]
    for g in got:
        s = by_key[g["__key__"]]
        assert g["jpg"] == s.data
        assert int(g["cls"]) == s.label
        assert g["uid"].decode() == str(s.id)


@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_webdataset_default_decoding_works_on_our_shards(samples: list[Sample], tmp_path: Path) -> None:
    """webdataset's `.decode()` turns `.id` entries into ints; our uuid entry must not trip it."""
    wds = pytest.importorskip("webdataset")
    urls = _shard_files(samples, tmp_path)
    dataset = wds.WebDataset(urls, shardshuffle=False, empty_check=False)
    decoded = list(dataset.decode("pil").to_tuple("jpg", "cls", "uid"))
    gc.collect()
    assert len(decoded) == len(samples)
    image, label, uid = decoded[0]
    assert image.size == (samples[0].width, samples[0].height) and label == samples[0].label
    assert uid.decode() == str(samples[0].id)
