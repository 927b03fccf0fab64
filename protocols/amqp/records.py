"""AMQP messages as the core's records, and back.

A published message becomes one record of each queue topic it is routed to:

    timestamp   the gateway's clock when the publish arrived
    key         the routing key (UTF-8)
    value       the body, as published
    headers     "amqp.exchange"    the exchange it was published to (UTF-8; "" for the default)
                "amqp.properties"  the content header's property flags and values, exactly as the
                                   publisher sent them (never decoded on the way through)

A record without these headers (one a Kafka producer wrote into the topic) is delivered with the
default exchange, its key as the routing key, and no properties.
"""

from __future__ import annotations

from core.queues.subscription import QueuedMessage
from core.records.builder import Record
from protocols.amqp.codec.primitives import TEXT_ERRORS
from protocols.amqp.codec.properties import EMPTY_PROPERTIES

EXCHANGE_HEADER = "amqp.exchange"
PROPERTIES_HEADER = "amqp.properties"


def to_record(exchange: str, routing_key: str, properties: bytes, body: bytes, now_ms: int) -> Record:
    return Record(now_ms, key=routing_key.encode("utf-8", TEXT_ERRORS), value=body,
                  headers=((EXCHANGE_HEADER, exchange.encode("utf-8", TEXT_ERRORS)), (PROPERTIES_HEADER, properties)))


def message_envelope(message: QueuedMessage) -> tuple[str, str, bytes]:
    """(exchange, routing key, raw properties) of a stored message."""
    exchange, properties = b"", None
    for name, value in message.headers:
        if name == EXCHANGE_HEADER:
            exchange = value or b""
        elif name == PROPERTIES_HEADER:
            properties = value
    routing_key = (message.key or b"").decode("utf-8", TEXT_ERRORS)
    return exchange.decode("utf-8", TEXT_ERRORS), routing_key, properties or EMPTY_PROPERTIES
