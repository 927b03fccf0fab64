"""Content headers: class id, weight, body size, and the basic properties.

A header payload is class-id short | weight short | body-size longlong | property flags | values.
The flags are shorts whose bit 0 says another flags short follows; class basic has 14 properties,
flagged from bit 15 down to bit 2, so it needs one. RabbitMQ ignores bits 1..0 beyond the
continuation bit, and so do we.

`ContentProperties` keeps the raw property bytes (flags and values) as they came off the wire and
decodes them only when asked, once, so a message that is only passed on is never decoded:
`send_content` writes the raw bytes back unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from protocols.amqp.codec.errors import frame_error
from protocols.amqp.codec.field_table import decode_table, put_table
from protocols.amqp.codec.primitives import U8, U16, U64, Reader, put, put_shortstr
from protocols.amqp.spec import BASIC_CLASS_ID, BASIC_PROPERTIES, Domain

HEADER_PREFIX_SIZE = 12   # class id, weight, body size


@dataclass(frozen=True, slots=True)
class BasicProperties:
    """The 14 properties of class basic; None means absent (its flag bit is clear)."""

    content_type: str | None = None
    content_encoding: str | None = None
    headers: Mapping[str, Any] | None = None
    delivery_mode: int | None = None       # 1 transient, 2 persistent
    priority: int | None = None
    correlation_id: str | None = None
    reply_to: str | None = None
    expiration: str | None = None          # milliseconds, as a decimal string
    message_id: str | None = None
    timestamp: int | None = None           # seconds since the epoch
    type: str | None = None
    user_id: str | None = None
    app_id: str | None = None
    cluster_id: str | None = None

    def encode(self) -> bytes:
        """The flags and values, as they follow the body size in a content header."""
        flags = 0
        out = bytearray(b"\0\0")
        for bit, prop in zip(_FLAG_BITS, BASIC_PROPERTIES):
            value = getattr(self, prop.attr)
            if value is None:
                continue
            flags |= bit
            _PUT[prop.domain](out, value)
        out[0:2] = U16.pack(flags)
        return bytes(out)

    @classmethod
    def decode(cls, raw: bytes) -> "BasicProperties":
        """The properties from flags-and-values bytes; DecodeError (FRAME_ERROR) if they do not parse."""
        reader = Reader(raw)
        flags = reader.short()
        continuation = flags
        while continuation & 1:     # flags words beyond the first: basic has no properties there
            continuation = reader.short()
        values: dict[str, Any] = {}
        for bit, prop in zip(_FLAG_BITS, BASIC_PROPERTIES):
            if flags & bit:
                values[prop.attr] = _READ[prop.domain](reader)
        if reader.remaining:
            raise frame_error(f"content header: {reader.remaining} bytes after the last property")
        return cls(**values)

    def present(self) -> dict[str, Any]:
        """The properties that are set, by Python name."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}


_FLAG_BITS = tuple(1 << (15 - index) for index in range(len(BASIC_PROPERTIES)))
_PUT = {
    Domain.SHORTSTR: put_shortstr, Domain.TABLE: put_table,
    Domain.OCTET: lambda out, v: put(out, U8, v), Domain.TIMESTAMP: lambda out, v: put(out, U64, v),
}
_READ = {
    Domain.SHORTSTR: lambda r: r.shortstr(), Domain.TABLE: decode_table,
    Domain.OCTET: Reader.octet, Domain.TIMESTAMP: Reader.longlong,
}
assert [f.name for f in fields(BasicProperties)] == [p.attr for p in BASIC_PROPERTIES]

EMPTY_PROPERTIES = b"\0\0"


class ContentProperties:
    """Raw property bytes, decoded on first use. Equal when the raw bytes are."""

    __slots__ = ("raw", "_decoded")

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self._decoded: BasicProperties | None = None

    @classmethod
    def of(cls, properties: "BasicProperties | ContentProperties | bytes | None") -> "ContentProperties":
        if properties is None:
            return cls(EMPTY_PROPERTIES)
        if isinstance(properties, ContentProperties):
            return properties
        if isinstance(properties, BasicProperties):
            instance = cls(properties.encode())
            instance._decoded = properties
            return instance
        return cls(bytes(properties))

    @property
    def decoded(self) -> BasicProperties:
        """The properties; raises DecodeError if the raw bytes do not parse (not cached then)."""
        if self._decoded is None:
            self._decoded = BasicProperties.decode(self.raw)
        return self._decoded

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ContentProperties) and other.raw == self.raw

    def __hash__(self) -> int:
        return hash(self.raw)

    def __repr__(self) -> str:
        return f"ContentProperties({self.raw!r})"


@dataclass(slots=True)
class ContentHeader:
    class_id: int
    weight: int
    body_size: int
    properties: ContentProperties


def decode_content_header(payload: bytes) -> ContentHeader:
    """Splits a header frame payload; the properties stay raw. FRAME_ERROR if under 14 bytes."""
    if len(payload) < HEADER_PREFIX_SIZE + 2:
        raise frame_error(f"content header of {len(payload)} bytes is too short")
    class_id, weight = U16.unpack_from(payload, 0)[0], U16.unpack_from(payload, 2)[0]
    body_size = U64.unpack_from(payload, 4)[0]
    return ContentHeader(class_id, weight, body_size, ContentProperties(bytes(payload[HEADER_PREFIX_SIZE:])))


def encode_content_header(body_size: int, properties: "BasicProperties | ContentProperties | bytes | None",
                          class_id: int = BASIC_CLASS_ID) -> bytes:
    raw = ContentProperties.of(properties).raw
    return U16.pack(class_id) + b"\0\0" + U64.pack(body_size) + raw
