"""`FramedProtocol` cuts the socket's byte stream into pyignite's answers, however the reads split it."""

from __future__ import annotations

import asyncio
import importlib.metadata
import random
import struct

import pytest

from workbench.clients.ignite import framed_protocol
from workbench.errors import WorkbenchError


class Connection:
    """What the protocol hands answers to: pyignite's AioConnection routes them by request id."""

    def __init__(self) -> None:
        self.answers: list[bytes] = []

    def process_message(self, answer: bytearray) -> None:
        self.answers.append(bytes(answer))


def answer(request_id: int, body: bytes) -> bytes:
    payload = struct.pack("<qh", request_id, 0) + body
    return struct.pack("<i", len(payload)) + payload


@pytest.fixture
def protocol():
    loop = asyncio.new_event_loop()
    handshake = loop.create_future()
    handshake.set_result("done")  # connected: every answer from now on goes to process_message
    conn = Connection()
    yield framed_protocol()(conn, handshake), conn
    loop.close()


def feed(protocol, stream: bytes, reads: list[int]) -> None:
    """Deliver `stream` as a socket would, `reads[i]` bytes at most per read, through get_buffer."""
    pos, i = 0, 0
    while pos < len(stream):
        target = protocol.get_buffer(-1)
        assert len(target) > 0
        n = min(len(target), reads[i % len(reads)], len(stream) - pos)
        target[:n] = stream[pos:pos + n]
        protocol.buffer_updated(n)
        pos, i = pos + n, i + 1


@pytest.mark.parametrize("reads", [[1], [3, 7], [65536], [5, 1 << 20, 2]])
def test_answers_arrive_whole_and_in_order_however_the_reads_split_them(protocol, reads):
    proto, conn = protocol
    rng = random.Random(7)
    answers = [answer(i, rng.randbytes(n)) for i, n in enumerate([0, 1, 300, 70_000, 3, 100_000])]
    feed(proto, b"".join(answers), reads)
    assert conn.answers == answers


def test_a_negative_length_is_not_the_thin_protocol(protocol):
    proto, _ = protocol
    with pytest.raises(ConnectionError, match="-5 bytes"):
        feed(proto, struct.pack("<i", -5), [4])


def test_nothing_is_delivered_before_an_answer_is_complete(protocol):
    proto, conn = protocol
    whole = answer(1, b"x" * 100)
    feed(proto, whole[:-1], [10])
    assert conn.answers == []
    feed(proto, whole[-1:], [1])
    assert conn.answers == [whole]


def test_installed_once_and_only_into_the_protocol_it_knows(monkeypatch, caplog):
    from pyignite.connection import aio_connection

    from workbench.clients.ignite import use_framed_protocol

    original = aio_connection.BaseProtocol
    monkeypatch.setattr(aio_connection, "BaseProtocol", original)
    use_framed_protocol()
    installed = aio_connection.BaseProtocol
    assert installed.framed and issubclass(installed, original)
    use_framed_protocol()
    assert aio_connection.BaseProtocol is installed  # not framed twice

    class Changed(asyncio.Protocol):  # a pyignite whose protocol no longer has the handshake parser
        pass

    monkeypatch.setattr(aio_connection, "BaseProtocol", Changed)
    use_framed_protocol()
    assert aio_connection.BaseProtocol is Changed and "has changed" in caplog.text


class HandshakingConnection(Connection):
    """A connection whose first answer is the handshake: parsed with the client's protocol version."""

    def __init__(self) -> None:
        from pyignite.connection.protocol_context import ProtocolContext

        super().__init__()
        self.client = type("Client", (), {"protocol_context": ProtocolContext((1, 2, 0)), "compact_footer": True})()


def _string(text: str) -> bytes:
    return bytes([9]) + struct.pack("<i", len(text)) + text.encode()


def test_the_first_answer_is_the_handshake_parsed_by_pyignite_and_the_rest_go_to_their_requests():
    loop = asyncio.new_event_loop()
    try:
        handshake = loop.create_future()
        conn = HandshakingConnection()
        proto = framed_protocol()(conn, handshake)
        refused = struct.pack("<bhhh", 0, 1, 7, 0) + _string("unsupported version") + struct.pack("<i", 0)
        later = answer(5, b"page")
        feed(proto, struct.pack("<i", len(refused)) + refused + later, [3])
        result = handshake.result()
        assert (result.op_code, result.version_major, result.version_minor, result.message) == \
            (0, 1, 7, "unsupported version")
        assert conn.answers == [later]
    finally:
        loop.close()


@pytest.mark.parametrize("version", ["0.6.0", "0.6.1", "0.6.12", "0.6.2rc1"])
def test_the_pyignite_versions_it_was_written_for_are_accepted(version):
    from workbench.clients.ignite.framing import check_pyignite_version

    check_pyignite_version(version)


@pytest.mark.parametrize("version", ["0.5.2", "0.7.0", "0.7.0rc1", "1.0", "unknown", ""])
def test_another_pyignite_version_is_one_line_naming_it_the_tested_range_and_the_fix(version):
    from workbench.clients.ignite.framing import check_pyignite_version

    with pytest.raises(WorkbenchError) as refused:
        check_pyignite_version(version)
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"pyignite {version} is installed")
    assert "pyignite >=0.6,<0.7" in message and "pip install 'pyignite>=0.6,<0.7'" in message


def test_the_installed_pyignite_is_one_it_was_written_for():
    from workbench.clients.ignite.framing import check_pyignite_version, installed_pyignite

    assert installed_pyignite() == importlib.metadata.version("pyignite")
    check_pyignite_version()


@pytest.mark.parametrize("framed_before", [False, True], ids=["fresh-process", "framed-before"])
def test_another_installed_pyignite_is_refused_and_its_protocol_left_alone(monkeypatch, framed_before):
    # framed-before: an earlier loader in the same process framed pyignite already (CI's one pytest process did).
    from pyignite.connection import aio_connection

    from workbench.clients.ignite import framing

    original = aio_connection.BaseProtocol
    if framed_before and not getattr(original, "framed", False):
        original = framing.framed_protocol()
        original.framed = True
    monkeypatch.setattr(aio_connection, "BaseProtocol", original)
    monkeypatch.setattr(framing, "installed_pyignite", lambda: "0.7.1")
    with pytest.raises(WorkbenchError, match=r"^pyignite 0\.7\.1 is installed"):
        framing.use_framed_protocol()
    assert aio_connection.BaseProtocol is original
    with pytest.raises(WorkbenchError, match=r"^pyignite 0\.7\.1 is installed"):
        framing.framed_protocol()
