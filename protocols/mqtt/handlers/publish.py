"""PUBLISH from the client (and its will), and the acknowledgements of publishes both ways.

A QoS 1 or 2 publish is routed and appended at once; its PUBACK / PUBREC waits in the connection's
line of replies until every queue it reached stored it (and, for QoS 2 in a kept session, until its
packet identifier is stored with the session), and replies leave in the order their publishes came.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from functools import partial

from protocols.mqtt.codec import packets as pk
from protocols.mqtt.machine import errors as rc
from protocols.mqtt.machine.errors import ConnectionEnded
from protocols.mqtt.machine.topics import InvalidTopic, check_name, routing_key
from protocols.mqtt.records import CARRIED, Message, to_record
from protocols.mqtt.session import Session

log = logging.getLogger("gateway.mqtt")
_WILL_PROPERTIES = ("message_expiry_interval", *CARRIED, "user_property")


def publish_will(connection, session: Session) -> None:
    will = connection.will
    delay = will.properties.get("will_delay_interval", 0) if connection.version == pk.V5 else 0
    delay = min(delay, session.expiry_s)
    if delay > 0:
        session.will_handle = connection.loop.call_later(
            delay, lambda: asyncio.ensure_future(will_now(connection, will)))
    else:
        asyncio.ensure_future(will_now(connection, will))


async def will_now(connection, will: pk.Will) -> None:
    properties = {name: will.properties[name] for name in _WILL_PROPERTIES if name in will.properties}
    message = message_of(connection, will.topic, will.payload, will.qos, will.retain, properties)
    try:
        waiting, _ = route(connection, message)
        if waiting:
            await asyncio.gather(*waiting)
    except Exception as exc:
        log.warning("MQTT client %r: publishing its will failed: %s", connection.client_id, exc)


def message_of(connection, topic: str, payload: bytes, qos: int, retain: bool, properties: dict) -> Message:
    expiry = properties.pop("message_expiry_interval", None)
    now = connection.port.now_ms()
    return Message(topic, payload, qos, retain, properties, connection.client_id,
                   None if expiry is None else now + expiry * 1000)


def route(connection, message: Message) -> tuple[list[Awaitable], bool]:
    """Append to every queue the topic reaches (and keep it as retained): what to wait for, and
    whether any queue was reached."""
    space = connection.space
    waiting = connection.port.publish(space, routing_key(message.topic), to_record(message, connection.port.now_ms()),
                                      expires=message.expires_at_ms is not None)
    routed = bool(waiting)
    if message.retain:
        waiting.append(asyncio.ensure_future(connection.broker.retained.put(space.tenant, space.namespace, message)))
    return waiting, routed


def on_publish(connection, publish: pk.Publish) -> None:
    try:
        check_name(publish.topic)
    except InvalidTopic as exc:
        raise ConnectionEnded(rc.TOPIC_NAME_INVALID, str(exc)) from None
    if publish.qos and publish.packet_id not in connection.inbound_qos:
        if len(connection.inbound_qos) >= connection.settings.receive_maximum and connection.version == pk.V5:
            raise ConnectionEnded(rc.RECEIVE_MAXIMUM_EXCEEDED, "more QoS 1/2 publishes in flight than allowed")
    session = connection.session
    kind = pk.PUBACK if publish.qos == 1 else pk.PUBREC
    if not connection.port.may_publish(connection.user, session.tenant, session.namespace, publish.topic):
        log.info("MQTT client %r may not publish to %s", connection.client_id, publish.topic)
        if connection.version == pk.V5 and publish.qos:
            reply(connection, None, pk.PublishAck(kind, publish.packet_id, rc.NOT_AUTHORIZED))
        elif publish.qos:
            raise ConnectionEnded(rc.NOT_AUTHORIZED, f"not authorized to publish to {publish.topic}")
        return
    if publish.qos == 2 and publish.packet_id in session.received_qos2:
        reply(connection, None, pk.PublishAck(pk.PUBREC, publish.packet_id))   # stored already: not again
        return
    if publish.qos == 2 and publish.packet_id in session.storing_qos2:   # a resend while the first is stored
        reply(connection, session.storing_qos2[publish.packet_id], pk.PublishAck(pk.PUBREC, publish.packet_id))
        return
    properties = {name: publish.properties[name] for name in (*CARRIED, "message_expiry_interval", "user_property")
                  if name in publish.properties}
    message = message_of(connection, publish.topic, publish.payload, publish.qos, publish.retain, properties)
    waiting, routed = route(connection, message)
    if publish.qos == 0:
        for future in waiting:
            asyncio.ensure_future(future).add_done_callback(_quiet)
        return
    code = rc.SUCCESS if routed or connection.version != pk.V5 else rc.NO_MATCHING_SUBSCRIBERS
    connection.inbound_qos.add(publish.packet_id)
    stored = _all_of(waiting)
    if publish.qos == 2:
        if session.durable:     # the identifier is stored too before PUBREC: a resend after a restart is known
            stored = asyncio.ensure_future(qos2_stored(connection, stored, publish.packet_id))
            session.storing_qos2[publish.packet_id] = stored
        else:
            session.received_qos2.add(publish.packet_id)
    reply(connection, stored, pk.PublishAck(kind, publish.packet_id, code), publish.packet_id)


async def qos2_stored(connection, stored: asyncio.Future | None, packet_id: int) -> None:
    session = connection.session
    try:
        if stored is not None:
            await stored
        session.received_qos2.add(packet_id)
        await connection.broker.stored_sessions.save(session)
    finally:
        session.storing_qos2.pop(packet_id, None)


def reply(connection, waiting: asyncio.Future | None, packet: pk.PublishAck, packet_id: int = 0) -> None:
    """Send `packet` once `waiting` is done and every reply before it was sent."""
    connection.replies.append((waiting, packet, packet_id))
    if waiting is None:
        send_replies(connection)
    else:
        waiting.add_done_callback(partial(send_replies, connection))


def send_replies(connection, _future: asyncio.Future | None = None) -> None:
    replies = connection.replies
    while replies:
        waiting, packet, packet_id = replies[0]
        if waiting is not None and not waiting.done():
            return
        replies.popleft()
        connection.inbound_qos.discard(packet_id)
        if waiting is not None and (waiting.cancelled() or waiting.exception() is not None):
            error = "cancelled" if waiting.cancelled() else waiting.exception()
            log.warning("MQTT client %r: storing a publish failed: %s", connection.client_id, error)
            if connection.version != pk.V5:
                connection.close()      # 3.1.1 has no way to say so: the client sends it again
                return
            packet.reason_code = rc.UNSPECIFIED_ERROR
        connection.send(packet)


def on_publish_ack(connection, ack: pk.PublishAck) -> None:
    session = connection.session
    if session is None:
        raise ConnectionEnded(rc.PROTOCOL_ERROR, "acknowledgement before CONNECT")
    if ack.kind == pk.PUBREL:
        known = ack.packet_id in session.received_qos2
        session.received_qos2.discard(ack.packet_id)
        code = rc.SUCCESS if known or connection.version != pk.V5 else rc.PACKET_IDENTIFIER_NOT_FOUND
        saved = None
        if known and session.durable:
            saved = asyncio.ensure_future(connection.broker.stored_sessions.save(session))
        reply(connection, saved, pk.PublishAck(pk.PUBCOMP, ack.packet_id, code))
        return
    if ack.kind == pk.PUBCOMP:
        session.awaiting_pubcomp.discard(ack.packet_id)
        return
    entry = connection.inflight.pop(ack.packet_id, None)
    if entry is not None:
        queue, offset = entry
        if queue is not None:
            connection.ack_later(queue, offset)
    if ack.kind == pk.PUBREC and entry is not None and ack.reason_code < 0x80:
        session.awaiting_pubcomp.add(ack.packet_id)
        connection.send(pk.PublishAck(pk.PUBREL, ack.packet_id))


def _all_of(waiting: list[Awaitable]) -> asyncio.Future | None:
    """One future for all of `waiting` (None for nothing to wait for)."""
    if not waiting:
        return None
    if len(waiting) == 1:
        return asyncio.ensure_future(waiting[0])
    return asyncio.gather(*waiting)


def _quiet(future: asyncio.Future) -> None:
    if not future.cancelled():
        future.exception()
