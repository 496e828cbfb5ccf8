"""Where samples come from: generated, an image folder on disk, or any map-style (torch) dataset.

Every source streams: it never holds more than one encoded sample in memory, and sample ``i`` can
be produced on its own (``sample(i)``) so ingest can be split across workers and resumed.
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np
from PIL import Image

from workbench.data.sample import (
    JPEG_MAGIC,
    PNG_MAGIC,
    Sample,
    encode_multilabel,
    sample_id,
)
from workbench.errors import WorkbenchError

Kind = Literal["classification", "segmentation", "multilabel"]
KINDS: tuple[str, ...] = ("classification", "segmentation", "multilabel")
IMAGE_EXTENSIONS: frozenset[str] = frozenset(
    {".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"}
)
JPEG_QUALITY = 90


@runtime_checkable
class Source(Protocol):
    """What writers need from a dataset: a name for ids, class names, a length and a stream."""

    name: str
    classes: list[str]

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[Sample]: ...


@runtime_checkable
class IndexedSource(Source, Protocol):
    """A source whose samples can be made one by one, for parallel and resumable ingest."""

    def sample(self, i: int) -> Sample: ...


class ByIndex:
    """A source made one sample at a time: iterating it is `sample(0)`, `sample(1)`, ... (subclasses give both)."""

    name: str

    def __len__(self) -> int:
        raise NotImplementedError

    def sample(self, i: int) -> Sample:
        raise NotImplementedError

    def __iter__(self) -> Iterator[Sample]:
        return (self.sample(i) for i in range(len(self)))

    def make_sample(self, name: str, label: Any, data: bytes, size: tuple[int, int], split: str = "train") -> Sample:
        """Sample `name` of this source (`self.name`): its id from the two names, whatever made the bytes."""
        width, height = size
        return Sample(id=sample_id(self.name, name), name=name, label=label, data=data, split=split, width=width,
                      height=height)


def _check_index(i: int, n: int) -> int:
    """Reject out-of-range indices instead of silently wrapping like Python lists."""
    if not 0 <= i < n:
        raise IndexError(f"sample index {i} out of range [0, {n})")
    return i


# --------------------------------------------------------------------------------------------
# Synthetic
# --------------------------------------------------------------------------------------------

# Shapes of ImageNet photos: mostly landscape 4:3, some portrait and 3:2, a few square/wide.
_ASPECTS = np.array([4 / 3, 3 / 4, 3 / 2, 2 / 3, 1.0, 16 / 9, 5 / 4])
_ASPECT_P = np.array([0.45, 0.15, 0.15, 0.05, 0.10, 0.05, 0.05])
_AREA_SIGMA = 0.5  # log-normal spread of pixel count: long tail of big photos
_MIN_SIDE, _MAX_SIDE = 48, 4096
# Mean JPEG bytes per pixel of our texture at quality 90 (measured over 2000 images); the pixel
# count distribution is scaled by it so the mean file size lands on ``mean_kb``.
_BYTES_PER_PIXEL = 0.60
_UPSAMPLE = 2  # the coarse texture is drawn at 1/2 resolution, then smoothly upsampled
_FINE_BITS = 4  # full-resolution grain in [0, 16): defeats JPEG's easy wins cheaply
_TEXTURE_RANGE = (0.5, 1.1)  # per-image strength of the coarse texture: file sizes vary


class SyntheticSource(ByIndex):
    """Real JPEGs with ImageNet-like sizes, generated from ``(seed, i)`` alone.

    Pixels are a smooth colour gradient plus half-resolution noise (upsampled) plus fine grain,
    so JPEG cannot shrink them to nothing and file sizes look like photos (ImageNet averages
    about 110 KB at roughly 400x350 to 500x375, with a long tail).
    """

    def __init__(
        self,
        count: int,
        num_classes: int = 10,
        seed: int = 0,
        kind: Kind = "classification",
        mean_kb: float = 110.0,
        name: str | None = None,
    ) -> None:
        if count < 0:
            raise WorkbenchError(f"synthetic count must be >= 0, got {count}")
        if num_classes < 1 or (kind == "segmentation" and num_classes > 256):
            raise WorkbenchError(
                f"num_classes must be in [1, 256] for masks and >= 1 otherwise, got {num_classes}"
            )
        if kind not in KINDS:
            raise WorkbenchError(f"unknown kind {kind!r}: use one of {', '.join(KINDS)}")
        if mean_kb <= 0:
            raise WorkbenchError(f"mean_kb must be > 0, got {mean_kb}")
        self.count = count
        self.num_classes = num_classes
        self.seed = seed
        self.kind: Kind = kind
        self.mean_kb = mean_kb
        self.name = name or f"synthetic-{kind}-{count}-s{seed}"
        self.classes = [f"class_{c:03d}" for c in range(num_classes)]
        mean_area = mean_kb * 1024 / _BYTES_PER_PIXEL
        self._median_area = mean_area / math.exp(_AREA_SIGMA**2 / 2)  # mean of a log-normal

    def __len__(self) -> int:
        return self.count

    def sample(self, i: int) -> Sample:
        """Sample ``i``: a pure function of ``(seed, i)``, whatever was generated before."""
        _check_index(i, self.count)
        rng = np.random.default_rng([self.seed, i])
        c = int(rng.integers(self.num_classes))
        width, height = self._draw_size(rng)
        data = _encode_jpeg(_texture(rng, width, height))
        name = f"class_{c:03d}/img_{i:07d}.jpg"
        return self.make_sample(name, self._label(rng, c, width, height), data, (width, height))

    def _draw_size(self, rng: np.random.Generator) -> tuple[int, int]:
        """Image sides from a log-normal pixel count and a photo-like aspect ratio."""
        aspect = float(rng.choice(_ASPECTS, p=_ASPECT_P))
        area = self._median_area * math.exp(_AREA_SIGMA * float(rng.standard_normal()))
        width = round(math.sqrt(area * aspect))
        height = round(math.sqrt(area / aspect))
        return min(max(width, _MIN_SIDE), _MAX_SIDE), min(max(height, _MIN_SIDE), _MAX_SIDE)

    def _label(self, rng: np.random.Generator, c: int, width: int, height: int) -> int | bytes:
        """Class index, PNG mask or multi-hot vector depending on ``kind``."""
        if self.kind == "classification":
            return c
        if self.kind == "segmentation":
            return _mask_png(rng, self.num_classes, width, height)
        hot = rng.random(self.num_classes) < min(0.5, 2 / self.num_classes)
        hot[c] = True  # the class in the name is always present
        return encode_multilabel(hot.astype(np.uint8))


def _texture(rng: np.random.Generator, width: int, height: int) -> np.ndarray:
    """HxWx3 uint8 pixels: gradient + coarse noise (upsampled) + fine grain, all numpy/Pillow C code."""
    lw, lh = -(-width // _UPSAMPLE) + 1, -(-height // _UPSAMPLE) + 1
    strength = np.float32(rng.uniform(*_TEXTURE_RANGE))
    base = rng.uniform(50, 205, 3).astype(np.float32) - 128 * strength
    slope = (rng.uniform(-1, 1, (2, 3)) * 50).astype(np.float32)
    x = np.linspace(-1, 1, lw, dtype=np.float32)[None, :, None] * slope[0]
    y = np.linspace(-1, 1, lh, dtype=np.float32)[:, None, None] * slope[1] + base
    coarse = np.frombuffer(rng.bytes(lh * lw * 3), dtype=np.uint8).reshape(lh, lw, 3) * strength
    coarse += x
    coarse += y
    grain_max = (1 << _FINE_BITS) - 1
    np.clip(coarse, 0, 255 - grain_max, out=coarse)  # leaves room to add grain without overflow
    pixels = np.array(Image.fromarray(coarse.astype(np.uint8)).resize((width, height), Image.BILINEAR))
    grain = np.frombuffer(rng.bytes(height * width * 3), dtype=np.uint8).reshape(height, width, 3)
    pixels += grain & grain_max
    return pixels


def _mask_png(rng: np.random.Generator, num_classes: int, width: int, height: int) -> bytes:
    """Blocky segmentation mask (a coarse random class grid, nearest-upsampled) as PNG bytes."""
    grid_w, grid_h = int(rng.integers(2, 9)), int(rng.integers(2, 9))
    grid = rng.integers(0, num_classes, (grid_h, grid_w), dtype=np.uint8)
    mask = Image.fromarray(grid).resize((width, height), Image.NEAREST)
    buf = io.BytesIO()
    mask.save(buf, "PNG", compress_level=1)
    return buf.getvalue()


def _encode_jpeg(pixels: np.ndarray | Image.Image) -> bytes:
    """JPEG at quality 90 (typical of photo datasets); converts modes JPEG cannot hold."""
    img = pixels if isinstance(pixels, Image.Image) else Image.fromarray(pixels)
    if img.mode not in ("RGB", "L", "CMYK"):
        img = img.convert("RGB")
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=JPEG_QUALITY)
    return buf.getvalue()


# --------------------------------------------------------------------------------------------
# Image folder
# --------------------------------------------------------------------------------------------


class ImageFolderSource(ByIndex):
    """torchvision ``ImageFolder`` layout (``root/<class>/<file>``); bytes pass through undecoded.

    Classes and files are sorted so ids, labels and order are the same on every machine; class
    directories are searched recursively (as torchvision does), hidden directories are skipped.
    Only the file list is kept in memory. Width/height come from the image header (cheap, no decode) and
    are 0 when the header is unreadable; use :func:`~workbench.data.sample.verify_image` to check.
    """

    def __init__(self, root: Path | str, name: str | None = None, split: str = "train") -> None:
        self.root = Path(root)
        if not self.root.is_dir():
            raise WorkbenchError(
                f"image folder {str(self.root)!r} does not exist: pass a directory laid out as root/<class>/<image>"
            )
        self.name = name or self.root.resolve().name
        self.split = split
        self.classes = sorted(
            p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith(".")
        )
        self._files: list[tuple[str, int]] = [
            (rel, label) for label, cls in enumerate(self.classes) for rel in _image_files(self.root, cls)
        ]
        if not self._files:
            raise WorkbenchError(
                f"image folder {self.root} has no images: expected root/<class>/<image> "
                f"with extensions {' '.join(sorted(IMAGE_EXTENSIONS))}"
            )

    def __len__(self) -> int:
        return len(self._files)

    def sample(self, i: int) -> Sample:
        """Read file ``i`` of the sorted listing."""
        rel, label = self._files[_check_index(i, len(self._files))]
        data = (self.root / rel).read_bytes()
        return self.make_sample(rel, label, data, _header_size(data), self.split)


def _image_files(root: Path, cls: str) -> list[str]:
    """Image paths under ``root/cls`` relative to root, recursive like torchvision, sorted."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root / cls, followlinks=True):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        rel_dir = Path(dirpath).relative_to(root).as_posix()
        found += [f"{rel_dir}/{f}" for f in filenames if Path(f).suffix.lower() in IMAGE_EXTENSIONS]
    return sorted(found)


def _header_size(data: bytes) -> tuple[int, int]:
    """Image size from the header only (Pillow opens lazily); (0, 0) if unreadable."""
    try:
        with Image.open(io.BytesIO(data)) as img:
            return img.size
    except Exception:  # corrupt files are reported by verify_image, not here
        return 0, 0


# --------------------------------------------------------------------------------------------
# Map-style dataset (torch or anything with len() and [i])
# --------------------------------------------------------------------------------------------

_FORMAT_EXT = {"JPEG": "jpg", "PNG": "png"}


class TorchDatasetSource(ByIndex):
    """Any map-style dataset yielding ``(image, label)``, like cortx_pytorch's ``upload_cv_dataset``.

    Duck typed (``len(ds)`` and ``ds[i]``) so torch is not imported. Images may be PIL images,
    HWC/HW uint8 numpy arrays or already-encoded bytes (passed through); labels may be ints,
    0-d tensors/arrays (anything with ``.item()``) or bytes.
    """

    def __init__(
        self,
        ds: Any,
        name: str,
        classes: list[str] | None = None,
        image_format: Literal["JPEG", "PNG"] = "JPEG",
        split: str = "train",
    ) -> None:
        if image_format not in _FORMAT_EXT:
            raise WorkbenchError(f"image_format must be one of {', '.join(_FORMAT_EXT)}, got {image_format!r}")
        self.ds = ds
        self.name = name
        self.classes = list(classes if classes is not None else getattr(ds, "classes", None) or [])
        self.image_format = image_format
        self.split = split

    def __len__(self) -> int:
        return len(self.ds)

    def sample(self, i: int) -> Sample:
        """Encode item ``i`` of the wrapped dataset."""
        image, raw_label = self.ds[_check_index(i, len(self.ds))]
        label = _to_label(raw_label)
        data, ext, size = self._encode(image)
        cls = self._class_dir(label)
        name = f"{cls}/img_{i:07d}.{ext}" if cls else f"img_{i:07d}.{ext}"
        return self.make_sample(name, label, data, size, self.split)

    def _encode(self, image: Any) -> tuple[bytes, str, tuple[int, int]]:
        """Encoded bytes, file extension and (width, height) of one image."""
        if isinstance(image, bytes | bytearray | memoryview):
            data = bytes(image)
            return data, _bytes_ext(data), _header_size(data)
        img = image if isinstance(image, Image.Image) else Image.fromarray(np.asarray(image))
        if self.image_format == "JPEG":
            return _encode_jpeg(img), "jpg", img.size
        buf = io.BytesIO()
        img.save(buf, "PNG")
        return buf.getvalue(), "png", img.size

    def _class_dir(self, label: int | bytes | None) -> str:
        """Class directory for names: the class name when known, else ``class_NNN``."""
        if not isinstance(label, int):
            return ""
        if 0 <= label < len(self.classes):
            return self.classes[label].replace("/", "_")
        return f"class_{label:03d}"


def _to_label(raw: Any) -> int | bytes | None:
    """Normalise a dataset label: ints (incl. numpy/torch scalars), bytes, or None."""
    if raw is None or isinstance(raw, bytes):
        return raw
    if hasattr(raw, "item"):
        raw = raw.item()
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise TypeError(f"unsupported label {raw!r}: expected int, bytes or None")
    return raw


def _bytes_ext(data: bytes) -> str:
    """Extension for pre-encoded image bytes, from their magic number."""
    if data.startswith(JPEG_MAGIC):
        return "jpg"
    if data.startswith(PNG_MAGIC):
        return "png"
    return "bin"


# --------------------------------------------------------------------------------------------
# Command-line spec
# --------------------------------------------------------------------------------------------

_SPEC_HELP = "use synthetic:N[:kind] or imagefolder:PATH"
_SPEC_PARSERS: list[tuple[Callable[[str], Source | None], str]] = []


def register_spec(parse: Callable[[str], Source | None], forms: str) -> None:
    """Add source specs from another module of this package (learnable.py) without an import circle.

    `parse(spec)` returns a source, or None when the spec is not one of its `forms` (shown in errors).
    """
    _SPEC_PARSERS.append((parse, forms))


def parse_source(spec: str) -> Source:
    """A source from a CLI spec: ``synthetic:N``, ``synthetic:N:kind``, ``imagefolder:PATH`` or a registered form."""
    for parse, _ in _SPEC_PARSERS:
        found = parse(spec)
        if found is not None:
            return found
    scheme, _, rest = spec.partition(":")
    if scheme == "imagefolder" and rest:
        return ImageFolderSource(Path(rest))
    if scheme == "synthetic" and rest:
        count_text, _, kind = rest.partition(":")
        try:
            count = int(count_text)
        except ValueError:
            raise WorkbenchError(f"bad source {spec!r}: N must be an integer ({_SPEC_HELP})") from None
        if count <= 0:
            raise WorkbenchError(f"bad source {spec!r}: N must be > 0 ({_SPEC_HELP})")
        kind = kind or "classification"
        if kind not in KINDS:
            raise WorkbenchError(f"bad source {spec!r}: kind must be one of {', '.join(KINDS)}")
        return SyntheticSource(count, kind=kind)  # type: ignore[arg-type]
    extra = "".join(f", {forms}" for _, forms in _SPEC_PARSERS)
    raise WorkbenchError(f"unknown source {spec!r}: {_SPEC_HELP}{extra}")
