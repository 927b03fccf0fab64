"""CONNECT: who the client is (the user store, the vhost in its user name), which session it
continues or starts (taking a client id over from a connection that still has it), and the CONNACK
with what the server allows (5.0)."""

from __future__ import annotations

import logging
import uuid

from protocols.mqtt.broker import MAX_CLIENT_ID_BYTES
from protocols.mqtt.codec import packets as pk
from protocols.mqtt.machine import errors as rc
from protocols.mqtt.machine.errors import ConnectionEnded
from protocols.mqtt.machine.topics import InvalidTopic, check_name, routing_key
from protocols.mqtt.session import NEVER_EXPIRES, Session, queue_name

log = logging.getLogger("gateway.mqtt")
DEFAULT_RECEIVE_MAXIMUM = 65_535      # the client's, unless its CONNECT says otherwise (5.0)


async def refuse(connection, code: int, why: str) -> None:
    log.info("MQTT CONNECT from %s refused: %s", connection.peer, why)
    connection.send(pk.ConnAck(code if connection.version == pk.V5 else rc.V3_CONNACK[code]))
    connection.close()


async def on_connect(connection, connect: pk.Connect) -> None:
    version = connect.version
    username = connect.username or ""
    vhost, _, name = username.rpartition(":") if ":" in username else ("/", "", username)
    password = (connect.password or b"").decode("utf-8", "replace")
    if connect.properties.get("authentication_method") is not None:
        return await refuse(connection, rc.BAD_AUTHENTICATION_METHOD if version == pk.V5 else rc.NOT_AUTHORIZED,
                            "enhanced authentication is not offered")
    user = await connection.port.log_in(name, password, _host(connection.peer),
                                        default_guest=connection.settings.default_guest)
    if user is None:
        return await refuse(connection, rc.BAD_USER_NAME_OR_PASSWORD, f"bad credentials for user {name!r}")
    namespace = connection.port.namespace_of(vhost)
    if namespace is None or not connection.port.may_open(user, *namespace):
        return await refuse(connection, rc.NOT_AUTHORIZED, f"user {name!r} may not use vhost {vhost!r}")
    client_id = connect.client_id
    assigned = None
    if not client_id:
        if version != pk.V5 and not connect.clean_start:
            return await refuse(connection, rc.CLIENT_IDENTIFIER_NOT_VALID, "empty client id with a kept session")
        client_id = assigned = "auto-" + uuid.uuid4().hex
    if len(client_id.encode()) > MAX_CLIENT_ID_BYTES:
        return await refuse(connection, rc.CLIENT_IDENTIFIER_NOT_VALID, "client id too long")
    if connect.will is not None:
        try:
            check_name(connect.will.topic)
        except InvalidTopic as exc:
            raise ConnectionEnded(rc.TOPIC_NAME_INVALID, str(exc)) from None
    if version == pk.V5:
        expiry = min(connect.properties.get("session_expiry_interval", 0), connection.settings.max_session_expiry_s)
        connection.client_receive_maximum = connect.properties.get("receive_maximum", DEFAULT_RECEIVE_MAXIMUM)
        if connection.client_receive_maximum == 0:
            raise ConnectionEnded(rc.PROTOCOL_ERROR, "receive maximum 0")
    else:
        expiry = 0 if connect.clean_start else NEVER_EXPIRES
    connection.client_id = client_id
    connection.user = user
    connection.client.user, (connection.client.tenant, connection.client.namespace) = user.principal.user, namespace
    connection.client.client_id = client_id
    connection.space = await connection.port.namespace(*namespace)
    key = (*namespace, client_id)
    async with connection.broker.session_lock(key):
        session = await connection.broker.session_for(key)
        if session is not None and session.connection is not None:
            await session.connection.take_over()
            session = connection.broker.session_for_now(key)
            if session is not None and not session.durable:   # it ended with its connection
                await connection.discard(session)
                session = None
        if session is not None and session.expired(connection.port.now_ms()):    # ran out while the gateway was down
            await connection.discard(session)
            session = None
        if session is not None:
            for handle in (session.expiry_handle, session.will_handle):
                if handle is not None:
                    handle.cancel()
            session.expiry_handle = session.will_handle = None
            if connect.clean_start:
                await connection.discard(session)
                session = None
        present = session is not None
        if session is None:
            session = Session(*namespace, client_id)
        was_durable = session.durable
        session.expiry_s = expiry
        session.connection = connection
        session.offline_since_ms = None
        connection.session = session
        connection.broker.sessions[key] = session
        # A clean session gets its queue with its first subscription: a device that only
        # publishes costs no queue.
        queue = None
        if session.durable or any(s.share_group is None for s in session.subscriptions.values()):
            queue = await connection.port.open_queue(connection.space, queue_name(client_id), durable=session.durable)
        for subscription in session.subscriptions.values():
            if subscription.share_group is None:
                await connection.port.bind(connection.space, queue.name, routing_key(subscription.topic_filter))
        if session.durable:
            await connection.broker.stored_sessions.save(session)
        elif was_durable:
            await connection.broker.stored_sessions.drop(session)
    connection.will = connect.will
    properties = {}
    if version == pk.V5:
        properties = {"receive_maximum": connection.settings.receive_maximum,
                      "topic_alias_maximum": connection.settings.topic_alias_maximum,
                      "maximum_packet_size": connection.settings.max_packet_bytes,
                      "retain_available": 1, "wildcard_subscription_available": 1,
                      "shared_subscription_available": 1, "subscription_identifier_available": 1}
        if assigned is not None:
            properties["assigned_client_identifier"] = assigned
        if connect.properties.get("session_expiry_interval", 0) != expiry:
            properties["session_expiry_interval"] = expiry
    connection.machine.accepted(connection.settings.max_packet_bytes)
    connection.send(pk.ConnAck(rc.SUCCESS, present, properties))
    for packet_id in sorted(session.awaiting_pubcomp):
        connection.send(pk.PublishAck(pk.PUBREL, packet_id))
    if queue is not None:
        await connection.consume(queue, None)
    for subscription in session.subscriptions.values():
        if subscription.share_group is not None:
            await connection.consume_share(subscription)


def _host(peer) -> str | None:
    return peer[0] if isinstance(peer, tuple) and peer else None
