"""Field tables and arrays with every type RabbitMQ reads and writes.

    t bool        b int8      B uint8     s int16     u uint16    I int32     i uint32
    l int64       f float32   d float64   D decimal   S longstr   A array     T timestamp
    F table       V void      x byte array                         (and L, read as int64, as RabbitMQ does)

Decoded values are plain Python values, with the wire type kept where a plain value would lose it,
so decode-then-encode reproduces the bytes:

    t -> bool       d -> float        S -> str (bytes if not UTF-8)    F -> dict     A -> list
    V -> None       D -> Decimal      b B s u I i l -> Int8 ... Int64  (int subclasses)
    f -> Float32    T -> Timestamp    x -> ByteArray                   (float/int/bytes subclasses)

Encoding infers the type of plain values: bool t, int I (l when it does not fit 32 bits), float d,
Decimal D, str and bytes S, datetime T, Mapping F, list/tuple A, None V; the subclasses above pin
their own type. Nesting (tables and arrays inside each other) is bounded by MAX_DEPTH.
"""

from __future__ import annotations

import datetime
import decimal
import struct
from collections.abc import Mapping
from typing import Any

from protocols.amqp.codec.errors import syntax_error
from protocols.amqp.codec.primitives import (
    F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, Reader, put, put_longstr, put_shortstr,
)

MAX_DEPTH = 64


class _Typed:
    """Mixin: the wire type a value was read as, kept for writing it back."""

    __slots__ = ()
    tag: bytes
    fmt: struct.Struct

    def __repr__(self) -> str:
        return f"{type(self).__name__}({super().__repr__()})"


class Int8(_Typed, int):
    tag, fmt = b"b", I8


class UInt8(_Typed, int):
    tag, fmt = b"B", U8


class Int16(_Typed, int):
    tag, fmt = b"s", I16


class UInt16(_Typed, int):
    tag, fmt = b"u", U16


class Int32(_Typed, int):
    tag, fmt = b"I", I32


class UInt32(_Typed, int):
    tag, fmt = b"i", U32


class Int64(_Typed, int):
    tag, fmt = b"l", I64


class Timestamp(_Typed, int):
    """Seconds since the epoch (AMQP timestamps have no finer resolution)."""
    tag, fmt = b"T", U64


class Float32(_Typed, float):
    tag, fmt = b"f", F32


class ByteArray(_Typed, bytes):
    """RabbitMQ's 'x' type: bytes that are not a string."""
    tag, fmt = b"x", U32


_FIXED_TYPES: dict[int, type] = {ord(t.tag): t for t in (Int8, UInt8, Int16, UInt16, Int32, UInt32, Int64,
                                                          Timestamp, Float32)}
_FIXED_TYPES[ord("L")] = Int64   # RabbitMQ reads 'L' as a signed 64-bit value too


# --- decoding -------------------------------------------------------------------------------------

def decode_table(reader: Reader, depth: int = 0) -> dict[str, Any]:
    """A length-prefixed table at the reader's position."""
    return decode_table_body(reader.sub_reader(reader.long()), depth)


def decode_table_body(reader: Reader, depth: int = 0) -> dict[str, Any]:
    """The entries of a table whose length is already known: all of `reader`'s remaining bytes."""
    if depth >= MAX_DEPTH:
        raise syntax_error(f"field tables nested deeper than {MAX_DEPTH}")
    table: dict[str, Any] = {}
    while reader.remaining:
        name = reader.shortstr()
        table[name] = _decode_value(reader, depth)
    return table


def _decode_array(reader: Reader, depth: int) -> list[Any]:
    if depth >= MAX_DEPTH:
        raise syntax_error(f"field arrays nested deeper than {MAX_DEPTH}")
    items = reader.sub_reader(reader.long())
    values = []
    while items.remaining:
        values.append(_decode_value(items, depth))
    return values


def _decode_value(reader: Reader, depth: int) -> Any:
    tag = reader.octet()
    fixed = _FIXED_TYPES.get(tag)
    if fixed is not None:
        return fixed(reader.unpack(fixed.fmt))
    if tag == 0x53:  # S
        raw = reader.longstr()
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return raw
    if tag == 0x74:  # t: RabbitMQ reads any non-zero octet as true
        return reader.octet() != 0
    if tag == 0x64:  # d
        return reader.unpack(F64)
    if tag == 0x46:  # F
        return decode_table(reader, depth + 1)
    if tag == 0x41:  # A
        return _decode_array(reader, depth + 1)
    if tag == 0x56:  # V
        return None
    if tag == 0x78:  # x
        return ByteArray(reader.longstr())
    if tag == 0x44:  # D
        scale = reader.octet()
        unscaled = reader.long()
        return decimal.Decimal(unscaled).scaleb(-scale)
    raise syntax_error(f"unknown field table value type {bytes([tag])!r}")


# --- encoding -------------------------------------------------------------------------------------

def encode_table(table: Mapping[str, Any] | None) -> bytes:
    """A table with its length prefix."""
    out = bytearray()
    put_table(out, table)
    return bytes(out)


def put_table(out: bytearray, table: Mapping[str, Any] | None, depth: int = 0) -> None:
    start = len(out)
    out += b"\0\0\0\0"
    put_table_body(out, table or {}, depth)
    out[start:start + 4] = U32.pack(len(out) - start - 4)


def put_table_body(out: bytearray, table: Mapping[str, Any], depth: int = 0) -> None:
    """The entries without a length prefix (as in an AMQPLAIN response)."""
    if depth >= MAX_DEPTH:
        raise ValueError(f"field tables nested deeper than {MAX_DEPTH}")
    if not isinstance(table, Mapping):
        raise TypeError(f"a field table must be a mapping, got {type(table).__name__}")
    for name, value in table.items():
        put_shortstr(out, name)
        _put_value(out, value, depth)


def _put_array(out: bytearray, values: Any, depth: int) -> None:
    if depth >= MAX_DEPTH:
        raise ValueError(f"field arrays nested deeper than {MAX_DEPTH}")
    start = len(out)
    out += b"\0\0\0\0"
    for value in values:
        _put_value(out, value, depth)
    out[start:start + 4] = U32.pack(len(out) - start - 4)


def _put_value(out: bytearray, value: Any, depth: int) -> None:
    if isinstance(value, _Typed):
        out += value.tag
        if isinstance(value, ByteArray):
            put_longstr(out, value)
        else:
            put(out, value.fmt, value)
    elif isinstance(value, bool):
        out += b"t\x01" if value else b"t\x00"
    elif isinstance(value, int):
        if -2**31 <= value < 2**31:
            out += b"I"
            put(out, I32, value)
        else:
            out += b"l"
            put(out, I64, value)
    elif isinstance(value, float):
        out += b"d"
        put(out, F64, value)
    elif isinstance(value, (str, bytes, bytearray, memoryview)):
        out += b"S"
        put_longstr(out, value)
    elif isinstance(value, Mapping):
        out += b"F"
        put_table(out, value, depth + 1)
    elif isinstance(value, (list, tuple)):
        out += b"A"
        _put_array(out, value, depth + 1)
    elif value is None:
        out += b"V"
    elif isinstance(value, decimal.Decimal):
        out += b"D"
        _put_decimal(out, value)
    elif isinstance(value, datetime.datetime):
        out += b"T"
        put(out, U64, int(value.timestamp()))
    else:
        raise TypeError(f"no field table type for {type(value).__name__}: {value!r}")


def _put_decimal(out: bytearray, value: decimal.Decimal) -> None:
    sign, digits, exponent = value.as_tuple()
    if not isinstance(exponent, int):
        raise ValueError(f"{value} has no decimal encoding")
    unscaled = int("".join(map(str, digits)) or "0")
    if exponent > 0:                 # 12E+3: scale 0, unscaled 12000
        unscaled *= 10 ** exponent
        exponent = 0
    if sign and unscaled:
        raise ValueError(f"AMQP decimals are unsigned (RabbitMQ reads the value as uint32): {value}")
    put(out, U8, -exponent)
    put(out, U32, unscaled)
