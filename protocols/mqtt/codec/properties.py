"""MQTT 5.0 properties, declared once: identifier, name, type, and whether it may repeat.

A property block is a variable byte integer length followed by (identifier, value) pairs. Decoded,
it is a dict from name to value; the two properties that may repeat (user_property, a list of
(name, value) pairs in their order; subscription_identifier, a list of integers) are lists. A
property given twice that may not repeat, or an identifier not in the table, is a PROTOCOL_ERROR /
MALFORMED_PACKET as the specification asks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from protocols.mqtt.codec import primitives as p
from protocols.mqtt.codec.errors import malformed, protocol_error

BYTE, U16, U32, VARINT, TEXT, BINARY, PAIR = "byte", "u16", "u32", "varint", "text", "binary", "pair"

# (identifier, name, type, may repeat), from the MQTT 5.0 specification, section 2.2.2.2.
TABLE = (
    (0x01, "payload_format_indicator", BYTE, False),
    (0x02, "message_expiry_interval", U32, False),
    (0x03, "content_type", TEXT, False),
    (0x08, "response_topic", TEXT, False),
    (0x09, "correlation_data", BINARY, False),
    (0x0B, "subscription_identifier", VARINT, True),
    (0x11, "session_expiry_interval", U32, False),
    (0x12, "assigned_client_identifier", TEXT, False),
    (0x13, "server_keep_alive", U16, False),
    (0x15, "authentication_method", TEXT, False),
    (0x16, "authentication_data", BINARY, False),
    (0x17, "request_problem_information", BYTE, False),
    (0x18, "will_delay_interval", U32, False),
    (0x19, "request_response_information", BYTE, False),
    (0x1A, "response_information", TEXT, False),
    (0x1C, "server_reference", TEXT, False),
    (0x1F, "reason_string", TEXT, False),
    (0x21, "receive_maximum", U16, False),
    (0x22, "topic_alias_maximum", U16, False),
    (0x23, "topic_alias", U16, False),
    (0x24, "maximum_qos", BYTE, False),
    (0x25, "retain_available", BYTE, False),
    (0x26, "user_property", PAIR, True),
    (0x27, "maximum_packet_size", U32, False),
    (0x28, "wildcard_subscription_available", BYTE, False),
    (0x29, "subscription_identifier_available", BYTE, False),
    (0x2A, "shared_subscription_available", BYTE, False),
)
BY_ID = {identifier: (name, kind, repeats) for identifier, name, kind, repeats in TABLE}
BY_NAME = {name: (identifier, kind, repeats) for identifier, name, kind, repeats in TABLE}
NAMES = frozenset(BY_NAME)

_READ = {
    BYTE: p.Reader.byte, U16: p.Reader.u16, U32: p.Reader.u32, VARINT: p.Reader.varint,
    TEXT: p.Reader.text, BINARY: p.Reader.binary,
    PAIR: lambda reader: (reader.text(), reader.text()),
}
_WRITE = {
    BYTE: lambda value: bytes((value,)), U16: p.u16, U32: p.u32, VARINT: p.encode_varint,
    TEXT: p.text, BINARY: p.binary,
    PAIR: lambda pair: p.text(pair[0]) + p.text(pair[1]),
}


def read(reader: p.Reader) -> dict[str, Any]:
    length = reader.varint()
    if length > reader.remaining:
        raise malformed(f"property length {length} runs past the packet ({reader.remaining} left)")
    block = p.Reader(reader.data, reader.position, reader.position + length)
    reader.position += length
    found: dict[str, Any] = {}
    while block.remaining:
        identifier = block.varint()
        entry = BY_ID.get(identifier)
        if entry is None:
            raise malformed(f"unknown property identifier 0x{identifier:02x}")
        name, kind, repeats = entry
        value = _READ[kind](block)
        if repeats:
            found.setdefault(name, []).append(value)
        elif name in found:
            raise protocol_error(f"property {name} given twice")
        else:
            found[name] = value
    return found


def write(properties: Mapping[str, Any]) -> bytes:
    body = bytearray()
    for name, value in properties.items():
        if value is None:
            continue
        identifier, kind, repeats = BY_NAME[name]
        for one in (value if repeats else (value,)):
            body += p.encode_varint(identifier) + _WRITE[kind](one)
    return p.encode_varint(len(body)) + bytes(body)
