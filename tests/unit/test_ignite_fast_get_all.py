"""FastGetAll reads get_all answers built here byte by byte, and hands anything unusual back to pyignite (None)."""

from __future__ import annotations

import struct

from pyignite.utils import entity_id

from workbench.clients.ignite import FastGetAll


def _string(text: str) -> bytes:
    raw = text.encode()
    return bytes([9]) + struct.pack("<i", len(raw)) + raw


def _object(fields: list[tuple[str, bytes]], compact: bool, type_id: int = 7, schema_id: int = 11) -> bytes:
    """A complex object (type code 103) with 4-byte footer offsets, compact or with field ids."""
    body, offsets, pos = b"", [], 24
    for _, value in fields:
        offsets.append(pos)
        body += value
        pos += len(value)
    footer = b"".join(struct.pack("<i", off) if compact else struct.pack("<ii", entity_id(name), off)
                      for (name, _), off in zip(fields, offsets, strict=True))
    flags = 0x01 | 0x02 | (0x20 if compact else 0)
    length = 24 + len(body) + len(footer)
    header = struct.pack("<BBhiiiii", 103, 1, flags, type_id, 0, length, schema_id, 24 + len(body))
    return header + body + footer


def _answer(entries: list[tuple[str, bytes]], flags: int = 0, wrapped: bool = True) -> bytes:
    payload = struct.pack("<qh", 42, flags) + struct.pack("<i", len(entries))
    for key, obj in entries:
        payload += _string(key)
        payload += (bytes([27]) + struct.pack("<i", len(obj)) + obj + struct.pack("<i", 0)) if wrapped else obj
    return struct.pack("<i", len(payload)) + payload


FIELDS = [("id", _string("a")), ("split", _string("train")), ("label", bytes([3]) + struct.pack("<i", 5)),
          ("data", bytes([12]) + struct.pack("<i", 3) + b"\x01\x02\x03")]


def test_objects_with_field_ids_in_the_footer():
    for wrapped in (True, False):
        values = FastGetAll().parse(_answer([("a", _object(FIELDS, compact=False))], wrapped=wrapped))
        assert values is not None
        assert (values["a"].split, values["a"].label, values["a"].data) == ("train", 5, b"\x01\x02\x03")


def test_compact_footers_need_the_schema_first():
    fast = FastGetAll()
    answer = _answer([("a", _object(FIELDS, compact=True)), ("b", _object(FIELDS, compact=True))])
    assert fast.unknown(answer) == {(7, 11)}
    assert fast.parse(answer) is None  # unknown schema: pyignite decodes
    fast.learn((7, 11), ("ID", "SPLIT", "LABEL", "DATA"))  # SQL columns are upper-case
    values = fast.parse(answer)
    assert values is not None and values["b"].data == b"\x01\x02\x03" and values["b"].label == 5


def test_anything_unusual_goes_to_pyignite():
    fast = FastGetAll()
    assert fast.parse(struct.pack("<iqhi", 18, 42, 1, 3)) is None  # an error answer
    odd = [("id", _string("a")), ("data", bytes([8, 1]))]  # a bool where bytes belong
    assert fast.parse(_answer([("a", _object(odd, compact=False))])) is None
    truncated = _answer([("a", _object(FIELDS, compact=False))])[:-10]
    assert fast.parse(truncated) is None
    assert fast.parse(_answer([])) == {}
