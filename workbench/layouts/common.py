"""What every layout checks the same way: split names (one path component) and labels against label_type."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Iterator

from workbench.data import Sample
from workbench.errors import WorkbenchError

# Split names become one path component; a leading '_' or '.' is kept for the layouts' own files.
_SPLIT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def check_split(split: str) -> str:
    if not isinstance(split, str) or not _SPLIT.match(split):
        raise WorkbenchError(
            f"invalid split name {split!r}: use 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit"
        )
    return split


def labelled(samples: Iterable[Sample], label_type: str) -> Iterator[Sample]:
    """Samples whose labels fit `label_type` (int|blob|none, as for every backend); none drops labels."""
    for s in samples:
        value = s.label
        if label_type == "none":
            yield s if value is None else dataclasses.replace(s, label=None)
            continue
        if label_type == "int" and (not isinstance(value, int) or isinstance(value, bool)):
            raise WorkbenchError(
                f"sample {s.name} has a {type(value).__name__} label but label_type is int: "
                "use --label-type blob (masks, multilabel vectors) or none"
            )
        if label_type == "blob" and not isinstance(value, bytes | bytearray):
            raise WorkbenchError(
                f"sample {s.name} has a {type(value).__name__} label but label_type is blob: "
                "use --label-type int (class indices) or none"
            )
        yield s
