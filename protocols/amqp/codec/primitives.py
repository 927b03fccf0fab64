"""AMQP's primitive wire types: a bounds-checked reader and the matching writers.

Every read is checked against the end of the region being read (a frame payload, or a table inside
one), so a length that claims more bytes than are left is a FRAME_ERROR, never an over-read.
Short strings are text: decoded as UTF-8 with surrogateescape (lossless: any bytes survive a round
trip, and `strict_text` callers get an error instead), encoded back the same way.
"""

from __future__ import annotations

import struct

from protocols.amqp.codec.errors import frame_error

U8, I8 = struct.Struct(">B"), struct.Struct(">b")
U16, I16 = struct.Struct(">H"), struct.Struct(">h")
U32, I32 = struct.Struct(">I"), struct.Struct(">i")
U64, I64 = struct.Struct(">Q"), struct.Struct(">q")
F32, F64 = struct.Struct(">f"), struct.Struct(">d")

SHORTSTR_MAX = 255
TEXT_ERRORS = "surrogateescape"


class Reader:
    """Reads primitives from buf[pos:end]; running past `end` raises FRAME_ERROR."""

    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf: bytes, pos: int = 0, end: int | None = None) -> None:
        self.buf = buf
        self.pos = pos
        self.end = len(buf) if end is None else end

    @property
    def remaining(self) -> int:
        return self.end - self.pos

    def _advance(self, size: int) -> int:
        start = self.pos
        if size > self.end - start:
            raise frame_error(f"field needs {size} bytes at offset {start}, {self.end - start} left")
        self.pos = start + size
        return start

    def unpack(self, fmt: struct.Struct) -> int | float:
        return fmt.unpack_from(self.buf, self._advance(fmt.size))[0]

    def octet(self) -> int:
        return self.unpack(U8)  # type: ignore[return-value]

    def short(self) -> int:
        return self.unpack(U16)  # type: ignore[return-value]

    def long(self) -> int:
        return self.unpack(U32)  # type: ignore[return-value]

    def longlong(self) -> int:
        return self.unpack(U64)  # type: ignore[return-value]

    def take(self, size: int) -> bytes:
        start = self._advance(size)
        return bytes(self.buf[start:start + size])

    def shortstr_bytes(self) -> bytes:
        return self.take(self.octet())

    def shortstr(self, *, strict: bool = False) -> str:
        raw = self.shortstr_bytes()
        if strict:
            try:
                return raw.decode("utf-8")
            except UnicodeDecodeError:
                raise frame_error("malformed UTF-8 in shortstr") from None
        return raw.decode("utf-8", TEXT_ERRORS)

    def longstr(self) -> bytes:
        return self.take(self.long())

    def sub_reader(self, size: int) -> "Reader":
        """A reader over the next `size` bytes (a length-prefixed table or array); skips them here."""
        start = self._advance(size)
        return Reader(self.buf, start, start + size)


def text_bytes(value: str | bytes | bytearray | memoryview) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8", TEXT_ERRORS)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"expected str or bytes, got {type(value).__name__}")


def put_shortstr(out: bytearray, value: str | bytes) -> None:
    raw = text_bytes(value)
    if len(raw) > SHORTSTR_MAX:
        raise ValueError(f"shortstr is {len(raw)} bytes, the limit is {SHORTSTR_MAX}: {raw[:40]!r}...")
    out.append(len(raw))
    out += raw


def put_longstr(out: bytearray, value: str | bytes) -> None:
    raw = text_bytes(value)
    out += U32.pack(len(raw))
    out += raw


def put(out: bytearray, fmt: struct.Struct, value: int | float) -> None:
    try:
        out += fmt.pack(value)
    except struct.error as exc:
        raise ValueError(f"{value!r} does not fit format {fmt.format!r}: {exc}") from None
