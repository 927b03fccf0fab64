"""Messages through RabbitMQ's management API: publish to an exchange, get from a queue (peeking
with ackmode ack_requeue_true), and the aliveness test. For operators' checks and scripts, not for
traffic: each call is one message or a few, awaited until stored."""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import struct
from collections.abc import Mapping
from typing import Any

from fastapi import HTTPException, status

from core.queues.exchange import ExchangeType
from core.queues.service import publish as publish_to
from gateway.admin.rabbitmq import changes
from gateway.admin.rabbitmq.changes import bad_request
from gateway.admin.rabbitmq.queries import RabbitState, existing_queue
from gateway.admin.rabbitmq.shapes import plain
from protocols.amqp.codec.errors import DecodeError
from protocols.amqp.codec.properties import BasicProperties
from protocols.amqp.records import message_envelope, to_record

MAX_GET = 1000
ACKMODES = ("ack_requeue_true", "ack_requeue_false", "reject_requeue_true", "reject_requeue_false")
ALIVENESS_QUEUE = "aliveness-test"
_PROPERTY_NAMES = frozenset(f.name for f in dataclasses.fields(BasicProperties))


def properties_of(doc: Any) -> BasicProperties:
    if not isinstance(doc, Mapping) or not set(doc) <= _PROPERTY_NAMES:
        raise bad_request(f"properties are an object of {', '.join(sorted(_PROPERTY_NAMES))}")
    try:
        properties = BasicProperties(**doc)
        properties.encode()
    except (TypeError, ValueError, OverflowError, DecodeError, AttributeError, struct.error) as exc:
        raise bad_request(f"properties cannot be encoded: {exc}") from None
    return properties


def payload_of(body: Mapping[str, Any]) -> bytes:
    payload, encoding = body.get("payload", ""), body.get("payload_encoding", "string")
    if not isinstance(payload, str):
        raise bad_request("payload must be a string")
    if encoding == "string":
        return payload.encode()
    if encoding == "base64":
        try:
            return base64.b64decode(payload, validate=True)
        except binascii.Error:
            raise bad_request("payload is not base64") from None
    raise bad_request("payload_encoding is string or base64")


async def publish(state: RabbitState, caller, vhost: str, exchange: str, body: Mapping[str, Any]) -> bool:
    """Whether the message reached a queue; returns once every queue stored it."""
    space = await changes.space_of(state, caller, vhost)
    exchange = "" if exchange == "amq.default" else exchange
    routing_key = body.get("routing_key", "")
    if not isinstance(routing_key, str):
        raise bad_request("routing_key must be a string")
    properties, payload = properties_of(body.get("properties") or {}), payload_of(body)
    await space.look_up(exchange, routing_key)
    if exchange and space.exchange(exchange).type is ExchangeType.DELAYED:
        raise bad_request("publishing to an x-delayed-message exchange through the HTTP API is not supported")
    queues = space.route(exchange, routing_key, lambda: properties.headers or {}, properties.present)
    if queues:
        record = to_record(exchange, routing_key, properties.encode(), payload, state.core.clock.now_ms())
        await asyncio.gather(*publish_to(queues, record))
    return bool(queues)


def _message_doc(message, remaining: int, encoding: str, truncate: int | None) -> dict[str, Any]:
    exchange, routing_key, raw = message_envelope(message)
    body = message.value or b""
    shown = body if truncate is None else body[:truncate]
    try:
        if encoding == "base64":
            raise UnicodeDecodeError("utf-8", b"", 0, 1, "base64 asked for")
        payload, payload_encoding = shown.decode("utf-8"), "string"
    except UnicodeDecodeError:
        payload, payload_encoding = base64.b64encode(shown).decode(), "base64"
    properties = {key: plain(value) for key, value in BasicProperties.decode(raw).present().items()}
    return {"payload_bytes": len(body), "redelivered": message.redelivered, "exchange": exchange,
            "routing_key": routing_key, "message_count": remaining, "properties": properties,
            "payload": payload, "payload_encoding": payload_encoding}


async def get(state: RabbitState, caller, vhost: str, name: str, body: Mapping[str, Any]) -> list[dict[str, Any]]:
    space = await changes.space_of(state, caller, vhost)
    queue = existing_queue(space, name)
    try:
        count = int(body.get("count", 1))
    except (TypeError, ValueError):
        raise bad_request("count must be a number") from None
    ackmode, encoding = body.get("ackmode", "ack_requeue_true"), body.get("encoding", "auto")
    truncate = body.get("truncate")
    if ackmode not in ACKMODES or encoding not in ("auto", "base64") or not 1 <= count <= MAX_GET:
        raise bad_request(f"ackmode is one of {', '.join(ACKMODES)}; encoding auto or base64; count 1..{MAX_GET}")
    if truncate is not None and (not isinstance(truncate, int) or truncate < 0):
        raise bad_request("truncate must be a number of bytes")
    if queue.info.exclusive:
        raise HTTPException(status.HTTP_405_METHOD_NOT_ALLOWED, f"queue {name!r} is exclusive to its connection")
    owner = object()
    got = []
    for _ in range(count):
        message = await queue.get(owner, auto_ack=False)
        if message is None:
            break
        got.append(message)
    remaining = await queue.message_count()      # as basic.get-ok counts: those left behind the last one
    subscription = await queue.open()
    offsets = [m.offset for m in got]
    if ackmode == "ack_requeue_false":
        subscription.ack(offsets)
    elif ackmode == "reject_requeue_false":
        subscription.reject(offsets, requeue=False)
    else:
        subscription.release(owner)       # back where they were, marked redelivered (as RabbitMQ does)
    return [_message_doc(m, remaining, encoding, truncate) for m in got]


async def aliveness(state: RabbitState, caller, vhost: str) -> None:
    """RabbitMQ's aliveness test: declare a queue, publish to it through the default exchange, get it."""
    await changes.put_queue(state, caller, vhost, ALIVENESS_QUEUE, {"durable": False})
    await publish(state, caller, vhost, "", {"routing_key": ALIVENESS_QUEUE, "payload": "test_message"})
    got = await get(state, caller, vhost, ALIVENESS_QUEUE, {"count": MAX_GET, "ackmode": "ack_requeue_false"})
    if not any(m["payload"] == "test_message" for m in got):
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, "the test message did not come back")
