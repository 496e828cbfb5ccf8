"""The filesystem backend, both layouts: no services needed, everything under tmp_path."""

from __future__ import annotations

import io
import json
import tarfile
import uuid

import pytest
from backend_checks import DiesAfter as Interrupted

from workbench.backends.base import storage_name
from workbench.backends.fs import FilesystemBackend
from workbench.backends.registry import make_backend
from workbench.config import Settings
from workbench.data import ImageFolderSource, SyntheticSource, read_index
from workbench.errors import WorkbenchError
from workbench.ingest import ingest, verify

LAYOUTS = ["imagefolder", "shards"]


@pytest.fixture
def settings(tmp_path) -> Settings:
    return Settings(state_dir=tmp_path / "state", s3_access_key=None, s3_secret_key=None)


def _backend(settings, source, layout, **options) -> FilesystemBackend:
    if layout == "shards":
        options.setdefault("maxcount", 10)
    return make_backend("fs", settings, source.name, layout=layout, **options)


def _source(count=60, **kwargs):
    return SyntheticSource(count, mean_kb=20, name=f"fs-{uuid.uuid4().hex[:6]}", **kwargs)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_round_trip_byte_for_byte(settings, layout):
    source = _source()
    backend = _backend(settings, source, layout)
    assert backend.root == settings.state_dir / "fs" / storage_name(source.name)
    summary = ingest(source, backend, progress=False)
    assert summary.samples == 60 and summary.bytes == sum(len(s.data) for s in source)
    report = verify(source, backend)
    assert report.ok and report.found == 60, report
    expected = {s.id: s for s in source}
    stored = list(backend.scan())
    assert len(stored) == 60
    for s in stored:
        assert (s.data, s.label, s.split) == (expected[s.id].data, expected[s.id].label, "train")
    assert not list(backend.root.rglob("*.wbtmp"))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_reingest_writes_nothing(settings, layout):
    source = _source()
    backend = _backend(settings, source, layout)
    ingest(source, backend, progress=False)
    before = {p: p.stat().st_mtime_ns for p in backend.root.rglob("*")}
    summary = ingest(source, backend, progress=False)
    assert (summary.samples, summary.already_stored) == (0, 60)
    assert {p: p.stat().st_mtime_ns for p in backend.root.rglob("*")} == before


@pytest.mark.parametrize("layout", LAYOUTS)
def test_resume_after_interrupted_ingest(settings, layout):
    source = _source(80)
    backend = _backend(settings, source, layout)
    samples = list(source)
    with pytest.raises(RuntimeError, match="source died"):
        ingest(Interrupted(source, 35), backend, progress=False)
    done = 35 if layout == "imagefolder" else 30  # shards: the 4th shard was still being packed
    assert backend.stored_ids() == {s.id for s in samples[:done]}
    shards_before = {p: p.read_bytes() for p in backend.root.glob("train/shard-*.tar")}
    summary = ingest(source, backend, progress=False)
    assert (summary.samples, summary.already_stored) == (80 - done, done)
    report = verify(source, backend)
    assert report.ok and report.found == 80, report
    for path, data in shards_before.items():
        assert path.read_bytes() == data
    if layout == "shards":
        index = read_index((backend.root / "train" / "index.json").read_bytes())
        assert [i.name for i in index] == [f"shard-{n:06d}.tar" for n in range(8)]
        assert all((backend.root / "train" / i.name).stat().st_size == i.bytes for i in index)


def test_imagefolder_layout_manifest_and_imagefolder_reader(settings):
    source = _source()
    backend = _backend(settings, source, "imagefolder")
    ingest(source, backend, progress=False)
    samples = list(source)
    for s in samples:
        assert (backend.root / "train" / s.name).read_bytes() == s.data
    manifest = (backend.root / "train" / "manifest.txt").read_text().splitlines()
    assert manifest == sorted(f"{s.name} {s.label}" for s in samples)
    # The split folder is a torchvision ImageFolder: the same images and classes come back.
    again = ImageFolderSource(backend.root / "train", name=source.name)
    assert {s.id: (s.data, again.classes[s.label]) for s in again} == {
        s.id: (s.data, s.name.split("/")[0]) for s in samples}


def test_imagefolder_blob_labels_in_sidecars(settings):
    source = _source(40, kind="multilabel")
    backend = _backend(settings, source, "imagefolder", label_type="blob")
    ingest(source, backend, progress=False)
    assert verify(source, backend).ok
    for s in source:
        assert (backend.root / "train" / f"{s.name}.label").read_bytes() == s.label
    assert {s.id: s.label for s in backend.scan()} == {s.id: s.label for s in source}
    lines = (backend.root / "train" / "manifest.txt").read_text().splitlines()
    assert all(line.split(" ") == [line.split(" ")[0], line.split(" ")[0] + ".label"] for line in lines)


def test_shards_blob_labels_and_no_labels(settings):
    source = _source(40, kind="segmentation")
    backend = _backend(settings, source, "shards", label_type="blob")
    ingest(source, backend, progress=False)
    assert {s.id: s.label for s in backend.scan()} == {s.id: s.label for s in source}
    plain = _backend(settings, source, "shards", label_type="none", root=settings.state_dir / "nolabels")
    ingest(source, plain, progress=False)
    assert verify(source, plain).ok
    assert all(s.label is None for s in plain.scan())


def test_label_type_mismatch_is_a_clear_error(settings):
    source = _source(40, kind="segmentation")
    for layout in LAYOUTS:
        with pytest.raises(WorkbenchError, match="has a bytes label but label_type is int"):
            ingest(source, _backend(settings, source, layout), progress=False)


def _flip_image_byte(path) -> str:
    """Change one byte in the middle of the first image of a shard file; returns the sample's key."""
    data = bytearray(path.read_bytes())
    with tarfile.open(fileobj=io.BytesIO(bytes(data))) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith(".jpg"))
    data[member.offset_data + member.size // 2] ^= 0x01
    path.write_bytes(bytes(data))
    return member.name.split(".")[0]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_verify_catches_changed_and_deleted(settings, layout):
    source = _source(40)
    backend = _backend(settings, source, layout)
    ingest(source, backend, progress=False)
    samples = list(source)
    names = {s.id.hex: s.name for s in samples}
    if layout == "imagefolder":
        changed, deleted = samples[5], samples[9]
        path = backend.root / "train" / changed.name
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x01
        path.write_bytes(bytes(data))
        (backend.root / "train" / deleted.name).unlink()
        changed_name, missing = changed.name, [deleted.name]
    else:
        changed_name = names[_flip_image_byte(backend.root / "train" / "shard-000000.tar")]
        (backend.root / "train" / "shard-000003.tar").unlink()
        missing = [s.name for s in samples[30:40]]
    report = verify(source, backend)
    assert report.mismatched == [changed_name]
    assert sorted(report.missing) == sorted(missing)
    ingest(source, backend, progress=False)  # puts the lost samples back
    report = verify(source, backend)
    assert report.missing == [] and report.mismatched == [changed_name]


def test_shards_maxcount_and_maxsize(settings):
    source = _source(60)
    by_count = _backend(settings, source, "shards", maxcount=7, root=settings.state_dir / "count")
    ingest(source, by_count, progress=False)
    index = read_index((by_count.root / "train" / "index.json").read_bytes())
    assert [i.samples for i in index] == [7] * 8 + [4]
    maxsize = 80_000
    by_size = _backend(settings, source, "shards", maxsize=maxsize, maxcount=1000, root=settings.state_dir / "size")
    ingest(source, by_size, progress=False)
    assert verify(source, by_size).ok
    index = read_index((by_size.root / "train" / "index.json").read_bytes())
    assert len(index) > 10 and sum(i.samples for i in index) == 60
    for info in index:
        size = (by_size.root / "train" / info.name).stat().st_size
        assert size == info.bytes
        assert size <= maxsize or info.samples == 1


def test_shards_records_and_webdataset_reader(settings):
    wds = pytest.importorskip("webdataset")
    source = _source(50)
    backend = _backend(settings, source, "shards")
    ingest(source, backend, progress=False)
    record = json.loads((backend.root / "train" / "ids" / "shard-000000.json").read_text())
    assert record["ids"] == [str(s.id) for s in list(source)[:10]]
    paths = sorted(str(p) for p in (backend.root / "train").glob("shard-*.tar"))
    expected = {s.id.hex: s for s in source}
    got = {x["__key__"]: x for x in wds.WebDataset(paths, shardshuffle=False, empty_check=False)}
    assert {k: (v["jpg"], int(v["cls"])) for k, v in got.items()} == {
        k: (s.data, s.label) for k, s in expected.items()}


def test_partial_files_never_count(settings):
    """What a killed writer leaves: temporaries (ignored, then removed) and unjournaled files (rewritten)."""
    source = _source(40)
    backend = _backend(settings, source, "imagefolder")
    samples = list(source)
    backend.prepare(["train"])
    partial = backend.root / "train" / samples[0].name
    partial.parent.mkdir(parents=True)
    tmp = partial.with_name(f".{partial.name}.deadbeef.wbtmp")
    tmp.write_bytes(samples[0].data[:100])
    partial.write_bytes(samples[0].data[:100])  # renamed into place, but the writer died before journaling
    assert backend.stored_ids() == set()
    summary = ingest(source, backend, progress=False)
    assert summary.samples == 40
    assert not tmp.exists()
    assert partial.read_bytes() == samples[0].data
    assert verify(source, backend).ok


def test_unwritable_root_is_a_clear_error(settings, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    backend = make_backend("fs", settings, "x", root=blocker / "data")
    with pytest.raises(WorkbenchError, match="cannot write to"):
        ingest(_source(40), backend, progress=False)


def test_bad_sample_names_are_refused(settings):
    from workbench.data import Sample

    backend = make_backend("fs", settings, "x")
    backend.prepare(["train"])
    bad = Sample(id=uuid.uuid4(), name="../escape.jpg", label=0, data=b"\xff\xd8\xff")
    with pytest.raises(WorkbenchError, match="cannot be an object key"):
        backend.write([bad], lambda n, b: None)
    assert not (backend.root.parent / "escape.jpg").exists()
    assert not [p for p in backend.root.rglob("*") if p.is_file()]


def test_both_layouts_share_a_root_and_drop_only_their_own(settings):
    source = _source(40)
    folder = _backend(settings, source, "imagefolder")
    shards = _backend(settings, source, "shards")
    assert folder.root == shards.root
    ingest(source, folder, progress=False)
    ingest(source, shards, progress=False)
    assert verify(source, folder).ok and verify(source, shards).ok
    shards.drop()
    assert verify(source, folder).ok
    assert shards.stored_ids() == set() and not list(folder.root.glob("train/shard-*"))
    folder.drop()
    assert not folder.root.exists()
    folder.drop()  # idempotent
    shards.drop()
