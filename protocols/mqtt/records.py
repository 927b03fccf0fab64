"""MQTT messages as the core's records, and back.

A PUBLISH becomes one record of each queue its topic is routed to (through `amq.topic`):

    timestamp   the gateway's clock when the publish arrived
    key         the routing key (the topic with "/" and "." swapped, machine/topics.py), as an AMQP
                publish to amq.topic has it, so AMQP consumers see the routing key they expect
    value       the payload
    headers     "amqp.exchange"       "amq.topic" (the exchange it went through)
                "mqtt.qos"            "0", "1" or "2"
                "mqtt.retain"         "1" when published with the retain flag
                "mqtt.from"           the publishing client id (5.0 no-local)
                "mqtt.content-type", "mqtt.response-topic", "mqtt.correlation-data",
                "mqtt.payload-format" the 5.0 properties of those names
                "queue.expires-at"    arrival + message expiry interval (the core expires it)
                "queue.transient"     "1" for QoS 0 (need not outlive a restart)
                other names           the 5.0 user properties, in their order, repeats kept; an
                                      AMQP consumer sees them as its headers table

A record no MQTT client wrote (an AMQP publish to amq.topic, a Kafka record) is delivered with the
topic of its routing key, QoS 1 at most, and its headers outside the reserved prefixes as user
properties.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from core.queues.attributes import EXCHANGE, EXPIRES_AT, TRANSIENT
from core.queues.subscription import QueuedMessage
from core.records.builder import Record
from protocols.mqtt.machine.topics import routing_key, topic_of_key

TOPIC_EXCHANGE = "amq.topic"
QOS, RETAIN, FROM = "mqtt.qos", "mqtt.retain", "mqtt.from"
# MQTT 5 properties kept with a message, and the header holding each.
CARRIED = {"content_type": "mqtt.content-type", "response_topic": "mqtt.response-topic",
           "correlation_data": "mqtt.correlation-data", "payload_format_indicator": "mqtt.payload-format"}
_BY_HEADER = {header: name for name, header in CARRIED.items()}
_RESERVED = ("mqtt.", "amqp.", "queue.", "kafka.")
_TEXT = frozenset({"content_type", "response_topic"})
_QOS_VALUES = (b"0", b"1", b"2")
FOREIGN_QOS = 1


@dataclass(slots=True)
class Message:
    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False
    properties: dict[str, Any] = field(default_factory=dict)   # the 5.0 properties carried along
    sender: str = ""                                            # client id, for no-local
    expires_at_ms: int | None = None


def to_record(message: Message, now_ms: int) -> Record:
    headers: list[tuple[str, bytes | None]] = [(EXCHANGE, TOPIC_EXCHANGE.encode()), (QOS, _QOS_VALUES[message.qos]),
                                               (FROM, message.sender.encode())]
    if message.retain:
        headers.append((RETAIN, b"1"))
    if message.qos == 0:
        headers.append((TRANSIENT, b"1"))
    for name, header in CARRIED.items():
        value = message.properties.get(name)
        if value is not None:
            headers.append((header, value.encode() if isinstance(value, str) else
                            bytes((value,)) if isinstance(value, int) else value))
    if message.expires_at_ms is not None:
        headers.append((EXPIRES_AT, str(message.expires_at_ms).encode()))
    for name, value in message.properties.get("user_property", ()):
        headers.append((name, value.encode()))
    return Record(now_ms, key=routing_key(message.topic).encode(), value=message.payload, headers=tuple(headers))


def from_queued(queued: QueuedMessage) -> Message:
    """The MQTT message a stored record stands for (whoever wrote it)."""
    topic = topic_of_key((queued.key or b"").decode("utf-8", "replace"))
    qos, retain, sender, expires = None, False, "", None
    properties: dict[str, Any] = {}
    users: list[tuple[str, str]] = []
    for name, value in queued.headers:
        if name == QOS:
            qos = int(value) if value in _QOS_VALUES else FOREIGN_QOS
        elif name == RETAIN:
            retain = True
        elif name == FROM:
            sender = (value or b"").decode("utf-8", "replace")
        elif name == EXPIRES_AT:
            expires = int(value) if value and value.isdigit() else None
        elif name in _BY_HEADER:
            prop = _BY_HEADER[name]
            value = value or b""
            properties[prop] = (value.decode("utf-8", "replace") if prop in _TEXT
                                else value[0] if prop == "payload_format_indicator" and value else value)
        elif not name.startswith(_RESERVED):
            users.append((name, (value or b"").decode("utf-8", "replace")))
    if users:
        properties["user_property"] = users
    return Message(topic, queued.value or b"", FOREIGN_QOS if qos is None else qos, retain, properties, sender, expires)
