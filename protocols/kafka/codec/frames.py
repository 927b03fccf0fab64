"""Kafka framing: a 4-byte size, then a request header and body, or a response header and body.

Request header v1: api_key int16, api_version int16, correlation_id int32, client_id nullable
STRING (int16 length); v2 (flexible API versions) adds tagged fields. Response header v0:
correlation_id; v1 (flexible) adds tagged fields — except ApiVersions, whose response header is
always v0 so a client can read it before knowing what the broker speaks.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from protocols.kafka.codec.errors import DecodeError
from protocols.kafka.codec.types import Reader

API_VERSIONS_KEY = 18
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_SIZE = _INT32


@dataclass(slots=True)   # not frozen: building a frozen one costs ~2 µs more, for every request
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def peek_header(frame: bytes | memoryview) -> tuple[RequestHeader, Reader]:
    """Read the version-1 part of a request header; the reader is left after client_id."""
    reader = Reader(frame)
    api_key, api_version, correlation_id = (reader.unpack(_INT16), reader.unpack(_INT16), reader.unpack(_INT32))
    length = reader.unpack(_INT16)
    if length < -1:
        raise DecodeError(f"invalid client_id length {length}")
    client_id = None if length == -1 else str(reader.take(length), "utf-8", "replace")
    return RequestHeader(api_key, api_version, correlation_id, client_id), reader


def skip_tagged_fields(reader: Reader) -> None:
    for _ in range(reader.uvarint()):
        reader.uvarint()
        reader.take(reader.uvarint())


def response_frame(correlation_id: int, body: bytes | bytearray, *, flexible_header: bool) -> bytes:
    header = struct.pack(">i", correlation_id) + (b"\x00" if flexible_header else b"")
    return _SIZE.pack(len(header) + len(body)) + header + body
