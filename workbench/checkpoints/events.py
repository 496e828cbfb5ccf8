"""TensorBoard event files written to any binary file object (an ``ignite://`` file, S3, a local file).

Why our own writer: TensorBoard's and torch's writers open their files through TensorFlow's gfile
whenever TensorFlow is importable (it is here), and gfile knows no ``ignite://`` (nor any fsspec
protocol); TensorBoard itself is not a dependency. The format is small and stable: TFRecord framing
(length, masked CRC-32C of the length, the record, masked CRC-32C of the record) around ``Event``
protocol buffers; scalars are ``Summary.Value`` with ``simple_value``. The messages are encoded here
(a dozen lines of protobuf wire format); tests read the files back with TensorFlow's own record reader
and ``Event`` parser. File names follow TensorBoard's ``events.out.tfevents.<time>.<host>.<pid>``, so
TensorBoard finds them in a directory.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from typing import BinaryIO

FILE_VERSION = "brain.Event:2"


def _crc32c_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1  # Castagnoli, reflected
        table.append(crc)
    return table


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), what TFRecord framing uses; plain Python: event records are small."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def event_file_name(suffix: str = "") -> str:
    """TensorBoard's file name for a new event file of this process."""
    return f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}{suffix}"


def masked_crc(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def record(data: bytes) -> bytes:
    """One TFRecord: the framing TensorBoard and tf.data read."""
    header = struct.pack("<Q", len(data))
    return header + struct.pack("<I", masked_crc(header)) + data + struct.pack("<I", masked_crc(data))


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int64 as two's complement, as protobuf does
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _bytes_field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def event(wall_time: float, step: int = 0, *, file_version: str | None = None,
          scalars: dict[str, float] | None = None) -> bytes:
    """An ``Event`` message: wall_time (1, double), step (2, int64), file_version (3) or summary (5)."""
    out = _varint(1 << 3 | 1) + struct.pack("<d", wall_time)
    if step:
        out += _varint(2 << 3) + _varint(step)
    if file_version is not None:
        out += _bytes_field(3, file_version.encode())
    if scalars:
        values = b"".join(_bytes_field(1, _bytes_field(1, tag.encode()) + _varint(2 << 3 | 5)
                                       + struct.pack("<f", value)) for tag, value in scalars.items())
        out += _bytes_field(5, values)
    return out


class EventWriter:
    """Scalars into an event file on `file` (its bytes become visible when `file` commits, at `close`)."""

    def __init__(self, file: BinaryIO) -> None:
        self.file = file
        self.file.write(record(event(time.time(), file_version=FILE_VERSION)))

    def scalars(self, step: int, values: dict[str, float], wall_time: float | None = None) -> None:
        self.file.write(record(event(time.time() if wall_time is None else wall_time, step,
                                     scalars={tag: float(v) for tag, v in values.items()})))

    def close(self) -> None:
        self.file.close()

    def __enter__(self) -> EventWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        exit_ = getattr(self.file, "__exit__", None)
        if exit_ is not None:
            exit_(exc_type, exc, tb)  # a writer that aborts on an exception does so
        else:
            self.file.close()
