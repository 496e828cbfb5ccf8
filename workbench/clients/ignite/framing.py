"""pyignite's asyncio protocol replaced at run time by one that receives each answer into a buffer of its own size.

Why: pyignite's protocol grows one bytearray and copies every answer out of it twice (~25% of the asyncio
loader's client CPU). The handshake and the routing of answers to their requests stay pyignite's.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

log = logging.getLogger(__name__)

# pyignite's asyncio protocol appends what the socket delivers to one bytearray, copies each answer out of it
# and then copies the rest down: a 7 MB get_all answer (64 x 110 KB) is grown in 256 KB steps and copied
# twice, ~14 MB of memcpy and a reallocated buffer per batch on the loop thread. `FramedProtocol` receives
# each answer straight into a buffer of its own length (asyncio's BufferedProtocol: the socket writes into
# it); the handshake and the routing of answers to their requests stay pyignite's.


def framed_protocol() -> type:
    """pyignite's asyncio protocol with answers received into buffers of their own size (see above)."""
    from pyignite.connection import aio_connection

    base = aio_connection.BaseProtocol

    class FramedProtocol(base, asyncio.BufferedProtocol):  # type: ignore[misc, valid-type]
        def __init__(self, conn: Any, handshake_fut: asyncio.Future) -> None:
            super().__init__(conn, handshake_fut)
            self._length = bytearray(4)  # the length prefix of the next answer
            self._answer: bytearray | None = None  # the answer being received, length prefix included
            self._filled = 0

        def get_buffer(self, sizehint: int) -> memoryview:
            target = self._length if self._answer is None else self._answer
            return memoryview(target)[self._filled:]

        def buffer_updated(self, nbytes: int) -> None:
            self._filled += nbytes
            if self._answer is None:
                if self._filled < 4:
                    return
                size = int.from_bytes(self._length, "little", signed=True)
                if size < 0:
                    raise ConnectionError(f"Ignite sent an answer of {size} bytes: not the thin protocol")
                self._answer = bytearray(4 + size)
                self._answer[:4] = self._length
            if self._filled == len(self._answer):
                answer, self._answer, self._filled = self._answer, None, 0
                self._deliver(answer)

        def _deliver(self, answer: bytearray) -> None:
            if not self._handshake_fut.done():
                self._handshake_fut.set_result(base._BaseProtocol__parse_handshake(answer, self._conn.client))
            elif not self._handshake_fut.cancelled():
                self._conn.process_message(answer)

    return FramedProtocol


def use_framed_protocol() -> None:
    """Make pyignite's asyncio connections use `FramedProtocol` (its connections look the protocol class up in
    their module when they connect). Once per process; pyignite's own protocol stays if its shape changed."""
    from pyignite.connection import aio_connection

    base = aio_connection.BaseProtocol
    if getattr(base, "framed", False):
        return
    if not hasattr(base, "_BaseProtocol__parse_handshake"):
        log.warning("pyignite's asyncio protocol has changed: answers are received by pyignite's own framing")
        return
    framed = framed_protocol()
    framed.framed = True
    aio_connection.BaseProtocol = framed
