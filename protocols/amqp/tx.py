"""A channel's transaction (after tx.select): its publishes and acknowledgements, held until
tx.commit applies them or tx.rollback drops them.

- basic.publish is checked and routed when it arrives (as RabbitMQ does: an unknown exchange
  fails at once), then held; nobody sees it before the commit.
- basic.ack / nack / reject take the deliveries off the channel at once (so an unknown or
  repeated tag is PRECONDITION_FAILED at once) and hold them; rollback puts them back on the
  channel, still unacknowledged.

tx.commit: the held publishes go to each queue as one RecordBatch of their own (stored all or
none), basic.return is sent for the mandatory ones no queue took, and once every queue's batch is
durable the held acknowledgements are applied and the queues' positions saved; then tx.commit-ok.

Across several queues the commit is atomic per queue, not across them. If the gateway dies during
a commit, each queue has either all of the transaction's messages or none, but some queues may
have them and others not, and the acknowledgements may be lost (the messages come back,
redelivered); the client never got tx.commit-ok, so it must treat the outcome as unknown. A
failed append fails the commit with INTERNAL_ERROR (the connection closes), with the same
per-queue outcome.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from core.queues.queue import Queue
from core.records.builder import Record
from protocols.amqp.spec import ReplyCode

if TYPE_CHECKING:
    from protocols.amqp.channel import Channel, Unacked


@dataclass(slots=True)
class _Return:
    properties: object
    body: bytes
    exchange: str
    routing_key: str


@dataclass(slots=True)
class Transaction:
    publishes: list[tuple[list[Queue], Record]] = field(default_factory=list)
    returns: list[_Return] = field(default_factory=list)
    # (tag, delivery) settled together, and how: None acknowledged, else rejected with requeue
    settlements: list[tuple[list[tuple[int, Unacked]], bool | None]] = field(default_factory=list)

    def publish(self, queues: list[Queue], record: Record) -> None:
        self.publishes.append((queues, record))

    def unroutable(self, properties: object, body: bytes, exchange: str, routing_key: str) -> None:
        """A mandatory publish no queue takes: returned at commit."""
        self.returns.append(_Return(properties, body, exchange, routing_key))

    def settle(self, channel: Channel, delivery_tag: int, multiple: bool, requeue: bool | None) -> None:
        before = list(channel.unacked.items())
        channel._settled(delivery_tag, multiple)     # PRECONDITION_FAILED for an unknown tag
        taken = [(tag, entry) for tag, entry in before if tag not in channel.unacked]
        self.settlements.append((taken, requeue))

    def rollback(self, channel: Channel) -> None:
        """Drop the publishes; the settled deliveries are unacknowledged on the channel again."""
        restored = dict(channel.unacked)
        for taken, _ in self.settlements:
            restored.update(taken)
        channel.unacked.clear()
        channel.unacked.update(sorted(restored.items()))
        self._reset()

    def _reset(self) -> None:
        self.publishes, self.returns, self.settlements = [], [], []

    async def commit(self, channel: Channel) -> None:
        publishes, returns, settlements = self.publishes, self.returns, self.settlements
        self._reset()
        session = channel.session
        batches: dict[Queue, list[Record]] = {}
        for queues, record in publishes:
            for queue in queues:
                batches.setdefault(queue, []).append(record)
        durable = [queue.publish_batch(records) for queue, records in batches.items() if not queue.deleted]
        session.published_to(list(batches))
        for returned in returns:
            session.write(session.machine.send_content(
                channel.number, "basic.return", returned.properties, returned.body, reply_code=ReplyCode.NO_ROUTE,
                reply_text="NO_ROUTE", exchange=returned.exchange, routing_key=returned.routing_key))
        if durable:
            await asyncio.gather(*durable)
        touched: set[Queue] = set()
        for taken, requeue in settlements:
            by_queue: dict[Queue, list[int]] = {}
            for _, entry in taken:
                by_queue.setdefault(entry.queue, []).append(entry.offset)
            for queue, offsets in by_queue.items():
                if queue.deleted or queue.subscription is None:
                    continue
                if requeue is None:
                    queue.subscription.ack(offsets)
                else:
                    queue.subscription.reject(offsets, requeue=requeue)
                touched.add(queue)
        if touched:
            await asyncio.gather(*(queue.subscription.save_position() for queue in touched
                                   if queue.subscription is not None and not queue.deleted))
            channel.wake_consumers()
