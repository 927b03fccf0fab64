"""MQTT's data types: two- and four-byte integers, the variable byte integer, UTF-8 strings and
binary data, each read from a bounded view with its length checked against the bytes left."""

from __future__ import annotations

import struct

from protocols.mqtt.codec.errors import malformed

VARINT_MAX = 268_435_455          # four bytes of seven bits
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")


class Reader:
    """A cursor over one packet's body; every read fails with MALFORMED_PACKET past the end."""

    __slots__ = ("data", "position", "end")

    def __init__(self, data: bytes | memoryview, position: int = 0, end: int | None = None) -> None:
        self.data = data
        self.position = position
        self.end = len(data) if end is None else end

    @property
    def remaining(self) -> int:
        return self.end - self.position

    def take(self, size: int) -> bytes:
        if size > self.end - self.position:
            raise malformed(f"{size} bytes needed, {self.end - self.position} left")
        start = self.position
        self.position += size
        return bytes(self.data[start:self.position])

    def byte(self) -> int:
        if self.position >= self.end:
            raise malformed("packet ends early")
        value = self.data[self.position]
        self.position += 1
        return value

    def u16(self) -> int:
        return _U16.unpack(self.take(2))[0]

    def u32(self) -> int:
        return _U32.unpack(self.take(4))[0]

    def varint(self) -> int:
        value, shift = 0, 0
        for _ in range(4):
            byte = self.byte()
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
        raise malformed("variable byte integer longer than four bytes")

    def binary(self) -> bytes:
        return self.take(self.u16())

    def text(self) -> str:
        return decode_text(self.binary())


def decode_text(raw: bytes) -> str:
    """A UTF-8 string as MQTT allows it: well-formed, no U+0000 (surrogates are refused by Python's codec)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise malformed("string is not well-formed UTF-8") from None
    if "\x00" in text:
        raise malformed("string contains U+0000")
    return text


def encode_varint(value: int) -> bytes:
    if not 0 <= value <= VARINT_MAX:
        raise ValueError(f"variable byte integer out of range: {value}")
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def u16(value: int) -> bytes:
    return _U16.pack(value)


def u32(value: int) -> bytes:
    return _U32.pack(value)


def binary(value: bytes) -> bytes:
    if len(value) > 0xFFFF:
        raise ValueError("binary data over 65,535 bytes")
    return _U16.pack(len(value)) + value


def text(value: str) -> bytes:
    return binary(value.encode("utf-8"))
