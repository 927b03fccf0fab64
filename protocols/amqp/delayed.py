"""AMQP's side of delayed-message exchanges (as RabbitMQ's rabbitmq_delayed_message_exchange plugin).

A publish to an exchange of type x-delayed-message whose `x-delay` header is a delay in ms
(an integer; a string of digits or a float are converted, as the plugin does) with
0 < delay <= 2^32-1 is held by the core until the delay has passed, then routed by the rules of
the exchange's x-delayed-type. Any other x-delay (absent, zero, negative, not a number) routes
the message at once. As with the plugin:
- the held message's x-delay header is set to -delay, so it is not delayed again when it passes
  through another delayed exchange, and consumers can tell it was delayed;
- a publisher confirm is sent once the message is durably held (not when it reaches a queue);
- the message routes nowhere at publish time, so with mandatory=true it is returned with
  312 NO_ROUTE even though it will be delivered later (the plugin's documented limitation).
Inside a transaction (tx.select) a delayed publish is NOT_IMPLEMENTED (540): holding it at once
would publish it before the commit.

`message_facts` lets the core route a held message by its headers and properties when it falls
due: they are decoded from the record's stored content header then, and only if routing asks.
"""

from __future__ import annotations

import dataclasses
import decimal
from collections.abc import Mapping
from typing import Any

from core.errors import RESOURCE, NotPermitted, Resource
from core.queues.exchange import ExchangeType
from core.queues.routing import HeadersFunction, PropertiesFunction
from core.records.builder import Record
from protocols.amqp.codec.errors import DecodeError
from protocols.amqp.codec.properties import ContentProperties
from protocols.amqp.machine.errors import AmqpConnectionError
from protocols.amqp.records import PROPERTIES_HEADER, to_record
from protocols.amqp.spec import ReplyCode

X_DELAY = "x-delay"
MAX_DELAY_MS = 2**32 - 1     # the plugin's bound (Erlang's longest timer); longer is no delay


def delay_of(value: Any) -> int | None:
    """The delay in ms an x-delay header value asks for, or None: route at once."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (str, bytes)):
        try:
            value = int(value)
        except ValueError:
            return None
    elif isinstance(value, (float, decimal.Decimal)):
        try:
            value = int(value)
        except (ValueError, OverflowError):
            return None
    if isinstance(value, int) and 0 < value <= MAX_DELAY_MS:
        return int(value)
    return None


def hold_if_delayed(channel, event, exchange: str, routing_key: str) -> bool:
    """Hold a publish to a delayed exchange that asks for a delay; False if it is to be routed now."""
    session = channel.session
    space = session.space
    found = space.routing.exchanges.get(exchange)
    if found is None or found.type is not ExchangeType.DELAYED:
        return False
    properties: ContentProperties = event.properties
    decoded = properties.decoded
    headers = decoded.headers or {}
    delay = delay_of(headers.get(X_DELAY))
    if delay is None:
        return False
    if found.internal:
        raise NotPermitted.about(Resource.exchange(exchange), f"cannot publish to internal {RESOURCE}")
    if channel.tx is not None:
        raise AmqpConnectionError(ReplyCode.NOT_IMPLEMENTED, "delayed messages in a transaction",
                                  method_name="basic.publish")
    swapped = dataclasses.replace(decoded, headers={**headers, X_DELAY: -delay}).encode()
    now_ms = session.clock.now_ms()
    durable = space.hold(exchange, to_record(exchange, routing_key, swapped, event.body, now_ms), now_ms + delay)
    if event.args["mandatory"]:
        session.write(session.machine.send_content(
            channel.number, "basic.return", properties, event.body, reply_code=ReplyCode.NO_ROUTE,
            reply_text="NO_ROUTE", exchange=exchange, routing_key=routing_key))
    session.published_to([space.held()])     # back-pressure while held messages wait to be stored
    channel.published([durable])
    return True


def message_facts(record: Record) -> tuple[HeadersFunction, PropertiesFunction]:
    """The headers and the properties (by name) of a stored AMQP message, decoded when asked."""
    raw = next((value for name, value in record.headers if name == PROPERTIES_HEADER), None)
    properties = ContentProperties.of(raw)

    def headers() -> Mapping[str, Any]:
        try:
            return properties.decoded.headers or {}
        except DecodeError:
            return {}

    def by_name() -> Mapping[str, Any]:
        try:
            return properties.decoded.present()
        except DecodeError:
            return {}

    return headers, by_name
