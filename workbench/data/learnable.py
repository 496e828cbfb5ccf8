"""Learnable data without downloads: synthetic photos whose class is drawn in the pixels, and sklearn's digits.

Why: the other sources draw labels at random, independent of the pixels, so a model trained from them
learns nothing, and nothing can tell whether an image and its label still belong together after
shuffling, out-of-order delivery, workers, ranks and decoding. Here the label is visible in the image:

* `LearnableSyntheticSource`: the synthetic source's JPEGs (same ImageNet-like sizes, same texture)
  with a large class-dependent shape in a class-dependent colour drawn in the middle; its
  ``kind="segmentation"`` paints every pixel in its mask class's colour (the mask is a function of the
  pixels) and ``kind="multilabel"`` draws a disc in each present class's colour over the muted texture;
* `DigitsSource`: scikit-learn's bundled handwritten digits (1,797 8x8 images, shipped inside the
  wheel, so nothing is downloaded), upscaled and encoded as PNG or JPEG, with a fixed train/val split.

Both give every sample a split ("train" or "val") by a rule that depends only on its index, so ids,
labels and splits are the same on every machine.
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterator
from functools import cached_property
from typing import Literal

import numpy as np
from PIL import Image, ImageDraw

from workbench.data.sample import Sample, encode_multilabel, sample_id
from workbench.data.sources import (
    Kind,
    Source,
    SyntheticSource,
    _check_index,
    _encode_jpeg,
    _texture,
    register_spec,
)
from workbench.errors import WorkbenchError

SPLITS: tuple[str, ...] = ("train", "val")
SHAPES: tuple[str, ...] = ("disc", "square", "triangle", "cross", "ring")
DIGITS_COUNT = 1797  # images in sklearn.datasets.load_digits
_GRAIN = 24  # +- noise on the shape's colour: keeps JPEG sizes near the plain source's
_JITTER = 0.05  # centre offset, in short sides: the image centre stays inside every filled shape
_PALETTE_HUES = 8  # colours of the learnable source before shapes repeat with a new colour


def val_split_of(index: int, val_fraction: float) -> str:
    """'val' for an evenly spaced `val_fraction` of indices (exactly round(n * f) of any prefix n), else 'train'."""
    if not 0.0 <= val_fraction < 1.0:
        raise WorkbenchError(f"val_fraction must be in [0, 1), got {val_fraction}")
    return "val" if int((index + 1) * val_fraction) > int(index * val_fraction) else "train"


def class_style(c: int) -> tuple[str, tuple[int, int, int]]:
    """Shape and RGB colour of class `c`: shapes cycle fastest, then the hue, so neighbours differ in both."""
    shape = SHAPES[c % len(SHAPES)]
    hue_step = (c // len(SHAPES)) % _PALETTE_HUES
    ring = c // (len(SHAPES) * _PALETTE_HUES)  # past 40 classes: darker variants of the same palette
    hsv = np.array([[[(hue_step * 255) // _PALETTE_HUES, 255, max(80, 255 - 60 * ring)]]], dtype=np.uint8)
    r, g, b = Image.fromarray(hsv, "HSV").convert("RGB").getpixel((0, 0))
    return shape, (int(r), int(g), int(b))


def draw_class(pixels: np.ndarray, c: int, rng: np.random.Generator) -> np.ndarray:
    """`pixels` with class `c`'s shape over the centre (about half the short side, jittered), in its colour.

    The shape keeps a fine grain (as the texture has), so JPEG sizes stay close to the plain source's.
    """
    height, width = pixels.shape[:2]
    side = min(width, height)
    radius = side * rng.uniform(0.22, 0.30)
    cx = width / 2 + rng.uniform(-_JITTER, _JITTER) * side
    cy = height / 2 + rng.uniform(-_JITTER, _JITTER) * side
    shape, colour = class_style(c)
    mask = Image.new("L", (width, height), 0)
    draw = ImageDraw.Draw(mask)
    box = (cx - radius, cy - radius, cx + radius, cy + radius)
    if shape == "disc":
        draw.ellipse(box, fill=255)
    elif shape == "square":
        draw.rectangle(box, fill=255)
    elif shape == "triangle":
        draw.polygon([(cx, cy - radius), (cx + radius, cy + radius), (cx - radius, cy + radius)], fill=255)
    elif shape == "cross":
        bar = radius / 3
        draw.rectangle((cx - radius, cy - bar, cx + radius, cy + bar), fill=255)
        draw.rectangle((cx - bar, cy - radius, cx + bar, cy + radius), fill=255)
    else:  # ring
        draw.ellipse(box, outline=255, width=max(2, round(radius / 3)))
    inside = np.asarray(mask) > 0
    grain = rng.integers(-_GRAIN, _GRAIN + 1, (int(inside.sum()), 3), dtype=np.int16)
    out = pixels.copy()
    out[inside] = np.clip(np.array(colour, dtype=np.int16) + grain, 0, 255).astype(np.uint8)
    return out


def kind_colour(c: int, num_classes: int) -> tuple[int, int, int]:
    """RGB of class `c` in masks and multi-hot images: hues evenly spaced, so colour alone tells every class apart.

    Why not `class_style`: it tells classes apart by shape and colour together; a mask pixel or a small disc
    has only its colour.
    """
    hsv = np.array([[[(c * 255) // max(num_classes, 1), 255, 255]]], dtype=np.uint8)
    r, g, b = Image.fromarray(hsv, "HSV").convert("RGB").getpixel((0, 0))
    return int(r), int(g), int(b)


def _grained(colours: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """`colours` (..., 3) with +- `_GRAIN` of noise per channel, as uint8: flat areas that JPEG does not erase."""
    grain = rng.integers(-_GRAIN, _GRAIN + 1, colours.shape, dtype=np.int16)
    return np.clip(colours.astype(np.int16) + grain, 0, 255).astype(np.uint8)


def _png(mask: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(mask).save(buf, "PNG", compress_level=1)
    return buf.getvalue()


def paint_mask(rng: np.random.Generator, num_classes: int, width: int, height: int) -> tuple[np.ndarray, bytes]:
    """(pixels, PNG mask): a coarse random class grid as the plain source's, every pixel in its class's colour."""
    grid_w, grid_h = int(rng.integers(2, 9)), int(rng.integers(2, 9))
    grid = rng.integers(0, num_classes, (grid_h, grid_w), dtype=np.uint8)
    mask = np.asarray(Image.fromarray(grid).resize((width, height), Image.NEAREST))
    palette = np.array([kind_colour(k, num_classes) for k in range(num_classes)], dtype=np.uint8)
    return _grained(palette[mask], rng), _png(mask)


def draw_present(pixels: np.ndarray, hot: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """`pixels` muted towards grey, with a disc in each present class's colour, one per cell of a grid over the
    central square (at least 2 x 2: a lone disc is as large as four).

    The central square is what a short-side resize and centre crop keep, so every disc reaches the model. Why
    muted, and never one disc over the whole square: a tiny CNN (global average pooling) trained 200 steps on
    the full-strength texture, or on such a disc, mistook neighbouring hues (exact match 0.35-0.9, here 0.95).
    """
    height, width = pixels.shape[:2]
    present = np.flatnonzero(hot)
    side = min(width, height)
    cells = max(2, math.ceil(math.sqrt(len(present))))
    cell = side / cells
    left, top = (width - side) / 2, (height - side) / 2
    mask = Image.new("L", (width, height), 0)
    draw = ImageDraw.Draw(mask)
    out = (pixels * 0.15 + 108).astype(np.uint8)  # the texture at a sixth of its contrast
    for k, slot in zip(present, rng.permutation(cells * cells), strict=False):
        cx, cy = left + (slot % cells + 0.5) * cell, top + (slot // cells + 0.5) * cell
        radius = cell * rng.uniform(0.40, 0.46)
        draw.rectangle((0, 0, width, height), fill=0)
        draw.ellipse((cx - radius, cy - radius, cx + radius, cy + radius), fill=255)
        inside = np.asarray(mask) > 0
        out[inside] = _grained(np.broadcast_to(np.array(kind_colour(int(k), len(hot))), (int(inside.sum()), 3)),
                               rng)
    return out


class LearnableSyntheticSource(SyntheticSource):
    """The synthetic source's JPEGs (same sizes; classification: same texture, about the same bytes), the label
    visible in the pixels.

    `kind` "classification": the class drawn in the middle (`draw_class`); "segmentation": each pixel in its
    mask class's colour (`paint_mask`, PNG masks as the plain source's); "multilabel": the plain source's
    multi-hot vectors, a disc per present class (`draw_present`). `val_fraction` of the samples (evenly
    spaced by index) are in split "val".
    """

    def __init__(self, count: int, num_classes: int = 10, seed: int = 0, mean_kb: float = 110.0,
                 name: str | None = None, val_fraction: float = 0.2, kind: Kind = "classification") -> None:
        default = f"synthetic-learnable-{count}-s{seed}" if kind == "classification" else \
            f"synthetic-learnable-{kind}-{count}-s{seed}"
        super().__init__(count, num_classes, seed, kind, mean_kb, name or default)
        val_split_of(0, val_fraction)  # validates
        self.val_fraction = val_fraction
        self.splits = list(SPLITS) if val_fraction > 0 else ["train"]

    def sample(self, i: int) -> Sample:
        """Sample ``i``: a pure function of ``(seed, i)``; its label is in the pixels."""
        _check_index(i, self.count)
        rng = np.random.default_rng([self.seed, i])  # the synthetic source's draws, in its order
        c = int(rng.integers(self.num_classes))
        width, height = self._draw_size(rng)
        own = np.random.default_rng([self.seed, i, 1])  # what the plain source does not draw
        label: int | bytes = c
        if self.kind == "segmentation":
            pixels, label = paint_mask(rng, self.num_classes, width, height)
        elif self.kind == "multilabel":
            texture = _texture(rng, width, height)
            hot = rng.random(self.num_classes) < min(0.5, 2 / self.num_classes)
            hot[c] = True  # as the plain source: the class in the name is always present
            pixels, label = draw_present(texture, hot, own), encode_multilabel(hot.astype(np.uint8))
        else:
            pixels = draw_class(_texture(rng, width, height), c, own)
        name = f"class_{c:03d}/img_{i:07d}.jpg"
        return self.make_sample(name, label, _encode_jpeg(pixels), (width, height),
                                val_split_of(i, self.val_fraction))


class DigitsSource:
    """scikit-learn's handwritten digits (bundled in the wheel: no download), upscaled, as PNG or JPEG.

    White strokes on black, RGB, `size` x `size` (bilinear from 8x8). The split is fixed: within each
    digit, every 5th image (by dataset index) is "val" (about 20 %, balanced), the rest "train". Names
    are ``digit_<d>/digit_<index>.<ext>``, so ids are uuid5 of the dataset name and the index.
    """

    def __init__(self, size: int = 32, image_format: Literal["PNG", "JPEG"] = "PNG", name: str | None = None,
                 val_every: int = 5) -> None:
        if not 8 <= size <= 1024:
            raise WorkbenchError(f"digits size must be in [8, 1024] pixels, got {size}")
        if image_format not in ("PNG", "JPEG"):
            raise WorkbenchError(f"digits image_format must be PNG or JPEG, got {image_format!r}")
        if val_every < 2:
            raise WorkbenchError(f"val_every must be >= 2 (every n-th image of a digit is val), got {val_every}")
        self.splits = list(SPLITS)
        self.size = size
        self.image_format = image_format
        self.val_every = val_every
        self.name = name or f"digits-{size}px-{image_format.lower()}"
        self.classes = [f"digit_{d}" for d in range(10)]

    @cached_property
    def _data(self) -> tuple[np.ndarray, np.ndarray, list[str]]:
        """(images 0..16 as float, targets, split per index): loaded once, on first use."""
        try:
            from sklearn.datasets import load_digits
        except ImportError:
            raise WorkbenchError("the digits source needs scikit-learn: .venv/bin/pip install scikit-learn") from None
        digits = load_digits()
        targets = digits.target.astype(int)
        seen = np.zeros(10, dtype=int)
        splits = []
        for t in targets:
            splits.append("val" if seen[t] % self.val_every == self.val_every - 1 else "train")
            seen[t] += 1
        return digits.images, targets, splits

    def __len__(self) -> int:
        return DIGITS_COUNT

    def __iter__(self) -> Iterator[Sample]:
        return (self.sample(i) for i in range(len(self)))

    def split_of(self, i: int) -> str:
        return self._data[2][_check_index(i, len(self))]

    def sample(self, i: int) -> Sample:
        """Image ``i`` of ``load_digits()``, upscaled and encoded."""
        images, targets, splits = self._data
        _check_index(i, len(self))
        gray = np.clip(images[i] * (255 / 16), 0, 255).astype(np.uint8)
        img = Image.fromarray(gray, "L").resize((self.size, self.size), Image.BILINEAR).convert("RGB")
        ext = "png" if self.image_format == "PNG" else "jpg"
        buf = io.BytesIO()
        img.save(buf, self.image_format, **({"quality": 95} if ext == "jpg" else {}))
        label = int(targets[i])
        name = f"digit_{label}/digit_{i:04d}.{ext}"
        return Sample(id=sample_id(self.name, name), name=name, label=label, data=buf.getvalue(), split=splits[i],
                      width=self.size, height=self.size)


def _parse(spec: str) -> Source | None:
    """``synthetic:N:learnable``, ``digits``, ``digits:SIZE`` or ``digits:SIZE:png|jpeg``; None for other specs."""
    parts = spec.split(":")
    if parts[0] == "synthetic" and len(parts) == 3 and parts[2] == "learnable":
        try:
            count = int(parts[1])
        except ValueError:
            raise WorkbenchError(f"bad source {spec!r}: N must be an integer (synthetic:N:learnable)") from None
        if count <= 0:
            raise WorkbenchError(f"bad source {spec!r}: N must be > 0 (synthetic:N:learnable)")
        return LearnableSyntheticSource(count)
    if parts[0] == "digits" and len(parts) <= 3:
        try:
            size = int(parts[1]) if len(parts) > 1 else 32
        except ValueError:
            raise WorkbenchError(f"bad source {spec!r}: SIZE must be an integer (digits[:SIZE[:png|jpeg]])") from None
        fmt = parts[2].upper() if len(parts) > 2 else "PNG"
        fmt = "JPEG" if fmt == "JPG" else fmt
        if fmt not in ("PNG", "JPEG"):
            raise WorkbenchError(f"bad source {spec!r}: the format must be png or jpeg (digits[:SIZE[:png|jpeg]])")
        return DigitsSource(size, fmt)  # type: ignore[arg-type]
    return None


register_spec(_parse, "synthetic:N:learnable, digits[:SIZE[:png|jpeg]]")
