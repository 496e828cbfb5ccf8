"""Samples and sources: ids, synthetic JPEGs, image folders, map-style datasets, CLI specs."""

from __future__ import annotations

import io
import uuid
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from workbench.data import (
    ImageFolderSource,
    IndexedSource,
    Sample,
    Source,
    SyntheticSource,
    TorchDatasetSource,
    checksum,
    decode_multilabel,
    encode_multilabel,
    parse_source,
    sample_id,
    verify_image,
)
from workbench.errors import WorkbenchError


def _jpeg(color: tuple[int, int, int], size: tuple[int, int] = (32, 24)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, "JPEG")
    return buf.getvalue()


# --- sample ------------------------------------------------------------------------------------


def test_sample_id_is_deterministic_and_distinct() -> None:
    a = sample_id("imagenet", "n01/x.jpg")
    assert a == sample_id("imagenet", "n01/x.jpg")
    assert a.version == 5
    assert a != sample_id("imagenet", "n01/y.jpg")
    assert a != sample_id("other", "n01/x.jpg")


def test_checksum_is_blake2b_128() -> None:
    assert checksum(b"abc") == checksum(b"abc")
    assert checksum(b"abc") != checksum(b"abd")
    assert len(checksum(b"")) == 32


def test_sample_properties() -> None:
    s = Sample(id=uuid.uuid4(), name="cat/1.jpg", label=1, data=b"xy")
    assert s.checksum == checksum(b"xy")
    assert s.label_class == "cat"
    assert Sample(id=uuid.uuid4(), name="flat.jpg", label=None, data=b"").label_class == ""
    with pytest.raises(AttributeError):
        s.name = "other"  # type: ignore[misc]


def test_multilabel_round_trip() -> None:
    vec = np.array([0, 1, 1, 0], dtype=np.uint8)
    back = decode_multilabel(encode_multilabel(vec))
    assert back.dtype == vec.dtype
    np.testing.assert_array_equal(back, vec)


# --- synthetic ---------------------------------------------------------------------------------


def test_synthetic_is_deterministic_per_seed() -> None:
    a = [s.data for s in SyntheticSource(4, seed=1, mean_kb=10)]
    b = [s.data for s in SyntheticSource(4, seed=1, mean_kb=10)]
    c = [s.data for s in SyntheticSource(4, seed=2, mean_kb=10)]
    assert a == b
    assert all(x != y for x, y in zip(a, c, strict=True))


def test_synthetic_sample_i_equals_iteration() -> None:
    src = SyntheticSource(6, seed=3, mean_kb=10)
    assert isinstance(src, IndexedSource)
    assert list(src) == [src.sample(i) for i in range(6)]
    # Independent of what ran before, in any order.
    assert SyntheticSource(6, seed=3, mean_kb=10).sample(5) == list(src)[5]
    with pytest.raises(IndexError):
        src.sample(6)


def test_synthetic_mean_size_is_imagenet_like() -> None:
    sizes = [len(s.data) for s in SyntheticSource(200, seed=0)]
    mean_kb = sum(sizes) / len(sizes) / 1024
    assert 110 * 0.75 <= mean_kb <= 110 * 1.25
    assert max(sizes) > 2 * min(sizes)  # a spread, not one fixed size


def test_synthetic_mean_kb_scales_sizes() -> None:
    sizes = [len(s.data) for s in SyntheticSource(40, seed=0, mean_kb=20)]
    assert 20 * 0.6 <= sum(sizes) / len(sizes) / 1024 <= 20 * 1.4


def test_synthetic_images_are_valid_jpegs_with_labels_in_range() -> None:
    src = SyntheticSource(20, num_classes=5, seed=0, mean_kb=15)
    assert src.classes == [f"class_{c:03d}" for c in range(5)]
    assert src.name == "synthetic-classification-20-s0"
    for i, s in enumerate(src):
        assert verify_image(s.data) is None
        img = Image.open(io.BytesIO(s.data))
        assert img.format == "JPEG"
        assert img.size == (s.width, s.height)
        assert isinstance(s.label, int) and 0 <= s.label < 5
        assert s.name == f"class_{s.label:03d}/img_{i:07d}.jpg"
        assert s.label_class == src.classes[s.label]
        assert s.id == sample_id(src.name, s.name)


def test_synthetic_segmentation_mask_matches_image() -> None:
    src = SyntheticSource(5, num_classes=7, kind="segmentation", mean_kb=10)
    for s in src:
        assert isinstance(s.label, bytes)
        mask = Image.open(io.BytesIO(s.label))
        assert mask.format == "PNG"
        assert mask.mode == "L"
        assert mask.size == (s.width, s.height) == Image.open(io.BytesIO(s.data)).size
        assert int(np.asarray(mask).max()) < 7


def test_synthetic_multilabel_round_trip() -> None:
    src = SyntheticSource(5, num_classes=6, kind="multilabel", mean_kb=10)
    for s in src:
        assert isinstance(s.label, bytes)
        vec = decode_multilabel(s.label)
        assert vec.shape == (6,)
        assert set(np.unique(vec)) <= {0, 1}
        assert vec[int(s.label_class.removeprefix("class_"))] == 1


# --- image folder ------------------------------------------------------------------------------


def _folder(root: Path) -> Path:
    (root / "dog").mkdir(parents=True)
    (root / "cat").mkdir()
    (root / "cat" / "b.JPG").write_bytes(_jpeg((255, 0, 0)))
    (root / "cat" / "a.jpg").write_bytes(_jpeg((0, 255, 0)))
    (root / "cat" / "notes.txt").write_text("not an image")
    (root / "cat" / "sub").mkdir()
    (root / "cat" / "sub" / "c.jpeg").write_bytes(_jpeg((9, 9, 9)))
    (root / "cat" / ".hidden").mkdir()
    (root / "cat" / ".hidden" / "d.jpg").write_bytes(_jpeg((9, 9, 9)))
    (root / "dog" / "ok.png").write_bytes(_jpeg((0, 0, 255)))  # extension lies; bytes pass through
    # Headers intact, scan data cut: only a full decode notices (verify() alone does not).
    photo = SyntheticSource(1, mean_kb=10).sample(0).data
    (root / "dog" / "broken.jpg").write_bytes(photo[: len(photo) * 7 // 10])
    return root


def test_imagefolder_lists_sorted_classes_and_files(tmp_path: Path) -> None:
    src = ImageFolderSource(_folder(tmp_path / "pets"))
    assert isinstance(src, Source)
    assert src.name == "pets"
    assert src.classes == ["cat", "dog"]
    samples = list(src)
    names = ["cat/a.jpg", "cat/b.JPG", "cat/sub/c.jpeg", "dog/broken.jpg", "dog/ok.png"]
    assert [s.name for s in samples] == names
    assert [s.label for s in samples] == [0, 0, 0, 1, 1]
    assert samples[2].label_class == "cat"
    assert samples[0].data == (tmp_path / "pets" / "cat" / "a.jpg").read_bytes()
    assert (samples[0].width, samples[0].height) == (32, 24)
    assert samples[0].id == sample_id("pets", "cat/a.jpg")
    assert len(src) == 5


def test_imagefolder_verify_image_flags_corrupt_file(tmp_path: Path) -> None:
    reasons = {s.name: verify_image(s.data) for s in ImageFolderSource(_folder(tmp_path / "pets"))}
    assert reasons["cat/a.jpg"] is None
    assert reasons["dog/ok.png"] is None
    bad = reasons["dog/broken.jpg"]
    assert isinstance(bad, str) and bad and "\n" not in bad
    assert verify_image(b"definitely not an image") is not None


def test_imagefolder_empty_or_missing_root_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "empty" / "cls").mkdir(parents=True)
    with pytest.raises(WorkbenchError, match="no images"):
        ImageFolderSource(tmp_path / "empty")
    with pytest.raises(WorkbenchError, match="does not exist"):
        ImageFolderSource(tmp_path / "missing")


# --- map-style dataset -------------------------------------------------------------------------


def test_torch_like_dataset_is_encoded() -> None:
    pil = Image.new("RGB", (20, 10), (10, 200, 30))
    arr = np.full((8, 6, 3), 128, dtype=np.uint8)
    raw = _jpeg((1, 2, 3))
    ds = [(pil, 1), (arr, np.int64(0)), (raw, 1)]
    src = TorchDatasetSource(ds, name="toy", classes=["zero", "one"])
    samples = list(src)
    assert len(src) == 3
    assert [s.label for s in samples] == [1, 0, 1]
    assert [s.name for s in samples] == ["one/img_0000000.jpg", "zero/img_0000001.jpg", "one/img_0000002.jpg"]
    assert [(s.width, s.height) for s in samples] == [(20, 10), (6, 8), (32, 24)]
    assert samples[2].data == raw
    for s in samples:
        assert Image.open(io.BytesIO(s.data)).format == "JPEG"
        assert s.id == sample_id("toy", s.name)


def test_torch_like_dataset_png_and_class_attribute() -> None:
    class DS:
        def __init__(self) -> None:
            self.classes = ["a"]

        def __len__(self) -> int:
            return 1

        def __getitem__(self, i: int) -> tuple[Image.Image, int]:
            return Image.new("L", (4, 4)), 0

    src = TorchDatasetSource(DS(), name="ds", image_format="PNG")
    s = src.sample(0)
    assert src.classes == ["a"]
    assert s.name == "a/img_0000000.png"
    assert Image.open(io.BytesIO(s.data)).format == "PNG"


# --- spec parsing ------------------------------------------------------------------------------


def test_parse_source_specs(tmp_path: Path) -> None:
    s = parse_source("synthetic:12")
    assert isinstance(s, SyntheticSource) and len(s) == 12 and s.kind == "classification"
    seg = parse_source("synthetic:3:segmentation")
    assert isinstance(seg, SyntheticSource) and seg.kind == "segmentation"
    folder = parse_source(f"imagefolder:{_folder(tmp_path / 'f')}")
    assert isinstance(folder, ImageFolderSource) and len(folder) == 5


@pytest.mark.parametrize("spec", ["s3://bucket", "synthetic", "imagefolder:", "foo:1"])
def test_parse_source_unknown(spec: str) -> None:
    with pytest.raises(WorkbenchError, match=r"unknown source .*synthetic:N\[:kind\] or imagefolder:PATH"):
        parse_source(spec)


@pytest.mark.parametrize("spec", ["synthetic:x", "synthetic:0", "synthetic:5:video"])
def test_parse_source_bad_synthetic(spec: str) -> None:
    with pytest.raises(WorkbenchError, match="bad source"):
        parse_source(spec)
