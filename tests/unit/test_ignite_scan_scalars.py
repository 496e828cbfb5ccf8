"""Scan pages of scalar entries read with struct (`workbench.clients.ignite`), built here byte by byte: what
`scan_scalars` reads, and UnusualScan for what it leaves to pyignite."""

from __future__ import annotations

import struct

import pytest

from workbench.clients.ignite import UnusualScan
from workbench.clients.ignite.scans import _answer_start, _scan_page


def _string(text: str) -> bytes:
    raw = text.encode()
    return bytes([9]) + struct.pack("<i", len(raw)) + raw


def _page(pairs: list[tuple[bytes, bytes]], more: bool) -> bytes:
    return struct.pack("<i", len(pairs)) + b"".join(k + v for k, v in pairs) + bytes([int(more)])


def _answer(payload: bytes, flags: int = 0) -> memoryview:
    body = struct.pack("<qh", 7, flags) + (struct.pack("<qi", 1, 2) if flags & 2 else b"") + payload
    return memoryview(struct.pack("<i", len(body)) + body)


def test_a_page_of_strings_integers_and_nulls():
    page = _page([(_string("id-1"), _string("train")), (_string("id-2"), bytes([101])),
                  (bytes([3]) + struct.pack("<i", -5), bytes([4]) + struct.pack("<q", 2**40)),
                  (bytes([1, 0xFF]), bytes([2]) + struct.pack("<h", 300)),
                  (_string("ünï"), bytes([12]) + struct.pack("<i", 3) + b"abc")], more=True)
    answer = _answer(page)
    pairs, more = _scan_page(answer, _answer_start(answer))
    assert pairs == [("id-1", "train"), ("id-2", None), (-5, 2**40), (-1, 300), ("ünï", b"abc")]
    assert more is True


def test_the_last_page_and_an_empty_one():
    assert _scan_page(memoryview(_page([(_string("a"), _string("b"))], more=False)), 0) == ([("a", "b")], False)
    assert _scan_page(memoryview(_page([], more=False)), 0) == ([], False)


def test_a_topology_change_moves_the_payload():
    answer = _answer(_page([(_string("k"), _string("v"))], more=False), flags=2)
    assert _scan_page(answer, _answer_start(answer)) == ([("k", "v")], False)


def test_an_error_answer_goes_to_pyignite():
    with pytest.raises(UnusualScan):
        _answer_start(_answer(struct.pack("<i", 1000) + _string("cache does not exist"), flags=1))


@pytest.mark.parametrize("value", [
    bytes([103, 1]) + bytes(22),  # a binary object
    bytes([10]) + bytes(16),  # a UUID
    bytes([8]) + bytes(1),  # a bool
])
def test_any_other_value_goes_to_pyignite(value):
    with pytest.raises(UnusualScan):
        _scan_page(memoryview(_page([(_string("k"), value)], more=False)), 0)


def test_a_truncated_page_goes_to_pyignite():
    page = _page([(_string("key"), _string("value"))], more=False)
    for cut in (2, 9, len(page) - 1):
        with pytest.raises(UnusualScan):
            _scan_page(memoryview(page[:cut]), 0)
