"""What other brokers' clients ask of the queues this broker serves, over the peer links
(core/cluster/peers.py; the asking side is core/queues/forwarding.py and remote_subscription.py).

    queue-declare  {durable, auto_delete, exclusive, arguments, declared_by}   -> {"info": QueueInfo doc}
    queue-counts   {}                    -> {"messages": n, "consumers": n}
    queue-publish  {atomic} + records    -> {"refused": {index: reason}} (atomic: all or none)
    queue-delete   {if_unused, if_empty} -> {"messages": n}
    queue-consume  {consumer, prefetch, auto_ack, priority, exclusive}   a consumer joins
    queue-poll     {consumer}   what was handed to it, waiting up to POLL_WAIT_S for something
                                -> {"offsets": [...], "deliveries": [...], "cancelled": bool} + messages
    queue-get      {holder, auto_ack}   one message held by `holder` (a channel)
                                -> {"offsets": [...], "deliveries": [...]} + that message, or none
    queue-control  {ops}        applied in order: ["ack", offsets], ["reject", offsets, requeue],
                                ["cancel", consumer, holder | null], ["release", holder],
                                ["save"] (the position durable before the answer)
    queue-purge    {}           -> {"purged": n}

Records and messages travel as one RecordBatch (core/cluster/peer_records.py); a message's offset
and delivery count go in the head. Every request names its tenant, namespace and queue; one for a queue whose bundle this broker does
not serve is refused with NotOwner (asked while the bundle moves). An exclusive queue declared
for a connection of another broker is owned here by ELSEWHERE: the asking broker checks its own
connections. Consumer and holder names are chosen by the asking broker and count per link. What a
link's requests created goes when the link closes: its consumers leave and what they and its
holders hold is handed out again, as when a RabbitMQ client's connection drops.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Hashable

from core.cluster.bundles import partition_bundle
from core.cluster.peer_records import pack, unpack, unpack_records
from core.cluster.peers import PeerConnection
from core.errors import RESOURCE, CoreError, NotOwner, RequestRefused, Resource, UnknownQueue
from core.queues import arguments as stored_arguments
from core.queues.forwarding import COUNTS, DECLARE, DELETE, PUBLISH
from core.queues.naming import queue_topic
from core.queues.message import QueuedMessage

log = logging.getLogger("gateway.core.queues")

CONSUME, POLL, GET, CONTROL, PURGE = "queue-consume", "queue-poll", "queue-get", "queue-control", "queue-purge"
ELSEWHERE = object()      # the owner here of an exclusive queue declared for another broker's connection
POLL_WAIT_S = 5.0
OUTBOX_LIMIT = 1024       # messages handed to a remote consumer and not yet polled
POLL_BYTES = 4 << 20      # bodies in one poll's answer, beyond its first message


def pack_messages(handed: list[tuple[QueuedMessage, int]]) -> tuple[dict, bytes]:
    """(head fields, payload) of messages handed to another broker's consumer or channel, each with
    how often it was handed out before."""
    return ({"offsets": [message.offset for message, _ in handed], "deliveries": [count for _, count in handed]},
            pack([message for message, _ in handed]))


def unpack_messages(head: dict, payload: bytes) -> list[QueuedMessage]:
    return [QueuedMessage(offset, record.timestamp_ms, record.key, record.value, record.headers, deliveries)
            for offset, deliveries, record in zip(head["offsets"], head["deliveries"], unpack(payload), strict=True)]


class RemoteConsumer:
    """A consumer of another broker's client: what the queue hands it waits here until polled."""

    def __init__(self, subscription, prefetch: int, auto_ack: bool, priority: int) -> None:
        self._subscription = subscription
        self.prefetch = prefetch
        self.auto_ack = auto_ack
        self.priority = priority
        self._outbox: list[tuple[QueuedMessage, int]] = []
        self._outbox_bytes = 0
        self._ready = asyncio.Event()
        self.cancelled = False

    def can_deliver(self) -> bool:
        return len(self._outbox) < OUTBOX_LIMIT and self._outbox_bytes < 4 * POLL_BYTES

    def deliver(self, message: QueuedMessage) -> None:
        self._outbox.append((message, message.deliveries))    # now: the queue counts this delivery after
        self._outbox_bytes += len(message.value or b"")
        self._ready.set()

    def queue_deleted(self) -> None:
        self.cancelled = True
        self._ready.set()

    async def take(self, wait_s: float) -> list[tuple[QueuedMessage, int]]:
        """What waits, up to POLL_BYTES (at least one), waiting up to `wait_s` for something."""
        if not self._outbox and not self.cancelled:
            try:
                async with asyncio.timeout(wait_s):
                    await self._ready.wait()
            except TimeoutError:
                pass
        taken, size = 0, 0
        for message, _ in self._outbox:
            if taken and size + len(message.value or b"") > POLL_BYTES:
                break
            size += len(message.value or b"")
            taken += 1
        messages, self._outbox = self._outbox[:taken], self._outbox[taken:]
        self._outbox_bytes -= size
        if not self._outbox:
            self._ready.clear()
        if messages and not self.cancelled:
            self._subscription.dispatch()     # room again
        return messages


class _Link:
    """What one peer link's requests created."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.consumers: dict[str, tuple[object, RemoteConsumer]] = {}    # name -> (queue, consumer)
        self.holders: dict[str, set] = {}                                # name -> queues it holds in

    def holder(self, name: str) -> Hashable:
        return ("peer", self.key, name)


class PeerRequests:
    """The peer requests for the queues a QueueService serves (`namespace(tenant, namespace)` is its
    QueueNamespace, loaded if need be)."""

    def __init__(self, core, namespace) -> None:
        self._core = core
        self._namespace = namespace
        self._links: dict[str, _Link] = {}

    def register(self, peers) -> None:
        for kind, handler in ((DECLARE, self._declare), (COUNTS, self._counts), (PUBLISH, self._publish),
                              (DELETE, self._delete), (CONSUME, self._consume),
                              (POLL, self._poll), (GET, self._get), (CONTROL, self._control), (PURGE, self._purge)):
            peers.handle(kind, handler)

    def _not_serving(self, what: str) -> NotOwner:
        return NotOwner(f"broker {self._core.cluster.local.id} does not serve {what}")

    async def _served_space(self, head: dict):
        """The queue's namespace, if this broker serves the queue's bundle."""
        space = await self._namespace(head["tenant"], head["namespace"])
        bundle = partition_bundle(space.tenant, space.namespace, queue_topic(head["queue"]), 0)
        if not self._core.cluster.owns(bundle):
            raise self._not_serving(f"bundle {bundle}")
        return space

    async def _served_queue(self, head: dict):
        space = await self._served_space(head)
        name = head["queue"]
        queue = space.queues.get(name) or await space.stored_queue(name)   # not followed here yet?
        if queue is None:
            raise UnknownQueue.about(Resource.queue(name), f"no {RESOURCE}")
        return queue

    async def _consumer_removed(self, queue) -> None:
        topic = queue.topic
        await (await self._namespace(topic.tenant, topic.namespace)).consumer_removed(queue)

    # --- declaring, counting, publishing, deleting --------------------------------------------

    async def _declare(self, head: dict, _payload: bytes, _link: PeerConnection) -> tuple[dict, bytes]:
        exclusive = head.get("exclusive", False)
        queue = await (await self._served_space(head)).declare_queue(
            head["queue"], durable=head["durable"], auto_delete=head["auto_delete"], exclusive=exclusive,
            owner=ELSEWHERE if exclusive else None, arguments=stored_arguments.from_json(head["arguments"]),
            declared_by=head.get("declared_by") or None)
        return {"info": queue.info.to_doc()}, b""

    async def _counts(self, head: dict, _payload: bytes, _link: PeerConnection) -> tuple[dict, bytes]:
        queue = await self._served_queue(head)
        return {"messages": await queue.message_count(), "consumers": queue.consumer_count}, b""

    async def _publish(self, head: dict, payload: bytes, _link: PeerConnection) -> tuple[dict, bytes]:
        """Messages a client of another broker published: appended in the order sent, answered once
        each is durable; those a full queue refused are named (index -> reason)."""
        queue = await self._served_queue(head)
        records = unpack_records(payload)
        if head.get("atomic"):      # a transaction's publishes to the queue, committed
            await queue.publish_batch(records)
            return {}, b""
        results = await asyncio.gather(*[queue.publish(record) for record in records], return_exceptions=True)
        refused = {}
        for index, result in enumerate(results):
            if isinstance(result, BaseException):
                if not getattr(result, "refused", False):
                    raise result if isinstance(result, CoreError) else RequestRefused(f"queue {queue.name}: {result}")
                refused[str(index)] = str(result)
        return {"refused": refused}, b""

    async def _delete(self, head: dict, _payload: bytes, _link: PeerConnection) -> tuple[dict, bytes]:
        space = await self._served_space(head)
        queue = space.queues.get(head["queue"])     # the asking broker checked its connection's right
        return {"messages": await space.delete_queue(head["queue"], if_unused=head["if_unused"],
                                                     if_empty=head["if_empty"],
                                                     owner=None if queue is None else queue.owner)}, b""

    # --- consumers and what they hold ---------------------------------------------------------

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
            return {"offsets": [], "deliveries": [], "cancelled": True}, b""
        consumer = found[1]
        head, payload = pack_messages(await consumer.take(POLL_WAIT_S))
        return {**head, "cancelled": consumer.cancelled}, payload

    async def _get(self, head: dict, _payload: bytes, connection: PeerConnection) -> tuple[dict, bytes]:
        queue = await self._served_queue(head)
        link = self._link(connection)
        message = await queue.get(link.holder(head["holder"]), auto_ack=head["auto_ack"])
        if message is not None and not head["auto_ack"]:
            link.holders.setdefault(head["holder"], set()).add(queue)
        return pack_messages([] if message is None else [(message, message.deliveries)])

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
