"""MQTT control packets (3.1, 3.1.1 and 5.0) as typed values, and their bodies' bytes.

Every packet is one class: `decode_body(flags, reader, version)` reads the variable header and
payload of a packet whose fixed header was already taken apart by codec/framing.py, and
`encode(version)` writes the whole packet. `version` is the protocol level: 3 (3.1), 4 (3.1.1) or
5; only 5 has properties and reason codes on acknowledgements. Whatever a body leaves unread is
MALFORMED_PACKET. The four acknowledgements of a publish share one layout (`PUBLISH_ACKS`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from protocols.mqtt.codec import primitives as p
from protocols.mqtt.codec import properties as props
from protocols.mqtt.codec.errors import malformed, protocol_error

V31, V311, V5 = 3, 4, 5
PROTOCOL_NAMES = {V31: "MQIsdp", V311: "MQTT", V5: "MQTT"}

CONNECT, CONNACK, PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP = 1, 2, 3, 4, 5, 6, 7
SUBSCRIBE, SUBACK, UNSUBSCRIBE, UNSUBACK, PINGREQ, PINGRESP, DISCONNECT, AUTH = 8, 9, 10, 11, 12, 13, 14, 15

# Fixed-header flags every packet but PUBLISH must carry exactly (MQTT 5.0 table 2-2).
REQUIRED_FLAGS = {PUBREL: 0b0010, SUBSCRIBE: 0b0010, UNSUBSCRIBE: 0b0010}


def _header(packet_type: int, flags: int, body: bytes) -> bytes:
    return bytes(((packet_type << 4) | flags,)) + p.encode_varint(len(body)) + body


def _properties(version: int, values: dict[str, Any]) -> bytes:
    return props.write(values) if version == V5 else b""


@dataclass(slots=True)
class Will:
    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False
    properties: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Connect:
    TYPE: ClassVar[int] = CONNECT
    version: int = V311
    client_id: str = ""
    clean_start: bool = True
    keep_alive: int = 60
    username: str | None = None
    password: bytes | None = None
    will: Will | None = None
    properties: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def decode_body(cls, flags: int, reader: p.Reader, version: int) -> "Connect":
        name = reader.text()
        level = reader.byte()
        if (name, level) not in (("MQTT", V311), ("MQTT", V5), ("MQIsdp", V31)):
            raise UnsupportedProtocol(name, level)
        connect_flags = reader.byte()
        if connect_flags & 0x01:
            raise malformed("reserved CONNECT flag set")
        keep_alive = reader.u16()
        properties = props.read(reader) if level == V5 else {}
        client_id = reader.text()
        will = None
        will_qos = (connect_flags >> 3) & 0x03
        if connect_flags & 0x04:
            if will_qos == 3:
                raise malformed("will QoS 3")
            will_properties = props.read(reader) if level == V5 else {}
            will = Will(reader.text(), reader.binary(), will_qos, bool(connect_flags & 0x20), will_properties)
        elif will_qos or connect_flags & 0x20:
            raise malformed("will QoS or retain without a will")
        username = reader.text() if connect_flags & 0x80 else None
        if connect_flags & 0x40:
            if username is None and level != V5:
                raise malformed("password without a user name")
            password = reader.binary()
        else:
            password = None
        return cls(level, client_id, bool(connect_flags & 0x02), keep_alive, username, password, will, properties)

    def encode(self, version: int | None = None) -> bytes:
        version = self.version
        flags = 0x02 if self.clean_start else 0
        payload = p.text(self.client_id)
        if self.will is not None:
            flags |= 0x04 | (self.will.qos << 3) | (0x20 if self.will.retain else 0)
            payload += (_properties(version, self.will.properties) + p.text(self.will.topic)
                        + p.binary(self.will.payload))
        if self.username is not None:
            flags |= 0x80
            payload += p.text(self.username)
        if self.password is not None:
            flags |= 0x40
            payload += p.binary(self.password)
        body = (p.text(PROTOCOL_NAMES[version]) + bytes((version, flags)) + p.u16(self.keep_alive)
                + _properties(version, self.properties) + payload)
        return _header(CONNECT, 0, body)


class UnsupportedProtocol(Exception):
    """A CONNECT naming a protocol or level this server does not speak (CONNACK 0x01 / 0x84)."""

    def __init__(self, name: str, level: int) -> None:
        super().__init__(f"protocol {name!r} level {level}")
        self.level = level


@dataclass(slots=True)
class ConnAck:
    TYPE: ClassVar[int] = CONNACK
    reason_code: int = 0
    session_present: bool = False
    properties: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def decode_body(cls, flags: int, reader: p.Reader, version: int) -> "ConnAck":
        ack_flags = reader.byte()
        code = reader.byte()
        return cls(code, bool(ack_flags & 1), props.read(reader) if version == V5 and reader.remaining else {})

    def encode(self, version: int) -> bytes:
        return _header(CONNACK, 0, bytes((int(self.session_present), self.reason_code))
                       + _properties(version, self.properties))


@dataclass(slots=True)
class Publish:
    TYPE: ClassVar[int] = PUBLISH
    topic: str
    payload: bytes = b""
    qos: int = 0
    retain: bool = False
    dup: bool = False
    packet_id: int = 0
    properties: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def decode_body(cls, flags: int, reader: p.Reader, version: int) -> "Publish":
        qos = (flags >> 1) & 0x03
        if qos == 3:
            raise malformed("PUBLISH with QoS 3")
        topic = reader.text()
        packet_id = 0
        if qos:
            packet_id = reader.u16()
            if packet_id == 0:
                raise malformed("packet identifier 0")
        properties = props.read(reader) if version == V5 else {}
        payload = reader.take(reader.remaining)
        return cls(topic, payload, qos, bool(flags & 1), bool(flags & 0x08), packet_id, properties)

    def encode(self, version: int) -> bytes:
        flags = (0x08 if self.dup else 0) | (self.qos << 1) | (1 if self.retain else 0)
        body = p.text(self.topic) + (p.u16(self.packet_id) if self.qos else b"")
        return _header(PUBLISH, flags, body + _properties(version, self.properties) + self.payload)


@dataclass(slots=True)
class PublishAck:
    """PUBACK, PUBREC, PUBREL or PUBCOMP: a packet identifier, then (5.0) a reason code and
    properties, both left out when they are Success and empty."""
    kind: int
    packet_id: int
    reason_code: int = 0
    properties: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def decode_kind(cls, kind: int, flags: int, reader: p.Reader, version: int) -> "PublishAck":
        packet_id = reader.u16()
        code, properties = 0, {}
        if version == V5 and reader.remaining:
            code = reader.byte()
            if reader.remaining:
                properties = props.read(reader)
        return cls(kind, packet_id, code, properties)

    def encode(self, version: int) -> bytes:
        body = p.u16(self.packet_id)
        if version == V5 and (self.reason_code or self.properties):
            body += bytes((self.reason_code,))
            if self.properties:
                body += props.write(self.properties)
        return _header(self.kind, REQUIRED_FLAGS.get(self.kind, 0), body)


PUBLISH_ACKS = (PUBACK, PUBREC, PUBREL, PUBCOMP)


@dataclass(slots=True)
class SubscriptionRequest:
    topic_filter: str
    qos: int = 0
    no_local: bool = False
    retain_as_published: bool = False
    retain_handling: int = 0


@dataclass(slots=True)
class Subscribe:
    TYPE: ClassVar[int] = SUBSCRIBE
    packet_id: int
    requests: list[SubscriptionRequest]
    properties: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def decode_body(cls, flags: int, reader: p.Reader, version: int) -> "Subscribe":
        packet_id = reader.u16()
        if packet_id == 0:
            raise malformed("packet identifier 0")
        properties = props.read(reader) if version == V5 else {}
        requests = []
        while reader.remaining:
            topic_filter = reader.text()
            options = reader.byte()
            reserved = 0xC0 if version == V5 else 0xFC
            if options & reserved or options & 0x03 == 3 or (options >> 4) & 0x03 == 3:
                raise malformed(f"subscription options 0x{options:02x}")
            requests.append(SubscriptionRequest(topic_filter, options & 0x03, bool(options & 0x04),
                                                bool(options & 0x08), (options >> 4) & 0x03))
        if not requests:
            raise protocol_error("SUBSCRIBE without a topic filter")
        return cls(packet_id, requests, properties)

    def encode(self, version: int) -> bytes:
        body = p.u16(self.packet_id) + _properties(version, self.properties)
        for r in self.requests:
            options = (r.qos | (0x04 if r.no_local else 0) | (0x08 if r.retain_as_published else 0)
                       | (r.retain_handling << 4))
            body += p.text(r.topic_filter) + bytes((options,))
        return _header(SUBSCRIBE, REQUIRED_FLAGS[SUBSCRIBE], body)


@dataclass(slots=True)
class SubAck:
    TYPE: ClassVar[int] = SUBACK
    packet_id: int
    reason_codes: list[int]
    properties: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def decode_body(cls, flags: int, reader: p.Reader, version: int) -> "SubAck":
        packet_id = reader.u16()
        properties = props.read(reader) if version == V5 else {}
        return cls(packet_id, list(reader.take(reader.remaining)), properties)

    def encode(self, version: int) -> bytes:
        return _header(SUBACK, 0, p.u16(self.packet_id) + _properties(version, self.properties)
                       + bytes(self.reason_codes))


@dataclass(slots=True)
class Unsubscribe:
    TYPE: ClassVar[int] = UNSUBSCRIBE
    packet_id: int
    topic_filters: list[str]
    properties: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def decode_body(cls, flags: int, reader: p.Reader, version: int) -> "Unsubscribe":
        packet_id = reader.u16()
        if packet_id == 0:
            raise malformed("packet identifier 0")
        properties = props.read(reader) if version == V5 else {}
        filters = []
        while reader.remaining:
            filters.append(reader.text())
        if not filters:
            raise protocol_error("UNSUBSCRIBE without a topic filter")
        return cls(packet_id, filters, properties)

    def encode(self, version: int) -> bytes:
        body = p.u16(self.packet_id) + _properties(version, self.properties)
        return _header(UNSUBSCRIBE, REQUIRED_FLAGS[UNSUBSCRIBE], body + b"".join(p.text(f) for f in self.topic_filters))


@dataclass(slots=True)
class UnsubAck:
    TYPE: ClassVar[int] = UNSUBACK
    packet_id: int
    reason_codes: list[int] = field(default_factory=list)     # 5.0 only
    properties: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def decode_body(cls, flags: int, reader: p.Reader, version: int) -> "UnsubAck":
        packet_id = reader.u16()
        if version != V5:
            return cls(packet_id)
        properties = props.read(reader)
        return cls(packet_id, list(reader.take(reader.remaining)), properties)

    def encode(self, version: int) -> bytes:
        body = p.u16(self.packet_id)
        if version == V5:
            body += props.write(self.properties) + bytes(self.reason_codes)
        return _header(UNSUBACK, 0, body)


@dataclass(slots=True)
class PingReq:
    TYPE: ClassVar[int] = PINGREQ

    @classmethod
    def decode_body(cls, flags: int, reader: p.Reader, version: int) -> "PingReq":
        return cls()

    def encode(self, version: int) -> bytes:
        return b"\xc0\x00"


@dataclass(slots=True)
class PingResp:
    TYPE: ClassVar[int] = PINGRESP

    @classmethod
    def decode_body(cls, flags: int, reader: p.Reader, version: int) -> "PingResp":
        return cls()

    def encode(self, version: int) -> bytes:
        return b"\xd0\x00"


@dataclass(slots=True)
class Disconnect:
    TYPE: ClassVar[int] = DISCONNECT
    reason_code: int = 0
    properties: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def decode_body(cls, flags: int, reader: p.Reader, version: int) -> "Disconnect":
        if version != V5 or not reader.remaining:
            return cls()
        code = reader.byte()
        return cls(code, props.read(reader) if reader.remaining else {})

    def encode(self, version: int) -> bytes:
        if version != V5:
            return b"\xe0\x00"
        body = b""
        if self.reason_code or self.properties:
            body = bytes((self.reason_code,)) + (props.write(self.properties) if self.properties else b"")
        return _header(DISCONNECT, 0, body)


@dataclass(slots=True)
class Auth:
    TYPE: ClassVar[int] = AUTH
    reason_code: int = 0
    properties: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def decode_body(cls, flags: int, reader: p.Reader, version: int) -> "Auth":
        if version != V5:
            raise malformed("AUTH before MQTT 5.0")
        if not reader.remaining:
            return cls()
        code = reader.byte()
        return cls(code, props.read(reader) if reader.remaining else {})

    def encode(self, version: int) -> bytes:
        return _header(AUTH, 0, bytes((self.reason_code,)) + props.write(self.properties))


Packet = (Connect | ConnAck | Publish | PublishAck | Subscribe | SubAck | Unsubscribe | UnsubAck | PingReq | PingResp
          | Disconnect | Auth)
_BY_TYPE = {cls.TYPE: cls for cls in (Connect, ConnAck, Publish, Subscribe, SubAck, Unsubscribe, UnsubAck, PingReq,
                                      PingResp, Disconnect, Auth)}


def decode(first_byte: int, body: bytes | memoryview, version: int) -> Packet:
    """One packet from its fixed header's first byte and its body (the remaining length's bytes)."""
    packet_type, flags = first_byte >> 4, first_byte & 0x0F
    if packet_type == 0:
        raise malformed("packet type 0 is reserved")
    if packet_type != PUBLISH and flags != REQUIRED_FLAGS.get(packet_type, 0):
        raise malformed(f"fixed header flags 0x{flags:x} on packet type {packet_type}")
    reader = p.Reader(body)
    if packet_type in PUBLISH_ACKS:
        packet = PublishAck.decode_kind(packet_type, flags, reader, version)
    else:
        packet = _BY_TYPE[packet_type].decode_body(flags, reader, version)
    if reader.remaining:
        raise malformed(f"{reader.remaining} bytes left over after packet type {packet_type}")
    return packet
