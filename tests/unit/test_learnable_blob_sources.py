"""Learnable masks and multi-hot labels: the target is a function of the pixels, so a pipeline can learn it."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from workbench.data import LearnableSyntheticSource, SyntheticSource, decode_multilabel
from workbench.data.learnable import kind_colour


def _pixels(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB")).astype(int)


def _near(image: np.ndarray, colour: tuple[int, int, int], tolerance: int = 45) -> np.ndarray:
    return np.abs(image - np.array(colour)).max(axis=-1) < tolerance


def test_every_mask_class_is_its_pixels_colour():
    source = LearnableSyntheticSource(12, seed=2, mean_kb=8, kind="segmentation")
    palette = np.array([kind_colour(k, 10) for k in range(10)])
    for sample in source:
        mask = np.asarray(Image.open(io.BytesIO(sample.label)))
        image = _pixels(sample.data)
        assert mask.shape == image.shape[:2] == (sample.height, sample.width)
        nearest = np.abs(image[:, :, None, :] - palette[None, None]).sum(-1).argmin(-1)
        assert (nearest == mask).mean() > 0.9, sample.name  # JPEG (4:2:0 colour) blurs the pixels at block edges


def test_multilabel_keeps_the_plain_labels_and_draws_each_present_class():
    learnable = LearnableSyntheticSource(20, seed=3, mean_kb=8, kind="multilabel")
    for plain, sample in zip(SyntheticSource(20, seed=3, mean_kb=8, kind="multilabel"), learnable, strict=True):
        assert sample.label == plain.label and sample.name == plain.name
        hot = decode_multilabel(sample.label)
        image = _pixels(sample.data)
        side = min(image.shape[:2])  # the discs lie in the central square, which a centre crop keeps
        top, left = (image.shape[0] - side) // 2, (image.shape[1] - side) // 2
        square = image[top:top + side, left:left + side]
        for k in range(10):
            share = _near(square, kind_colour(k, 10)).mean()
            assert (share > 0.02) == bool(hot[k]), (sample.name, k, share)


def test_colours_differ_and_names_say_the_kind():
    assert len({kind_colour(k, 10) for k in range(10)}) == 10
    assert LearnableSyntheticSource(5, kind="segmentation").name == "synthetic-learnable-segmentation-5-s0"
    assert LearnableSyntheticSource(5).name == "synthetic-learnable-5-s0"
    assert {s.split for s in LearnableSyntheticSource(10, kind="multilabel")} == {"train", "val"}


def test_bad_kind_is_one_clear_error():
    from workbench.errors import WorkbenchError

    with pytest.raises(WorkbenchError, match="unknown kind"):
        LearnableSyntheticSource(5, kind="detection")  # type: ignore[arg-type]
