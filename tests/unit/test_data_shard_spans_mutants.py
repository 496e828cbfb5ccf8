"""Span tables (workbench.data.shard_spans): what mutation testing found unasserted (tests/mutation).

The pieces of samples whose last entry pads to another size than the others, and a table's comparison with
anything that is not a table of the same spans.
"""

from __future__ import annotations

import itertools

import pytest

from workbench.data.shard_spans import BLOCK, SpanTable, member_layout, padded, row_to_span, rows_to_spans

EXTS = ("jpg", "cls", "uid")


def _table(samples: int, sizes: tuple[int, ...]) -> SpanTable:
    rows, pos = [], 0
    for i in range(samples):
        offsets, end = member_layout(pos, sizes)
        rows.append([pos, 11 * i, *(x for e, o, z in zip(EXTS, offsets, sizes, strict=True) for x in (e, o, z))])
        pos = end
    table = rows_to_spans(rows, samples, pos)
    assert isinstance(table, SpanTable)
    return table


def test_the_pieces_end_with_the_padding_of_the_last_entry_whatever_the_others_take():
    sizes = (1500, 1, 700)  # padded to 1536, 512, 1024: each entry's own padding
    table = _table(3, sizes)
    pieces = [(int(a), int(n)) for a, n in table.pieces()]
    width = 2 * len(EXTS) + 1
    assert len(pieces) == width * 3
    for i, span in enumerate(table):
        mine = pieces[i * width : (i + 1) * width]
        assert all(a + n == b for (a, n), (b, _) in itertools.pairwise(mine))
        assert mine[-1] == (span.members[-1].offset + 700, padded(700) - 700)
        assert mine[0][0] + sum(n for _, n in mine) == span.end == span.start + 3 * BLOCK + 1536 + 512 + 1024


def test_a_table_equals_only_a_sequence_of_the_same_spans():
    table = _table(4, (100, 1, 36))
    assert table == list(table) and table == tuple(table)
    assert table != list(table)[:3] and table != [*table, table[0]]
    assert table != _table(4, (101, 1, 36))
    assert table != None  # noqa: E711  # comparing with anything is False, never an error
    assert table != 5 and table != {"a": 1}


def _row(sizes=(100, 1), start=0, crc=5) -> tuple[list, int]:
    offsets, end = member_layout(start, sizes)
    return [start, crc, *(x for e, o, z in zip(EXTS, offsets, sizes, strict=False) for x in (e, o, z))], end


def test_a_row_may_end_at_the_shards_last_byte_and_carry_the_largest_crc():
    row, end = _row(crc=0xFFFFFFFF)
    assert row_to_span(row, end).end == end and row_to_span(row, end).header_crc == 0xFFFFFFFF


@pytest.mark.parametrize("row,shard_bytes,message", [
    ("x" * 200, 10**6, f"bad sample row {('x' * 200)[:80]!r}"),
    ([0, 1, "jpg", 10, 5], 10**6, "bad member 'jpg' at 10 in sample row starting at 0"),
    ([0, -1, "jpg", 512, 5], 10**6, "-1 is not a byte count"),
    ([0, 1, "jpg", 512, 600], 1000, "bad sample row starting at 0 (ends at 1536, the shard has 1000 bytes)"),
])
def test_a_bad_row_says_what_is_wrong(row, shard_bytes, message):
    with pytest.raises(ValueError) as info:
        row_to_span(row, shard_bytes)
    assert str(info.value) == message


def test_rows_that_do_not_match_the_shard_say_how():
    first, end = _row()
    with pytest.raises(ValueError) as info:
        rows_to_spans([first, first], 3, 10**6)
    assert str(info.value) == "3 samples but 2 sample rows"
    with pytest.raises(ValueError) as info:
        rows_to_spans({"rows": []}, 3, 10**6)
    assert str(info.value) == "3 samples but no sample rows"
    overlapping, _ = _row(start=end - BLOCK)
    with pytest.raises(ValueError) as info:
        rows_to_spans([first, overlapping], 2, 10**6)
    assert str(info.value) == f"sample rows overlap at {end - BLOCK}"


def test_a_table_is_indexed_from_either_end_and_says_which_index_is_out():
    table = _table(4, (100, 1, 36))
    assert table[-4] == table[0] and table[-1] == table[3]
    with pytest.raises(IndexError) as info:
        table[4]
    assert str(info.value) == "span 4 of 4"
    with pytest.raises(IndexError):
        table[-5]
