"""AMQP messages as the core's records, and back.

A published message becomes one record of each queue topic it is routed to:

    timestamp   the gateway's clock when the publish arrived
    key         the routing key (UTF-8)
    value       the body, as published
    headers     "amqp.exchange"    the exchange it was published to (UTF-8; "" for the default)
                "amqp.properties"  the content header's property flags and values, exactly as the
                                   publisher sent them (never decoded on the way through)
                "queue.transient"  "1" unless delivery-mode is 2 (persistent)
                "queue.priority"   the priority property, when it is set and above 0
                "queue.expires-at" arrival time + the expiration property (ms), when it is set
                "queue.group"      the x-group-id header (else JMSXGroupID), when either is set:
                                   the message group of a key-shared queue (core/queues/groups.py)

A message that was dead-lettered ("queue.death") or that a quorum queue hands out again is
delivered with its properties re-encoded: x-death, x-first-death-* and x-last-death-* headers as
RabbitMQ writes them and no expiration (dead-lettered), x-delivery-count (quorum redeliveries).

A record without "amqp.properties" (one a Kafka producer wrote into the topic) is delivered with
the default exchange, its key as the routing key, and properties made from the record: its headers
as the headers table (name -> the value's bytes as a long string, a null value as void; a repeated
name keeps its last value; a name over 255 bytes is left out) and its timestamp as the timestamp
property (seconds). Only such records are encoded on delivery; the others pass through as stored.
"""

from __future__ import annotations

import re

from core.queues import dead_letter
from core.queues.attributes import DEATH, EXPIRES_AT, GROUP, PRIORITY, TRANSIENT
from core.queues.subscription import QueuedMessage
from core.records.builder import Record
from protocols.amqp.codec.primitives import TEXT_ERRORS
from protocols.amqp.codec.errors import DecodeError
from protocols.amqp.codec.field_table import Int64, Timestamp
from protocols.amqp.codec.properties import EMPTY_PROPERTIES, BasicProperties
from protocols.amqp.machine.errors import ChannelError
from protocols.amqp.spec import ReplyCode

EXCHANGE_HEADER = "amqp.exchange"
PROPERTIES_HEADER = "amqp.properties"
_SHORTSTR_MAX = 255      # a field table's names are short strings


# The first property-flags octet (bits 15..8): which of the leading properties are present.
_CONTENT_TYPE, _CONTENT_ENCODING, _HEADERS, _DELIVERY_MODE, _PRIORITY = 0x80, 0x40, 0x20, 0x10, 0x08
_EXPIRATION = 0x01
_INTEGER_PREFIX = re.compile(r"[+-]?[0-9]+")
_TRANSIENT_HEADER = (TRANSIENT, b"1")
_PRIORITY_HEADERS = tuple((PRIORITY, str(level).encode()) for level in range(256))
GROUP_HEADERS = ("x-group-id", "JMSXGroupID")    # first found wins
# As they appear in an encoded headers table (a short string: length, then the name): looked for
# in the raw properties, so that only publishes that carry a group id decode their headers.
_GROUP_NAMES_RAW = tuple(bytes([len(name)]) + name.encode() for name in GROUP_HEADERS)


def to_record(exchange: str, routing_key: str, properties: bytes, body: bytes, now_ms: int) -> Record:
    headers = ((EXCHANGE_HEADER, exchange.encode("utf-8", TEXT_ERRORS)), (PROPERTIES_HEADER, properties))
    if properties[0] & (_DELIVERY_MODE | _PRIORITY):
        delivery_mode, priority = delivery_mode_and_priority(properties)
        if delivery_mode != 2:
            headers += (_TRANSIENT_HEADER,)
        if priority:
            headers += (_PRIORITY_HEADERS[priority],)
    else:
        headers += (_TRANSIENT_HEADER,)
    if properties[0] & _EXPIRATION:
        expiration = _decoded(properties).expiration
        if expiration is not None:
            headers += ((EXPIRES_AT, str(now_ms + parse_expiration(expiration)).encode()),)
    if properties[0] & _HEADERS and (_GROUP_NAMES_RAW[0] in properties or _GROUP_NAMES_RAW[1] in properties):
        group = group_id(_decoded(properties).headers or {})
        if group is not None:
            headers += ((GROUP, group),)
    return Record(now_ms, key=routing_key.encode("utf-8", TEXT_ERRORS), value=body, headers=headers)


def group_id(table) -> bytes | None:
    """The message group a headers table names (text as UTF-8, a number as its digits), or None."""
    for name in GROUP_HEADERS:
        value = table.get(name)
        if isinstance(value, (bytes, bytearray)):
            return bytes(value)
        if isinstance(value, str):
            return value.encode("utf-8", TEXT_ERRORS)
        if isinstance(value, int) and not isinstance(value, bool):
            return str(int(value)).encode()
    return None


def _decoded(properties: bytes) -> BasicProperties:
    try:
        return BasicProperties.decode(properties)
    except DecodeError:
        return BasicProperties()


def parse_expiration(text: str) -> int:
    """The expiration property as ms; PRECONDITION_FAILED with RabbitMQ's reason when it is not a
    non-negative integer."""
    match = _INTEGER_PREFIX.match(text)
    reason = None
    if match is None:
        reason = "no_integer"
    elif match.end() < len(text):
        reason = f'{{leftover_string,"{text[match.end():]}"}}'
    elif int(text) < 0:
        reason = f"{{value_negative,{int(text)}}}"
    if reason is not None:
        raise ChannelError(ReplyCode.PRECONDITION_FAILED, f"invalid expiration '{text}': {reason}",
                           method_name="basic.publish")
    return int(text)


def delivery_mode_and_priority(properties: bytes) -> tuple[int | None, int | None]:
    """The delivery-mode and priority properties, read straight from the raw property bytes (the
    three properties before them are skipped by their lengths, not decoded); None when absent or
    when the bytes are too short to hold them."""
    flags = properties[0]
    position = 2
    try:
        while properties[position - 1] & 1:     # further flag words (class basic has none set)
            position += 2
        if flags & _CONTENT_TYPE:
            position += 1 + properties[position]
        if flags & _CONTENT_ENCODING:
            position += 1 + properties[position]
        if flags & _HEADERS:
            position += 4 + int.from_bytes(properties[position:position + 4], "big")
        delivery_mode = priority = None
        if flags & _DELIVERY_MODE:
            delivery_mode = properties[position]
            position += 1
        if flags & _PRIORITY:
            priority = properties[position]
        return delivery_mode, priority
    except IndexError:
        return None, None


def message_envelope(message: QueuedMessage, *, counts_deliveries: bool = False) -> tuple[str, str, bytes]:
    """(exchange, routing key, raw properties) of a stored message. `counts_deliveries`: the queue
    tells a redelivered message how often it was delivered before (a quorum queue)."""
    exchange, properties, death = b"", None, None
    for name, value in message.headers:
        if name == EXCHANGE_HEADER:
            exchange = value or b""
        elif name == PROPERTIES_HEADER:
            properties = value
        elif name == DEATH:
            death = value
    routing_key = (message.key or b"").decode("utf-8", TEXT_ERRORS)
    if properties is None:
        properties = foreign_properties(message)
    if death is not None or (counts_deliveries and message.deliveries):
        properties = with_queue_headers(properties or EMPTY_PROPERTIES, death,
                                        message.deliveries if counts_deliveries else 0)
    return exchange.decode("utf-8", TEXT_ERRORS), routing_key, properties or EMPTY_PROPERTIES


def foreign_properties(message: QueuedMessage) -> bytes:
    """Properties for a record no AMQP publisher wrote: its headers and its timestamp."""
    headers = {name: value for name, value in message.headers
               if name not in (EXCHANGE_HEADER, DEATH) and len(name.encode("utf-8", TEXT_ERRORS)) <= _SHORTSTR_MAX}
    timestamp = message.timestamp_ms // 1000 if message.timestamp_ms >= 0 else None
    if not headers and timestamp is None:
        return EMPTY_PROPERTIES
    return BasicProperties(headers=headers or None, timestamp=timestamp).encode()


def with_queue_headers(properties: bytes, death: bytes | None, delivery_count: int) -> bytes:
    """The properties with the death history as x-death / x-first-death-* / x-last-death-* headers
    (and no expiration), and x-delivery-count when above 0."""
    decoded = _decoded(properties)
    headers = dict(decoded.headers or {})
    expiration = decoded.expiration
    doc = dead_letter.history(((DEATH, death),)) if death is not None else None
    if doc is not None:
        headers["x-death"] = [_x_death(entry) for entry in doc["deaths"]]
        for prefix, entry in (("x-first-death-", doc.get("first") or {}), ("x-last-death-", doc["deaths"][0])):
            for field in ("reason", "queue", "exchange"):
                if field in entry:
                    headers[prefix + field] = str(entry[field])
        expiration = None
    if delivery_count:
        headers["x-delivery-count"] = Int64(delivery_count)
    return BasicProperties(**{**decoded.present(), "headers": headers, "expiration": expiration}).encode()


def _x_death(entry: dict) -> dict:
    """One x-death table, fields in RabbitMQ's order."""
    table = {"count": Int64(int(entry.get("count", 1))), "reason": str(entry.get("reason", "")),
             "queue": str(entry.get("queue", "")), "time": Timestamp(int(entry.get("time", 0)) // 1000),
             "exchange": str(entry.get("exchange", "")),
             "routing-keys": [str(key) for key in entry.get("routing-keys", [])]}
    if "original-expiration" in entry:
        table["original-expiration"] = str(entry["original-expiration"])
    return table


def _routing_headers(properties: bytes) -> dict:
    return dict(BasicProperties.decode(properties).headers or {})


# A dead message routed through a headers exchange matches on its own headers.
dead_letter.HEADER_READERS[PROPERTIES_HEADER] = _routing_headers
