"""Reading the Ignite thin protocol's answers with struct: the header of an answer and scalar objects.

Shared by `get_all` and `scans`, which read the hot paths' answers without pyignite's per-object ctypes types;
anything they do not know raises Unusual, and the caller leaves that answer to pyignite.
"""

from __future__ import annotations

import struct
from typing import Any

HAS_SCHEMA, OFFSET_1, OFFSET_2, COMPACT = 0x02, 0x08, 0x10, 0x20
INTS = {1: "<b", 2: "<h", 3: "<i", 4: "<q"}  # byte, short, int, long objects
STRING, BYTES, NULL, WRAPPED, COMPLEX = 9, 12, 101, 27, 103


class Unusual(Exception):
    """Something these readers (FastGetAll, scan_scalars) do not decode: pyignite does."""


def payload_start(view: memoryview) -> int:
    """Where an answer's payload starts: length int32, query id int64, flags int16 (protocol >= 1.4), then after
    an affinity topology change its version (int64 + minor int32); Unusual for an error answer (pyignite
    raises its own error for it)."""
    (flags,) = struct.unpack_from("<h", view, 12)
    if flags & 1:
        raise Unusual
    return 14 + (12 if flags & 2 else 0)


def scalar(view: memoryview, pos: int) -> tuple[Any, int]:
    """(value, position after it) of a byte array, string, null or integer object; Unusual for others."""
    code = view[pos]
    if code == BYTES:
        (n,) = struct.unpack_from("<i", view, pos + 1)
        return bytes(view[pos + 5:pos + 5 + n]), pos + 5 + n
    if code == STRING:
        (n,) = struct.unpack_from("<i", view, pos + 1)
        return str(view[pos + 5:pos + 5 + n], "utf-8"), pos + 5 + n
    if code == NULL:
        return None, pos + 1
    if code in INTS:
        return struct.unpack_from(INTS[code], view, pos + 1)[0], pos + 1 + struct.calcsize(INTS[code])
    raise Unusual
