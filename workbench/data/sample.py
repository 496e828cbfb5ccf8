"""The unit of data every backend stores: one encoded image, its label and a stable id."""

from __future__ import annotations

import hashlib
import io
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from PIL import Image, UnidentifiedImageError

from workbench.errors import WorkbenchError

# Fixed namespace so that ids are reproducible across machines and runs.
NAMESPACE: uuid.UUID = uuid.uuid5(uuid.NAMESPACE_URL, "workbench")

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
NPY_MAGIC = b"\x93NUMPY"
JPEG_MAGIC = b"\xff\xd8\xff"


def sample_id(dataset: str, name: str) -> uuid.UUID:
    """uuid5 of ``dataset + '/' + name``: re-ingesting the same source gives the same ids."""
    return uuid.uuid5(NAMESPACE, f"{dataset}/{name}")


def checksum(data: bytes) -> str:
    """Hex digest used to verify round trips.

    BLAKE2b with a 16-byte digest: faster than SHA-256 and MD5 on 64-bit CPUs, and 128 bits is
    plenty to detect corruption (this is an integrity check, not a security boundary).
    """
    return hashlib.blake2b(data, digest_size=16).hexdigest()


@dataclass(frozen=True, slots=True)
class Sample:
    """One image as stored by every backend; frozen so it can be shared between threads safely."""

    id: uuid.UUID
    name: str  # relative original name, e.g. "class_003/img_000042.jpg"
    label: int | bytes | None  # int: class; bytes: PNG mask (segmentation) or np.save vector (multilabel)
    data: bytes  # encoded image (JPEG for generated/converted data, pass-through for image folders)
    split: str = "train"  # the split the source put it in
    width: int = 0
    height: int = 0

    @property
    def checksum(self) -> str:
        """Digest of the encoded image bytes (see :func:`checksum`)."""
        return checksum(self.data)  # module-level function: class scope is not searched here

    @property
    def label_class(self) -> str:
        """Class directory of ``name`` (its first path component), or "" for flat names."""
        head, sep, _ = self.name.partition("/")
        return head if sep else ""


def int_label(raw: str | None, where: str, seen: str) -> int:
    """A stored int label (a manifest field, an object's metadata) as an int, the one rule of the object layouts'
    readers: missing or not an integer is a WorkbenchError naming `where` and what was `seen` there."""
    try:
        return int(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise WorkbenchError(f"{where} has no int label ({seen}): use label_type blob or none") from None


def encode_multilabel(arr: np.ndarray) -> bytes:
    """Serialise a multi-hot vector with ``np.save`` (self-describing dtype/shape, no pickle)."""
    buf = io.BytesIO()
    np.save(buf, np.asarray(arr), allow_pickle=False)
    return buf.getvalue()


def decode_multilabel(data: bytes) -> np.ndarray:
    """Inverse of :func:`encode_multilabel`; refuses pickled payloads; anything else is one WorkbenchError."""
    try:
        array = np.load(io.BytesIO(data), allow_pickle=False)
    except Exception as exc:  # np.load's header parser raises ValueError, SyntaxError, TokenError, EOFError...
        raise WorkbenchError(f"multilabel label of {len(data)} bytes is not an np.save array ({_clean_reason(exc)}): "
                             "re-ingest the dataset, or read the label as raw bytes") from None
    if not isinstance(array, np.ndarray):  # an .npz archive
        raise WorkbenchError("multilabel label is an .npz archive, not one np.save array: re-ingest the dataset")
    return array


def verify_image(data: bytes) -> str | None:
    """Return None if ``data`` decodes as an image, else one short reason a person can act on.

    Reasons: ``empty file (0 bytes)``, ``not an image``, ``truncated JPEG`` (or PNG...), ``truncated or corrupt
    JPEG header``, ``corrupt JPEG (<Pillow's first line>)``; never a Python repr (Pillow's own messages
    name ``<_io.BytesIO object at 0x...>``).
    ``verify()`` checks structure without decoding; a second full ``load()`` is needed because
    ``verify()`` does not notice truncated pixel data.
    """
    if not data:
        return "empty file (0 bytes)"
    fmt = _magic_format(data)
    try:
        with Image.open(io.BytesIO(data)) as img:
            fmt = img.format or fmt
            img.verify()
        with Image.open(io.BytesIO(data)) as img:
            img.load()
    except UnidentifiedImageError:  # no decoder accepts the header
        return f"truncated or corrupt {fmt} header" if fmt else "not an image"
    except Image.DecompressionBombError as exc:  # Pillow refuses to decode it, which is no corruption
        return f"too large to decode ({_clean_reason(exc)})"
    except Exception as exc:  # Pillow raises many types (OSError, SyntaxError, ValueError, struct.error...)
        reason = _clean_reason(exc)
        if isinstance(exc, EOFError) or any(word in reason.lower() for word in _TRUNCATED_WORDS):
            return f"truncated {fmt or 'image'}"
        return f"corrupt {fmt or 'image'} ({reason})"
    return None


_TRUNCATED_WORDS = ("truncated", "broken data stream", "premature end")
_MAGIC_FORMATS = ((JPEG_MAGIC, "JPEG"), (PNG_MAGIC, "PNG"), (b"GIF8", "GIF"), (b"RIFF", "WEBP"))
_REPR = re.compile(r"\s*<[^<>]*\bat 0x[0-9a-fA-F]+>")


def _magic_format(data: bytes) -> str:
    """The format a file's first bytes claim, or "" (used when Pillow cannot even open it)."""
    return next((fmt for magic, fmt in _MAGIC_FORMATS if data.startswith(magic)), "")


def _clean_reason(exc: BaseException) -> str:
    """The first line of an exception's message without object reprs; the type name when nothing is left."""
    text = str(exc).splitlines()[0] if str(exc).strip() else ""
    text = _REPR.sub("", text).strip(" :")
    return text or type(exc).__name__


Progress = Callable[[int, int], None]  # (samples, bytes) just written


@dataclass(frozen=True)
class StoredSample:
    """A sample as a backend holds it: what `verify` and the loaders' correctness tests compare."""

    id: uuid.UUID
    split: str
    label: int | bytes | None
    data: bytes


@dataclass(frozen=True, slots=True)
class Item:
    """What a loader yields: the sample id (uuid string, the same across every backend), label and bytes."""

    key: str
    label: int | bytes | None
    data: bytes
