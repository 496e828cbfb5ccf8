"""pyignite's asyncio protocol replaced at run time by one that receives each answer into a buffer of its own size.

Why: pyignite's protocol grows one bytearray and copies every answer out of it twice (~25% of the asyncio
loader's client CPU). pyignite offers no hook to choose the protocol class (AioConnection looks `BaseProtocol`
up in its module), so the module's attribute is replaced: only for the pyignite versions this was written for.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.metadata
import inspect
import logging
import re
from typing import Any

from workbench.errors import WorkbenchError

log = logging.getLogger(__name__)

# The pyignite releases whose asyncio protocol this module was written for and tested with (0.6.1):
# FramedProtocol relies on BaseProtocol's constructor, its handshake sender and its attributes.
PYIGNITE_VERSIONS = ((0, 6), (0, 7))  # lowest included, first excluded
PYIGNITE_RANGE = ">=0.6,<0.7"

# pyignite's asyncio protocol appends what the socket delivers to one bytearray, copies each answer out of it
# and then copies the rest down: a 7 MB get_all answer (64 x 110 KB) is grown in 256 KB steps and copied
# twice, ~14 MB of memcpy and a reallocated buffer per batch on the loop thread. `FramedProtocol` receives
# each answer straight into a buffer of its own length (asyncio's BufferedProtocol: the socket writes into
# it); the handshake and the routing of answers to their requests stay pyignite's: the handshake answer is
# parsed by pyignite's public HandshakeResponse (what its private BaseProtocol.__parse_handshake calls).


@functools.cache
def installed_pyignite() -> str:
    """The installed pyignite's version (its package metadata); "unknown" without metadata."""
    try:
        return importlib.metadata.version("pyignite")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def check_pyignite_version(installed: str | None = None) -> None:
    """One WorkbenchError line unless `installed` (default: the installed pyignite) is in PYIGNITE_VERSIONS."""
    installed = installed_pyignite() if installed is None else installed
    found = re.match(r"(\d+)\.(\d+)", installed)
    release = (int(found.group(1)), int(found.group(2))) if found else None
    lowest, beyond = PYIGNITE_VERSIONS
    if release is None or not lowest <= release < beyond:
        raise WorkbenchError(
            f"pyignite {installed} is installed, but the workbench's asyncio Ignite protocol "
            f"(workbench.clients.ignite.framing) was written for pyignite {PYIGNITE_RANGE} (tested with 0.6.1): "
            f"install one (pip install 'pyignite{PYIGNITE_RANGE}')")


def framed_protocol() -> type:
    """pyignite's asyncio protocol with answers received into buffers of their own size (see above)."""
    from pyignite.connection import aio_connection
    from pyignite.connection.handshake import HandshakeResponse
    from pyignite.stream.binary_stream import BinaryStreamBase

    check_pyignite_version()
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
                client = self._conn.client
                with BinaryStreamBase(client, answer) as stream:
                    self._handshake_fut.set_result(HandshakeResponse.parse(stream, client.protocol_context))
            elif not self._handshake_fut.cancelled():
                self._conn.process_message(answer)

    return FramedProtocol


def use_framed_protocol() -> None:
    """Make pyignite's asyncio connections use `FramedProtocol` (its connections look the protocol class up in
    their module when they connect). Once per process; a WorkbenchError for a pyignite version it was not
    written for, and pyignite's own protocol stays if its shape changed."""
    from pyignite.connection import aio_connection

    check_pyignite_version()  # first: a process that framed pyignite before still refuses another version
    base = aio_connection.BaseProtocol
    if getattr(base, "framed", False):
        return
    if not _known_shape(base):
        log.warning("pyignite's asyncio protocol has changed: answers are received by pyignite's own framing")
        return
    framed = framed_protocol()
    framed.framed = True
    aio_connection.BaseProtocol = framed


def _known_shape(base: type) -> bool:
    """Whether `base` is the protocol FramedProtocol extends: made with (conn, handshake_fut), sending the
    handshake when connected and framing answers itself (what FramedProtocol replaces)."""
    try:
        params = list(inspect.signature(base.__init__).parameters)
    except (TypeError, ValueError):
        return False
    return params == ["self", "conn", "handshake_fut"] and {"connection_made", "data_received"} <= set(vars(base))
