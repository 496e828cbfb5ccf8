"""get_all of sample objects without pyignite's per-object decoding (the loaders' hot path).

`FastGetAll` builds pyignite's own OP_CACHE_GET_ALL request and reads only the fields a loader needs from the
answer; None for anything unusual, so pyignite's own get_all (and its errors) handle the rest.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Iterator
from typing import Any

from workbench.clients.ignite.wire import (
    COMPACT,
    COMPLEX,
    HAS_SCHEMA,
    OFFSET_1,
    OFFSET_2,
    STRING,
    WRAPPED,
    Unusual,
    payload_start,
    scalar,
)

# pyignite builds ctypes types for every binary object it reads (~1 ms of CPU per 110 KB sample, most of a
# core at a few hundred samples/s). `FastGetAll` sends the same OP_CACHE_GET_ALL request pyignite builds,
# and reads the answer with struct and memoryview slices: only the fields a loader needs (id, split, label,
# data) are decoded, the byte arrays copied once. Anything it does not know (an error answer, another key
# or field type, nested objects) makes it return None, and the caller asks pyignite's own get_all instead:
# unusual data and server errors keep pyignite's behaviour and our existing messages.

_WANTED = ("split", "label", "data")


class Fields:
    """The fields a loader reads from a sample object (what `field()` of the loaders looks up by name)."""

    __slots__ = ("data", "label", "split")

    def __init__(self, split: str | None, label: int | bytes | None, data: bytes | None) -> None:
        self.split, self.label, self.data = split, label, data


class FastGetAll:
    """Requests and answers of OP_CACHE_GET_ALL for one pyignite client (sync or asyncio).

    Field names come from the object's schema; with compact footers (the default) the schema is the
    client's binary type registry, asked once per (type, schema) (`learn`).
    """

    def __init__(self) -> None:
        self.names: dict[tuple[int, int], tuple[str, ...] | None] = {}

    @staticmethod
    def request(client: Any, cache_info: Any, keys: list[str]) -> tuple[int, bytes]:
        """(query id, request bytes) of a get_all, built by pyignite's own query classes."""
        from pyignite.datatypes import AnyDataArray
        from pyignite.queries import Query
        from pyignite.queries.op_codes import OP_CACHE_GET_ALL
        from pyignite.stream import BinaryStream

        query = Query(OP_CACHE_GET_ALL, [("cache_info", type(cache_info)), ("keys", AnyDataArray())])
        with BinaryStream(client) as stream:
            query.from_python(stream, {"cache_info": cache_info, "keys": keys})
            return query.query_id, stream.getvalue()

    def unknown(self, answer: bytes | bytearray) -> set[tuple[int, int]]:
        """(type id, schema id) of the objects in `answer` whose field names are not known yet."""
        found: set[tuple[int, int]] = set()
        with contextlib.suppress(Unusual, struct.error, IndexError):
            for _, start, _ in self._entries(memoryview(answer)):
                ids = _ids_of(memoryview(answer), start)
                if ids is not None and ids not in self.names:
                    found.add(ids)
        return found

    def learn(self, ids: tuple[int, int], names: tuple[str, ...] | None) -> None:
        self.names[ids] = names

    def parse(self, answer: bytes | bytearray) -> dict[str, Fields] | None:
        """{key: Fields} of a get_all answer, or None when pyignite must decode it (see above)."""
        view = memoryview(answer)
        try:
            return {key: self._fields(view, start) for key, start, _ in self._entries(view)}
        except (Unusual, struct.error, IndexError, UnicodeDecodeError):
            return None

    @staticmethod
    def _entries(view: memoryview) -> Iterator[tuple[str, int, int]]:
        """(key, start of the value object, its end) of every entry; raises Unusual on anything unexpected."""
        pos = payload_start(view)
        (count,) = struct.unpack_from("<i", view, pos)
        pos += 4
        for _ in range(count):
            if view[pos] != STRING:
                raise Unusual
            (n,) = struct.unpack_from("<i", view, pos + 1)
            key = str(view[pos + 5:pos + 5 + n], "utf-8")
            pos += 5 + n
            code = view[pos]
            if code == WRAPPED:  # byte array length, the object(s), offset of the value inside
                (n,) = struct.unpack_from("<i", view, pos + 1)
                (offset,) = struct.unpack_from("<i", view, pos + 5 + n)
                start, pos = pos + 5 + offset, pos + 9 + n
                if view[start] != COMPLEX:
                    raise Unusual
                yield key, start, start + struct.unpack_from("<i", view, start + 12)[0]
            elif code == COMPLEX:
                (n,) = struct.unpack_from("<i", view, pos + 12)
                yield key, pos, pos + n
                pos += n
            else:
                raise Unusual

    def _fields(self, view: memoryview, start: int) -> Fields:
        (flags,) = struct.unpack_from("<h", view, start + 2)
        length, schema_id, schema_offset = struct.unpack_from("<iii", view, start + 12)
        (type_id,) = struct.unpack_from("<i", view, start + 4)
        if not flags & HAS_SCHEMA:
            raise Unusual
        size = 1 if flags & OFFSET_1 else 2 if flags & OFFSET_2 else 4
        fmt = {1: "<B", 2: "<H", 4: "<i"}[size]
        offsets: dict[str, int] = {}
        if flags & COMPACT:
            names = self.names.get((type_id, schema_id))
            if names is None:
                raise Unusual
            for i, name in enumerate(names):
                if name.lower() in _WANTED:  # SQL columns are upper-case
                    offsets[name.lower()] = struct.unpack_from(fmt, view, start + schema_offset + i * size)[0]
        else:
            ids = {_field_id(n): n for n in _WANTED}
            pos, end = start + schema_offset, start + length
            while pos + 4 + size <= end:
                (fid,) = struct.unpack_from("<i", view, pos)
                if fid in ids:
                    offsets[ids[fid]] = struct.unpack_from(fmt, view, pos + 4)[0]
                pos += 4 + size
        values = {name: _value(view, start + off) for name, off in offsets.items()}
        data = values.get("data")
        if data is not None and not isinstance(data, bytes):
            raise Unusual
        return Fields(values.get("split"), values.get("label"), data)


def _ids_of(view: memoryview, start: int) -> tuple[int, int] | None:
    (flags,) = struct.unpack_from("<h", view, start + 2)
    if not flags & COMPACT:
        return None
    return struct.unpack_from("<i", view, start + 4)[0], struct.unpack_from("<i", view, start + 16)[0]


def _value(view: memoryview, pos: int) -> Any:
    return scalar(view, pos)[0]


def _field_id(name: str) -> int:
    from pyignite.utils import entity_id

    return entity_id(name)


def schema_names(client: Any, type_id: int, schema_id: int) -> tuple[str, ...] | None:
    """Field names of a binary type's schema, in order, from a sync client's registry (None if unknown)."""
    with contextlib.suppress(Exception):
        cls = client.query_binary_type(type_id, schema_id)
        if cls is not None:
            return tuple(cls._schema)
    return None


async def schema_names_async(client: Any, type_id: int, schema_id: int) -> tuple[str, ...] | None:
    """schema_names for an AioClient."""
    with contextlib.suppress(Exception):
        cls = await client.query_binary_type(type_id, schema_id)
        if cls is not None:
            return tuple(cls._schema)
    return None
