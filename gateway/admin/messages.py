"""Finding messages (core/query.py) through the API, and showing them whichever protocol wrote them.

    GET /tenants/{t}/namespaces/{ns}/topics/{topic}/messages
        ?partition=&offset=            indexed: straight to that offset
        &start_ms=&end_ms=             indexed start: the first record at or after start_ms
        &key=                          scanned: the record key (UTF-8)
        &header=name:value             scanned: a Kafka record header
        &message_id=                   scanned: an AMQP message-id property
        &limit=                        at most this many (default 20)

The answer lists the messages and, per partition, where the scan stopped ("next_offsets") with
"complete": false when a budget or the limit cut it short: ask again from there.
An AMQP queue's messages are its topic's (the queue's "topic" in the queues view).
"""

# No `from __future__ import annotations` here: FastAPI must see the routes' annotations as
# objects (they name dependencies local to router()).

import base64
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, status

from core.names import TopicName
from core.query import MAX_LIMIT, MessageQuery, find_messages
from core.trace import trace_message
from core.records.decoder import DecodedRecord
from gateway.admin.security import Caller
from protocols.amqp.codec.properties import BasicProperties
from protocols.amqp.records import EXCHANGE_HEADER, PROPERTIES_HEADER

_AMQP_PROPERTIES = ("content_type", "content_encoding", "delivery_mode", "priority", "correlation_id", "reply_to",
                    "expiration", "message_id", "timestamp", "type", "user_id", "app_id")


def router(context, authenticate) -> APIRouter:
    api = APIRouter(tags=["messages"])
    Authenticated = Annotated[Caller, Depends(authenticate)]

    @api.get("/tenants/{tenant}/namespaces/{namespace}/topics/{topic}/messages")
    async def messages(tenant: str, namespace: str, topic: str, caller: Authenticated,
                       partition: Annotated[int | None, Query(ge=0)] = None,
                       offset: Annotated[int | None, Query(ge=0)] = None,
                       start_ms: Annotated[int | None, Query(ge=0)] = None,
                       end_ms: Annotated[int | None, Query(ge=0)] = None,
                       key: str | None = None, header: str | None = None, message_id: str | None = None,
                       limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 20) -> dict[str, Any]:
        caller.check_tenant(tenant)
        name = TopicName.of(topic, tenant, namespace)
        info = await context.core.registry.get_topic(name)
        if partition is not None and partition >= info.partitions:
            raise HTTPException(status.HTTP_400_BAD_REQUEST, f"topic {topic} has {info.partitions} partition(s)")
        wanted_header = None
        if header is not None:
            header_name, sep, value = header.partition(":")
            if not sep:
                raise HTTPException(status.HTTP_400_BAD_REQUEST, "header must be name:value")
            wanted_header = (header_name, value.encode())
        query = MessageQuery(partition=partition, offset=offset, start_ms=start_ms, end_ms=end_ms,
                             key=None if key is None else key.encode(), header=wanted_header,
                             matches=None if message_id is None else _has_message_id(message_id), limit=limit)
        result = await find_messages(context.core, name, query)
        return {"messages": [message_doc(found.partition, found.record) for found in result.messages],
                "next_offsets": result.next_offsets, "complete": result.complete}

    @api.get("/tenants/{tenant}/namespaces/{namespace}/topics/{topic}/partitions/{partition}/offsets/{offset}")
    async def trace(tenant: str, namespace: str, topic: str, partition: int, offset: int,
                    caller: Authenticated) -> dict[str, Any]:
        """One message and its trace: produced when and by whom, read by whom, what its queues did
        with it, acknowledged by which subscriptions (the events exist only while the namespace's
        `trace` policy is on). A message gone by retention (an AMQP queue's consumed messages go at
        once) is answered with "message": null while its trace has events; 404 otherwise."""
        caller.check_tenant(tenant)
        name = TopicName.of(topic, tenant, namespace)
        found = await find_messages(context.core, name, MessageQuery(partition=partition, offset=offset, limit=1))
        traced = await trace_message(context.core, name, partition, offset)
        if found.messages and found.messages[0].record.offset == offset:
            return {"message": message_doc(partition, found.messages[0].record), **traced}
        if traced["events"]:
            return {"message": None, **traced}
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no message at {topic}-{partition}@{offset}")

    return api


def _has_message_id(message_id: str):
    def matches(record: DecodedRecord) -> bool:
        raw = _header(record, PROPERTIES_HEADER)
        return raw is not None and _properties(raw).get("message_id") == message_id
    return matches


def message_doc(partition: int, record: DecodedRecord) -> dict[str, Any]:
    doc: dict[str, Any] = {"partition": partition, "offset": record.offset, "timestamp_ms": record.timestamp_ms,
                           "key": _text(record.key), "value": _text(record.value)}
    properties = _header(record, PROPERTIES_HEADER)
    if properties is None:
        doc["protocol"] = "kafka"
        doc["headers"] = [[name, _text(value)] for name, value in record.headers]
    else:
        doc["protocol"] = "amqp"
        doc["amqp"] = {"exchange": (_header(record, EXCHANGE_HEADER) or b"").decode("utf-8", "replace"),
                       "routing_key": _text(record.key), **_properties(properties)}
    return doc


def _header(record: DecodedRecord, name: str) -> bytes | None:
    return next((value for key, value in record.headers if key == name), None)


def _properties(raw: bytes) -> dict[str, Any]:
    try:
        decoded = BasicProperties.decode(raw)
    except Exception:   # stored as the publisher sent them: show what cannot be decoded as absent
        return {}
    found = {name: getattr(decoded, name) for name in _AMQP_PROPERTIES if getattr(decoded, name) is not None}
    if decoded.headers:
        found["headers"] = {k: v if isinstance(v, (str, int, float, bool)) else repr(v)
                            for k, v in decoded.headers.items()}
    return found


def _text(data: bytes | None) -> str | dict[str, str] | None:
    """UTF-8 text as a string, anything else as {"base64": ...}."""
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode()}
