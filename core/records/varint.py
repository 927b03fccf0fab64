"""Zigzag varints as the Kafka record format uses them (protobuf-style base-128).

A value is zigzag-mapped to an unsigned number (0, -1, 1, -2, ... -> 0, 1, 2, 3, ...)
and then written seven bits at a time, least significant group first; every byte
except the last has its high bit (0x80) set.

    varint  (int32): at most 5 bytes
    varlong (int64): at most 10 bytes

Decoding is bounded: a longer run, a value that does not fit the width, or input
that ends mid-number raises MalformedVarint and never reads past the buffer.
"""

from __future__ import annotations

_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_VARINT_MAX_BYTES = 5
_VARLONG_MAX_BYTES = 10


_ONE_BYTE = tuple(bytes((raw,)) for raw in range(0x80))   # the encodings of zigzag values 0..127
# ... and of 128..16383: the lengths of records and values up to 8 KiB, looked up, not looped over
_TWO_BYTES = tuple(bytes(((raw & 0x7F) | 0x80, raw >> 7)) for raw in range(0x4000))


class MalformedVarint(ValueError):
    """The bytes at the given position are not a well-formed varint of the expected width."""


def encode_varint(value: int) -> bytes:
    """Zigzag-encode a signed 32-bit integer."""
    if -64 <= value < 64:            # one byte: most lengths and deltas of a record
        return _ONE_BYTE[(value << 1) ^ (value >> 31)]
    if -8192 <= value < 8192:
        return _TWO_BYTES[(value << 1) ^ (value >> 31)]
    if not _INT32_MIN <= value <= _INT32_MAX:
        raise ValueError(f"{value} does not fit in a varint (int32)")
    return _encode_unsigned((value << 1) ^ (value >> 31))


def encode_varlong(value: int) -> bytes:
    """Zigzag-encode a signed 64-bit integer."""
    if -64 <= value < 64:
        return _ONE_BYTE[(value << 1) ^ (value >> 63)]
    if -8192 <= value < 8192:
        return _TWO_BYTES[(value << 1) ^ (value >> 63)]
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"{value} does not fit in a varlong (int64)")
    return _encode_unsigned((value << 1) ^ (value >> 63))


def decode_varint(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """Read a zigzag int32 at ``pos``; return ``(value, position after it)``."""
    raw, end = _decode_unsigned(buf, pos, _VARINT_MAX_BYTES, bits=32)
    return (raw >> 1) ^ -(raw & 1), end


def decode_varlong(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """Read a zigzag int64 at ``pos``; return ``(value, position after it)``."""
    raw, end = _decode_unsigned(buf, pos, _VARLONG_MAX_BYTES, bits=64)
    return (raw >> 1) ^ -(raw & 1), end


def _encode_unsigned(raw: int) -> bytes:
    out = bytearray()
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def _decode_unsigned(
    buf: bytes | bytearray | memoryview, pos: int, max_bytes: int, bits: int
) -> tuple[int, int]:
    end = min(len(buf), pos + max_bytes)
    raw = 0
    shift = 0
    for index in range(pos, end):
        byte = buf[index]
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            # The last group of a maximal-length number may carry bits past the width.
            if raw >> bits:
                raise MalformedVarint(f"varint at byte {pos} overflows int{bits}")
            return raw, index + 1
        shift += 7
    if end - pos == max_bytes:
        raise MalformedVarint(f"varint at byte {pos} is longer than {max_bytes} bytes")
    raise MalformedVarint(f"varint at byte {pos} is truncated")
