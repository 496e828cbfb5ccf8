"""Scans of Ignite caches: pyignite's cursor, a whole-cache scan that must see every entry (`scan_whole`), and
scans of scalar entries read with struct (`scan_scalars`), which keep pyignite's ctypes types out of RSS."""

from __future__ import annotations

import contextlib
import logging
import struct
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from workbench.clients.ignite.wire import Unusual, payload_start, scalar
from workbench.errors import WorkbenchError

if TYPE_CHECKING:
    from pyignite import Client

log = logging.getLogger(__name__)


def scan_cursor(client: Client, cache_name: str, page_size: int, partition: int, local: bool):
    return client.get_cache(cache_name).scan(page_size=page_size, partitions=partition, local=local)


SCAN_ATTEMPTS = 5  # full scans of a cache before a short one is an error
SCAN_PAUSE_S = 1.0  # between them: partitions moving to a node that (re)joined settle within seconds


def scan_whole(client: Client, cache_name: str, where: str, scan: Callable[[], int],
               attempts: int = SCAN_ATTEMPTS, pause_s: float = SCAN_PAUSE_S,
               sleep: Callable[[float], None] = time.sleep) -> None:
    """Run `scan` (a full scan of the cache, started afresh on each call, returning how many entries it saw)
    until it saw at least the cache's size (primary copies, asked after each scan); a WorkbenchError when it
    stays short.

    Why: a scan query over a cluster can miss partitions that move between nodes after one (re)joined; once,
    under CI's load, a loader listed 151 of 300 ids right after a node restart and silently read half an
    epoch. More entries than the size is fine (written meanwhile). Costs one size request per scan.
    """
    seen = size = 0
    for attempt in range(attempts):
        if attempt:
            sleep(pause_s)
        seen = scan()
        size = client.get_cache(cache_name).get_size()
        if seen >= size:
            return
        log.warning("a scan of Ignite cache %s at %s saw %d of its %d entries: scanning it again", cache_name,
                    where, seen, size)
    raise WorkbenchError(
        f"Ignite cache {cache_name} at {where} holds {size} entries but the last of {attempts} scans of it saw {seen}: "
        "its partitions are still moving between nodes (one joined or left?); try again once the cluster has "
        "rebalanced (`workbench stack status`)")


# pyignite reads a scan page by building one ctypes structure type for the whole page, a field per key and
# value: listing 20,000 sample ids at 5,000 a page peaked at ~50 MB of Python objects, which the process kept
# as RSS (most of the loader's growth from 2,000 to 20,000 samples, issue 13). `scan_scalars` sends pyignite's
# own OP_QUERY_SCAN requests and reads the pages with struct: the ids and splits and nothing else.


class UnusualScan(Exception):
    """An entry `scan_scalars` does not read (not a string, bytes, null or integer), or an error answer: ask
    pyignite's own scan, which decodes anything and raises its own errors."""


def scan_scalars(client: Client, cache_name: str, page_size: int) -> Iterator[tuple[Any, Any]]:
    """(key, value) of every entry of a cache of scalar keys and values, a page at a time on one connection
    (a scan cursor lives on the connection that opened it). UnusualScan can come after some pages: a caller
    that falls back to pyignite's scan starts over."""
    from pyignite.datatypes import Bool, Int, Long, Null
    from pyignite.queries import Query
    from pyignite.queries.op_codes import OP_QUERY_SCAN, OP_QUERY_SCAN_CURSOR_GET_PAGE, OP_RESOURCE_CLOSE
    from pyignite.stream import BinaryStream

    def send(op: int, fields: list, values: dict) -> memoryview:
        query = Query(op, fields)
        with BinaryStream(client) as stream:
            query.from_python(stream, values)
            return memoryview(node.request(stream.getvalue()))

    node = client.random_node
    cache = client.get_cache(cache_name)
    answer = send(OP_QUERY_SCAN, [("cache_info", type(cache.cache_info)), ("filter", Null), ("page_size", Int),
                                  ("partitions", Int), ("local", Bool)],
                  {"cache_info": cache.cache_info, "filter": None, "page_size": page_size, "partitions": -1,
                   "local": 0})
    pos = _answer_start(answer)
    try:
        (cursor,) = struct.unpack_from("<q", answer, pos)
    except struct.error as exc:
        raise UnusualScan from exc
    more = True
    try:
        pairs, more = _scan_page(answer, pos + 8)
        yield from pairs
        while more:
            answer = send(OP_QUERY_SCAN_CURSOR_GET_PAGE, [("cursor", Long)], {"cursor": cursor})
            pairs, more = _scan_page(answer, _answer_start(answer))
            yield from pairs
    finally:
        if more:  # stopped early (an error, or the caller): free the cursor on the server
            with contextlib.suppress(Exception):
                send(OP_RESOURCE_CLOSE, [("resource_id", Long)], {"resource_id": cursor})


def _answer_start(answer: memoryview) -> int:
    """`payload_start` of a scan answer; UnusualScan for an error answer."""
    try:
        return payload_start(answer)
    except (Unusual, struct.error) as exc:
        raise UnusualScan from exc


def _scan_page(answer: memoryview, pos: int) -> tuple[list[tuple[Any, Any]], bool]:
    """(pairs, more) of one scan page: int32 count, key and value objects, bool more."""
    try:
        (count,) = struct.unpack_from("<i", answer, pos)
        pos += 4
        pairs = []
        for _ in range(count):
            key, pos = scalar(answer, pos)
            value, pos = scalar(answer, pos)
            pairs.append((key, value))
        return pairs, bool(answer[pos])
    except (Unusual, struct.error, IndexError, UnicodeDecodeError) as exc:
        raise UnusualScan from exc
