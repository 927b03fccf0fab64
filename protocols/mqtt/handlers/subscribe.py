"""SUBSCRIBE and UNSUBSCRIBE: a filter becomes a binding of the session's queue to amq.topic (or a
consumer of its share group's queue), answered once in place; then the retained messages it matches."""

from __future__ import annotations

import logging

from core.errors import CoreError
from protocols.mqtt import delivery
from protocols.mqtt.codec import packets as pk
from protocols.mqtt.machine import errors as rc
from protocols.mqtt.machine.errors import ConnectionEnded
from protocols.mqtt.machine.topics import InvalidTopic, check_filter, routing_key, split_shared
from protocols.mqtt.session import Subscription, queue_name, share_queue_name

log = logging.getLogger("gateway.mqtt")


async def on_subscribe(connection, subscribe: pk.Subscribe) -> None:
    session = connection.session
    identifier = None
    if connection.version == pk.V5:
        identifiers = subscribe.properties.get("subscription_identifier", [])
        identifier = identifiers[0] if identifiers else None
        if identifier == 0:
            raise ConnectionEnded(rc.PROTOCOL_ERROR, "subscription identifier 0")
    codes = []
    fresh: list[Subscription] = []
    for request in subscribe.requests:
        try:
            group, topic_filter = split_shared(check_filter(request.topic_filter))
        except InvalidTopic as exc:
            log.info("MQTT client %r: %s", connection.client_id, exc)
            codes.append(rc.TOPIC_FILTER_INVALID if connection.version == pk.V5 else rc.V3_SUBACK_FAILURE)
            continue
        if group is not None and request.no_local:
            raise ConnectionEnded(rc.PROTOCOL_ERROR, "no local on a shared subscription")
        if not connection.port.may_subscribe(connection.user, session.tenant, session.namespace, request.topic_filter):
            log.info("MQTT client %r may not subscribe to %s", connection.client_id, request.topic_filter)
            codes.append(rc.NOT_AUTHORIZED if connection.version == pk.V5 else rc.V3_SUBACK_FAILURE)
            continue
        request.qos = min(request.qos, 2)
        subscription = Subscription(request, identifier, group, topic_filter)
        existed = request.topic_filter in session.subscriptions
        session.subscriptions[request.topic_filter] = subscription
        try:
            if group is None:
                queue = await connection.session_queue()
                await connection.port.bind(connection.space, queue.name, routing_key(topic_filter))
            else:
                await connection.consume_share(subscription)
        except CoreError as exc:
            log.warning("MQTT client %r: subscribing to %s failed: %s", connection.client_id, request.topic_filter, exc)
            del session.subscriptions[request.topic_filter]
            codes.append(rc.UNSPECIFIED_ERROR if connection.version == pk.V5 else rc.V3_SUBACK_FAILURE)
            continue
        codes.append(request.qos)
        if group is None and (request.retain_handling == 0 or (request.retain_handling == 1 and not existed)):
            fresh.append(subscription)
    await connection.broker.stored_sessions.save(session)
    connection.send(pk.SubAck(subscribe.packet_id, codes))
    for subscription in fresh:
        await send_retained(connection, subscription)


async def send_retained(connection, subscription: Subscription) -> None:
    now = connection.port.now_ms()
    for message in await connection.broker.retained.matching(connection.space.tenant, connection.space.namespace,
                                                             subscription.topic_filter, now):
        qos = min(message.qos, subscription.request.qos)
        delivery.publish_to_client(connection, message, qos, True, [subscription], None, 0, False, now)


async def on_unsubscribe(connection, unsubscribe: pk.Unsubscribe) -> None:
    session = connection.session
    codes = []
    for topic_filter in unsubscribe.topic_filters:
        subscription = session.subscriptions.pop(topic_filter, None)
        if subscription is None:
            codes.append(rc.NO_SUBSCRIPTION_EXISTED)
            continue
        if subscription.share_group is None:
            await connection.port.unbind(connection.space, queue_name(session.client_id),
                                         routing_key(subscription.topic_filter))
        else:
            name = share_queue_name(subscription.share_group, subscription.topic_filter)
            consumer = connection.consumers.pop(name, None)
            if consumer is not None:
                await connection.port.stop_consuming(connection.space, consumer.queue, consumer)
        codes.append(rc.SUCCESS)
    await connection.broker.stored_sessions.save(session)
    connection.send(pk.UnsubAck(unsubscribe.packet_id, codes))
