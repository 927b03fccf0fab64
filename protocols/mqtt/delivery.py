"""Messages of a session's queues to the client: which of its subscriptions a message matches (MQTT's
own rules), at which QoS, with which 5.0 properties; QoS 1/2 deliveries stay unacknowledged in the
queue until the client's PUBACK / PUBREC, QoS 0 ones are acknowledged once written."""

from __future__ import annotations

import math

from core.connections import ClientConnection
from core.queues.queue import Queue
from core.queues.subscription import QueuedMessage
from protocols.mqtt.codec import packets as pk
from protocols.mqtt.machine.topics import matches
from protocols.mqtt.records import Message, from_queued
from protocols.mqtt.session import Subscription


class SessionConsumer:
    """The core's Consumer of one queue (the session's, or a share group's) for one connection."""

    __slots__ = ("connection", "queue", "prefetch", "auto_ack", "share")

    def __init__(self, connection, queue: Queue, prefetch: int,
                 share: Subscription | None = None) -> None:
        self.connection = connection
        self.queue = queue
        self.prefetch = prefetch
        self.auto_ack = False
        self.share = share

    @property
    def client(self) -> ClientConnection:
        return self.connection.client

    def can_deliver(self) -> bool:
        return self.connection.can_deliver()

    def deliver(self, message: QueuedMessage) -> None:
        deliver(self.connection, self, message)

    def flush(self) -> None:
        self.connection.flush()

    def queue_deleted(self) -> None:
        pass


def deliver(connection, consumer: SessionConsumer, queued: QueuedMessage) -> None:
    """A message of one of this session's queues (called by the queue's dispatcher)."""
    message = from_queued(queued)
    now = connection.port.now_ms()
    if consumer.share is not None:
        subscriptions = [consumer.share] if matches(consumer.share.topic_filter, message.topic) else []
    else:
        subscriptions = [s for s in connection.session.subscriptions.values()
                         if s.share_group is None and matches(s.topic_filter, message.topic)]
    subscriptions = [s for s in subscriptions if not (s.request.no_local and message.sender == connection.client_id)]
    expired = message.expires_at_ms is not None and message.expires_at_ms <= now
    if not subscriptions or expired:
        connection.ack_later(consumer.queue, queued.offset)
        return
    qos = min(message.qos, max(s.request.qos for s in subscriptions))
    retain = message.retain and any(s.request.retain_as_published for s in subscriptions)
    publish_to_client(connection, message, qos, retain, subscriptions, consumer.queue, queued.offset,
                      queued.redelivered, now)


def publish_to_client(connection, message: Message, qos: int, retain: bool, subscriptions: list[Subscription],
                      queue: Queue | None, offset: int, dup: bool, now: int) -> None:
    properties = {}
    if connection.version == pk.V5:
        properties = dict(message.properties)
        identifiers = sorted({s.identifier for s in subscriptions if s.identifier})
        if identifiers:
            properties["subscription_identifier"] = identifiers
        if message.expires_at_ms is not None:
            properties["message_expiry_interval"] = max(0, math.ceil((message.expires_at_ms - now) / 1000))
    packet_id = 0
    if qos:
        packet_id = connection.machine.take_packet_id(connection.inflight.keys() | connection.session.awaiting_pubcomp)
    sent = connection.send(pk.Publish(message.topic, message.payload, qos, retain, dup and qos > 0, packet_id,
                                      properties))
    if qos and sent:
        connection.inflight[packet_id] = (queue, offset)
    elif queue is not None:
        connection.ack_later(queue, offset)
