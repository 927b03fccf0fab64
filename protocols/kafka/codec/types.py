"""Kafka protocol primitives: a bounded reader, and one codec object per wire type.

Every length and count read from the wire is checked against the bytes left before anything is
allocated, so a tiny frame declaring a huge array fails at once (the KAFKA-14063 class of bug).
Every failure is a DecodeError. Codecs are compiled once per (API, version) by compile.py.

Wire types (Kafka's protocol guide): fixed-width big-endian integers; varint/uvarint; STRING =
int16 length (-1 null) + UTF-8; COMPACT_STRING = uvarint(length + 1) (0 null); BYTES/COMPACT_BYTES
the same with int32/uvarint; ARRAY = int32 count (-1 null) / COMPACT_ARRAY uvarint(count + 1);
UUID = 16 bytes; flexible structs end with tagged fields: uvarint count, then (uvarint tag,
uvarint size, bytes) each.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any

from protocols.kafka.codec.errors import DecodeError

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")

ZERO_UUID = uuid.UUID(int=0)


class Reader:
    """A cursor over one frame. Not thread-safe; one per decode."""

    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf: bytes | memoryview, pos: int = 0, end: int | None = None) -> None:
        self.buf = memoryview(buf) if not isinstance(buf, memoryview) else buf
        self.pos = pos
        self.end = len(self.buf) if end is None else end

    def left(self) -> int:
        return self.end - self.pos

    def take(self, n: int) -> memoryview:
        if n < 0 or n > self.end - self.pos:
            raise DecodeError(f"needs {n} bytes at {self.pos}, {self.end - self.pos} left")
        start = self.pos
        self.pos += n
        return self.buf[start:self.pos]

    def unpack(self, fmt: struct.Struct) -> Any:
        if fmt.size > self.end - self.pos:
            raise DecodeError(f"truncated at {self.pos}")
        value = fmt.unpack_from(self.buf, self.pos)[0]
        self.pos += fmt.size
        return value

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            if self.pos >= self.end:
                raise DecodeError("truncated varint")
            byte = self.buf[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 63:
                raise DecodeError("varint too long")

    def varint(self) -> int:
        raw = self.uvarint()
        return (raw >> 1) ^ -(raw & 1)


def write_uvarint(out: bytearray, value: int) -> None:
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def write_varint(out: bytearray, value: int) -> None:
    write_uvarint(out, (value << 1) ^ (value >> 63))


class Codec:
    """Reads and writes one value of a wire type."""

    default: Any = None
    min_bytes: int = 1   # the fewest bytes one value takes: bounds array counts before allocating

    def read(self, r: Reader) -> Any:
        raise NotImplementedError

    def write(self, out: bytearray, value: Any) -> None:
        raise NotImplementedError


class Fixed(Codec):
    def __init__(self, fmt: struct.Struct, default: Any = 0) -> None:
        self.fmt = fmt
        self.default = default
        self.min_bytes = fmt.size

    def read(self, r: Reader) -> Any:
        return r.unpack(self.fmt)

    def write(self, out: bytearray, value: Any) -> None:
        try:
            out += self.fmt.pack(value)
        except struct.error as exc:
            raise ValueError(f"{value!r} does not fit {self.fmt.format}") from exc


class Boolean(Codec):
    default = False

    def read(self, r: Reader) -> bool:
        return r.unpack(_I8) != 0

    def write(self, out: bytearray, value: Any) -> None:
        out.append(1 if value else 0)


class UnsignedVarint(Codec):
    default = 0

    def read(self, r: Reader) -> int:
        return r.uvarint()

    def write(self, out: bytearray, value: int) -> None:
        write_uvarint(out, value)


class Uuid(Codec):
    default = ZERO_UUID
    min_bytes = 16

    def read(self, r: Reader) -> uuid.UUID:
        return uuid.UUID(bytes=bytes(r.take(16)))

    def write(self, out: bytearray, value: uuid.UUID | None) -> None:
        out += (value or ZERO_UUID).bytes


def _read_length(r: Reader, compact: bool, wide: bool) -> int:
    """A length or count: -1 means null."""
    if compact:
        return r.uvarint() - 1
    return r.unpack(_I32 if wide else _I16)


def _write_length(out: bytearray, n: int, compact: bool, wide: bool) -> None:
    if compact:
        write_uvarint(out, n + 1)
    else:
        out += (_I32 if wide else _I16).pack(n)


class String(Codec):
    def __init__(self, compact: bool, nullable: bool) -> None:
        self.compact = compact
        self.nullable = nullable
        self.default = None if nullable else ""
        self.min_bytes = 1 if compact else 2

    def read(self, r: Reader) -> str | None:
        n = _read_length(r, self.compact, wide=False)
        if n < 0:
            if n == -1 and self.nullable:
                return None
            raise DecodeError(f"invalid string length {n}")
        try:
            return str(r.take(n), "utf-8")
        except UnicodeDecodeError as exc:
            raise DecodeError(f"string is not UTF-8: {exc}") from None

    def write(self, out: bytearray, value: str | None) -> None:
        if value is None:
            if not self.nullable:
                raise ValueError("null for a non-nullable string")
            _write_length(out, -1, self.compact, wide=False)
            return
        data = value.encode()
        if not self.compact and len(data) > 0x7FFF:
            raise ValueError("string too long")
        _write_length(out, len(data), self.compact, wide=False)
        out += data


class Bytes(Codec):
    """BYTES and RECORDS: a view into the frame, not a copy (records pass through untouched)."""

    def __init__(self, compact: bool, nullable: bool) -> None:
        self.compact = compact
        self.nullable = nullable
        self.default = None if nullable else b""
        self.min_bytes = 1 if compact else 4

    def read(self, r: Reader) -> memoryview | None:
        n = _read_length(r, self.compact, wide=True)
        if n < 0:
            if n == -1 and self.nullable:
                return None
            raise DecodeError(f"invalid bytes length {n}")
        return r.take(n)

    def write(self, out: bytearray, value: bytes | memoryview | None) -> None:
        if value is None:
            if not self.nullable:
                raise ValueError("null for non-nullable bytes")
            _write_length(out, -1, self.compact, wide=True)
            return
        _write_length(out, len(value), self.compact, wide=True)
        out += value


class Array(Codec):
    def __init__(self, item: Codec, compact: bool, nullable: bool) -> None:
        self.item = item
        self.compact = compact
        self.nullable = nullable
        self.min_item_bytes = max(item.min_bytes, 1)
        self.default = None if nullable else []
        self.min_bytes = 1 if compact else 4

    def read(self, r: Reader) -> list | None:
        n = _read_length(r, self.compact, wide=True)
        if n < 0:
            if n == -1 and self.nullable:
                return None
            raise DecodeError(f"invalid array length {n}")
        if n * self.min_item_bytes > r.left():
            raise DecodeError(f"array of {n} cannot fit in {r.left()} bytes")
        read = self.item.read
        return [read(r) for _ in range(n)]

    def write(self, out: bytearray, value: list | None) -> None:
        if value is None:
            if not self.nullable:
                raise ValueError("null for a non-nullable array")
            _write_length(out, -1, self.compact, wide=True)
            return
        _write_length(out, len(value), self.compact, wide=True)
        write = self.item.write
        for item in value:
            write(out, item)


INT8 = Fixed(_I8)
INT16 = Fixed(_I16)
UINT16 = Fixed(_U16)
INT32 = Fixed(_I32)
UINT32 = Fixed(_U32)
INT64 = Fixed(_I64)
FLOAT64 = Fixed(_F64, 0.0)
BOOLEAN = Boolean()
UUID_CODEC = Uuid()
