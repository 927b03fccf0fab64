"""Consumers and channels of other brokers' clients, as the broker serving a queue keeps them, and
the peer requests that drive them (core/queues/remote_subscription.py is the other end).

    queue-consume  {consumer, prefetch, auto_ack, priority, exclusive}   a consumer joins
    queue-poll     {consumer}   what was handed to it, waiting up to POLL_WAIT_S for something
                                -> {"messages": [rows], "cancelled": bool}
    queue-get      {holder, auto_ack}   one message held by `holder` (a channel) -> {"message": row | null}
    queue-control  {ops}        applied in order: ["ack", offsets], ["reject", offsets, requeue],
                                ["cancel", consumer, holder | null], ["release", holder],
                                ["save"] (the position durable before the answer)
    queue-purge    {}           -> {"purged": n}

Consumer and holder names are chosen by the asking broker and count per link. What a link's
requests created goes when the link closes: its consumers leave and what they and its holders hold
is handed out again, as when a RabbitMQ client's connection drops.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import Hashable

from core.cluster.peers import PeerConnection
from core.queues.subscription import QueuedMessage

log = logging.getLogger("gateway.core.queues")

CONSUME, POLL, GET, CONTROL, PURGE = "queue-consume", "queue-poll", "queue-get", "queue-control", "queue-purge"
POLL_WAIT_S = 5.0
OUTBOX_LIMIT = 1024       # messages handed to a remote consumer and not yet polled


def _text(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _bytes(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def message_row(message: QueuedMessage) -> list:
    return [message.offset, message.timestamp_ms, _text(message.key), _text(message.value),
            [[name, _text(value)] for name, value in message.headers], message.deliveries]


def message_of(row: list) -> QueuedMessage:
    offset, timestamp_ms, key, value, headers, deliveries = row
    return QueuedMessage(offset, timestamp_ms, _bytes(key), _bytes(value),
                         tuple((name, _bytes(v)) for name, v in headers), deliveries)


class RemoteConsumer:
    """A consumer of another broker's client: what the queue hands it waits here until polled."""

    def __init__(self, subscription, prefetch: int, auto_ack: bool, priority: int) -> None:
        self._subscription = subscription
        self.prefetch = prefetch
        self.auto_ack = auto_ack
        self.priority = priority
        self._outbox: list[list] = []
        self._ready = asyncio.Event()
        self.cancelled = False

    def can_deliver(self) -> bool:
        return len(self._outbox) < OUTBOX_LIMIT

    def deliver(self, message: QueuedMessage) -> None:
        self._outbox.append(message_row(message))    # now: the queue counts the delivery after this
        self._ready.set()

    def queue_deleted(self) -> None:
        self.cancelled = True
        self._ready.set()

    async def take(self, wait_s: float) -> list[list]:
        if not self._outbox and not self.cancelled:
            try:
                async with asyncio.timeout(wait_s):
                    await self._ready.wait()
            except TimeoutError:
                pass
        rows, self._outbox = self._outbox, []
        self._ready.clear()
        if rows and not self.cancelled:
            self._subscription.dispatch()     # room again
        return rows


class _Link:
    """What one peer link's requests created."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.consumers: dict[str, tuple[object, RemoteConsumer]] = {}    # name -> (queue, consumer)
        self.holders: dict[str, set] = {}                                # name -> queues it holds in

    def holder(self, name: str) -> Hashable:
        return ("peer", self.key, name)


class RemoteClients:
    """The peer requests of one queue namespace service; `served_queue(head)` finds the queue a
    request names if this broker serves it (else NotOwner), `consumer_removed(queue)` is told when
    a consumer left (auto-delete queues)."""

    def __init__(self, served_queue, consumer_removed) -> None:
        self._served_queue = served_queue
        self._consumer_removed = consumer_removed
        self._links: dict[str, _Link] = {}

    def register(self, peers) -> None:
        peers.handle(CONSUME, self._consume)
        peers.handle(POLL, self._poll)
        peers.handle(GET, self._get)
        peers.handle(CONTROL, self._control)
        peers.handle(PURGE, self._purge)

    def _link(self, connection: PeerConnection) -> _Link:
        link = self._links.get(connection.key)
        if link is None:
            link = self._links[connection.key] = _Link(connection.key)
            connection.on_close(lambda: self._closed(link))
        return link

    async def _consume(self, head: dict, _payload: bytes, connection: PeerConnection) -> tuple[dict, bytes]:
        queue = await self._served_queue(head)
        subscription = await queue.open()
        consumer = RemoteConsumer(subscription, head["prefetch"], head["auto_ack"], head.get("priority", 0))
        await queue.add_consumer(consumer, exclusive=head.get("exclusive", False))
        self._link(connection).consumers[head["consumer"]] = (queue, consumer)
        return {}, b""

    async def _poll(self, head: dict, _payload: bytes, connection: PeerConnection) -> tuple[dict, bytes]:
        found = self._link(connection).consumers.get(head["consumer"])
        if found is None:
            return {"messages": [], "cancelled": True}, b""
        consumer = found[1]
        return {"messages": await consumer.take(POLL_WAIT_S), "cancelled": consumer.cancelled}, b""

    async def _get(self, head: dict, _payload: bytes, connection: PeerConnection) -> tuple[dict, bytes]:
        queue = await self._served_queue(head)
        link = self._link(connection)
        message = await queue.get(link.holder(head["holder"]), auto_ack=head["auto_ack"])
        if message is not None and not head["auto_ack"]:
            link.holders.setdefault(head["holder"], set()).add(queue)
        return {"message": None if message is None else message_row(message)}, b""

    async def _control(self, head: dict, _payload: bytes, connection: PeerConnection) -> tuple[dict, bytes]:
        queue = await self._served_queue(head)
        subscription = await queue.open()
        link = self._link(connection)
        for op in head["ops"]:
            kind = op[0]
            if kind == "ack":
                subscription.ack(op[1])
            elif kind == "reject":
                subscription.reject(op[1], requeue=op[2])
            elif kind == "cancel":
                found = link.consumers.pop(op[1], None)
                if found is not None:
                    holder = op[2]
                    subscription.remove_consumer(found[1], holder=None if holder is None else link.holder(holder))
                    if holder is not None:
                        link.holders.setdefault(holder, set()).add(queue)
                    await self._consumer_removed(queue)
            elif kind == "release":
                link.holders.pop(op[1], None)
                subscription.release(link.holder(op[1]))
            elif kind == "save":
                await subscription.save_position()
        return {}, b""

    async def _purge(self, head: dict, _payload: bytes, _connection: PeerConnection) -> tuple[dict, bytes]:
        return {"purged": await (await self._served_queue(head)).purge()}, b""

    def _closed(self, link: _Link) -> None:
        """The link is gone: its consumers leave, what it held is handed out again."""
        self._links.pop(link.key, None)
        touched = set()
        for queue, consumer in link.consumers.values():
            if queue.subscription is not None and not queue.deleted:
                queue.subscription.remove_consumer(consumer)
                touched.add(queue)
        for name, queues in link.holders.items():
            for queue in queues:
                if queue.subscription is not None and not queue.deleted:
                    queue.subscription.release(link.holder(name))
        for queue in touched:
            removing = asyncio.ensure_future(self._consumer_removed(queue))
            removing.add_done_callback(lambda done: done.cancelled() or done.exception())
