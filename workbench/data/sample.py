"""The unit of data every backend stores: one encoded image, its label and a stable id."""

from __future__ import annotations

import hashlib
import io
import uuid
from dataclasses import dataclass

import numpy as np
from PIL import Image

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


def encode_multilabel(arr: np.ndarray) -> bytes:
    """Serialise a multi-hot vector with ``np.save`` (self-describing dtype/shape, no pickle)."""
    buf = io.BytesIO()
    np.save(buf, np.asarray(arr), allow_pickle=False)
    return buf.getvalue()


def decode_multilabel(data: bytes) -> np.ndarray:
    """Inverse of :func:`encode_multilabel`; refuses pickled payloads."""
    return np.load(io.BytesIO(data), allow_pickle=False)


def verify_image(data: bytes) -> str | None:
    """Return None if ``data`` decodes as an image, else a one-line reason.

    ``verify()`` checks structure without decoding; a second full ``load()`` is needed because
    ``verify()`` does not notice truncated pixel data.
    """
    try:
        with Image.open(io.BytesIO(data)) as img:
            img.verify()
        with Image.open(io.BytesIO(data)) as img:
            img.load()
    except Exception as exc:  # Pillow raises many types (OSError, SyntaxError, ValueError...)
        reason = str(exc).splitlines()[0] if str(exc) else ""
        return f"{type(exc).__name__}: {reason}" if reason else type(exc).__name__
    return None
