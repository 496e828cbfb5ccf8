"""Learnable sources: the class is in the pixels (synthetic shapes, sklearn digits), splits and ids are fixed."""

from __future__ import annotations

import io
import uuid
from collections import Counter

import numpy as np
import pytest
from PIL import Image

from workbench.data import DigitsSource, IndexedSource, LearnableSyntheticSource, SyntheticSource, parse_source
from workbench.data.learnable import SHAPES, class_style, val_split_of
from workbench.errors import WorkbenchError


def _pixels(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


@pytest.fixture(scope="module")
def digits() -> list:
    return list(DigitsSource())


def test_digits_are_sklearns_images_labels_upscaled(digits):
    from sklearn.datasets import load_digits

    ref = load_digits()
    assert len(digits) == 1797 == len(ref.target)
    assert [s.label for s in digits] == ref.target.tolist()
    for i in (0, 1, 500, 1796):
        image = _pixels(digits[i].data)
        assert image.shape == (32, 32, 3) and digits[i].data.startswith(b"\x89PNG")
        small = np.asarray(Image.fromarray(image[:, :, 0]).resize((8, 8), Image.BOX), dtype=float)
        assert np.corrcoef(small.ravel(), ref.images[i].ravel())[0, 1] > 0.95  # the same strokes, scaled


def test_digits_split_is_fixed_balanced_and_ids_stable(digits):
    again = list(DigitsSource())
    assert [(s.id, s.split, s.label) for s in digits] == [(s.id, s.split, s.label) for s in again]
    assert len({s.id for s in digits}) == 1797
    # uuid5 of the dataset name and the file name: the same on every machine
    assert digits[0].name == "digit_0/digit_0000.png"
    assert digits[0].id == uuid.UUID("3e71e786-9f85-5d9d-b04b-4727a453a261")
    val = Counter(s.label for s in digits if s.split == "val")
    total = Counter(s.label for s in digits)
    assert set(val) == set(range(10))
    for digit, n in total.items():
        assert val[digit] == n // 5  # every 5th image of each digit
    assert {s.split for s in digits} == {"train", "val"}


def test_digits_jpeg_and_size_options():
    source = DigitsSource(size=64, image_format="JPEG")
    sample = source.sample(3)
    assert sample.data.startswith(b"\xff\xd8\xff") and sample.name.endswith(".jpg")
    assert _pixels(sample.data).shape == (64, 64, 3) and (sample.width, sample.height) == (64, 64)
    assert sample.id != DigitsSource().sample(3).id  # another dataset name, other ids
    assert isinstance(source, IndexedSource)


@pytest.mark.parametrize("bad", [{"size": 4}, {"image_format": "GIF"}, {"val_every": 1}])
def test_digits_rejects_bad_options(bad):
    with pytest.raises(WorkbenchError):
        DigitsSource(**bad)


def test_learnable_synthetic_keeps_the_synthetic_sizes_and_labels():
    plain, learnable = SyntheticSource(40, seed=3), LearnableSyntheticSource(40, seed=3)
    for a, b in zip(plain, learnable, strict=True):
        assert (a.label, a.width, a.height, a.name) == (b.label, b.width, b.height, b.name)
        assert _pixels(b.data).shape == (b.height, b.width, 3)
    assert learnable.name == "synthetic-learnable-40-s3"
    sizes = [len(s.data) for s in learnable]
    plain_sizes = [len(s.data) for s in plain]
    assert 0.8 < np.mean(sizes) / np.mean(plain_sizes) < 1.2  # about the same bytes per image


def test_learnable_synthetic_draws_the_class_colour_in_the_middle():
    source = LearnableSyntheticSource(60, num_classes=10, seed=1)
    checked = 0
    for sample in source:
        shape, colour = class_style(sample.label)
        image = _pixels(sample.data).astype(int)
        h, w = image.shape[:2]
        centre = image[h // 2 - 2:h // 2 + 3, w // 2 - 2:w // 2 + 3].reshape(-1, 3).mean(0)
        if shape != "ring":  # a ring's middle is background
            assert np.abs(centre - colour).max() < 40, (sample.name, centre, colour)
            checked += 1
    assert checked > 30


def test_class_styles_differ_and_splits_are_evenly_spaced():
    styles = [class_style(c) for c in range(40)]
    assert len(set(styles)) == 40
    assert {s for s, _ in styles} == set(SHAPES)
    splits = [val_split_of(i, 0.2) for i in range(100)]
    assert splits.count("val") == 20 and splits[:5] == ["train"] * 4 + ["val"]
    assert Counter(s.split for s in LearnableSyntheticSource(50, val_fraction=0.2)) == {"train": 40, "val": 10}
    assert {s.split for s in LearnableSyntheticSource(5, val_fraction=0.0)} == {"train"}
    with pytest.raises(WorkbenchError):
        LearnableSyntheticSource(5, val_fraction=1.0)


@pytest.mark.parametrize(("spec", "kind", "extra"), [
    ("synthetic:25:learnable", LearnableSyntheticSource, {"count": 25}),
    ("digits", DigitsSource, {"size": 32, "image_format": "PNG"}),
    ("digits:64", DigitsSource, {"size": 64, "image_format": "PNG"}),
    ("digits:48:jpeg", DigitsSource, {"size": 48, "image_format": "JPEG"}),
])
def test_specs(spec, kind, extra):
    source = parse_source(spec)
    assert type(source) is kind
    for key, value in extra.items():
        assert getattr(source, key) == value


@pytest.mark.parametrize("spec", ["synthetic:x:learnable", "synthetic:0:learnable", "digits:big", "digits:32:gif"])
def test_bad_specs_are_one_clear_error(spec):
    with pytest.raises(WorkbenchError, match="bad source"):
        parse_source(spec)


def test_unknown_spec_lists_the_learnable_forms():
    with pytest.raises(WorkbenchError, match=r"digits\[:SIZE"):
        parse_source("mnist")
    assert type(parse_source("synthetic:3")) is SyntheticSource  # the plain forms still parse as before
