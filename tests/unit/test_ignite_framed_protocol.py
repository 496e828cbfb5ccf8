"""`FramedProtocol` cuts the socket's byte stream into pyignite's answers, however the reads split it."""

from __future__ import annotations

import asyncio
import random
import struct

import pytest

from workbench.clients.ignite import framed_protocol


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
