"""Span tables (workbench.data.shard_spans): what mutation testing found unasserted (tests/mutation).

The pieces of samples whose last entry pads to another size than the others, and a table's comparison with
anything that is not a table of the same spans.
"""

from __future__ import annotations

import itertools

from workbench.data.shard_spans import BLOCK, SpanTable, member_layout, padded, rows_to_spans

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
