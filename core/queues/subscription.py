"""A shared subscription: one cursor on a partition, its messages load-balanced over consumers.

This is an AMQP queue's delivery side, in the core's words:

- Messages are read from the log ahead of the consumers into a backlog (core/queues/backlog.py:
  log order, or priority lanes for a priority queue, core/queues/priority.py) starting at the
  cursor's committed offset, skipping what the cursor records as acknowledged.
- Each message goes to the consumer a ConsumerPicker names (core/queues/picker.py: round robin,
  consumer priorities, single active consumer) among those with room. A consumer's room is its
  prefetch (the unacknowledged deliveries it may hold; 0 is unlimited) and whatever else it says
  through `can_deliver` (a paused channel, a full output buffer). Auto-ack consumers acknowledge
  on delivery.
- Acknowledging moves the cursor (committed offset plus individually acknowledged ranges); the
  cursor is persisted in the background, one write at a time and at most one per
  CURSOR_FLUSH_INTERVAL_S however many acks arrive meanwhile (`save_position` does not wait).
  Acks delete nothing: records go by the topic's retention (core/retention.py).
- A rejected message with requeue, and every unacknowledged message of a consumer that goes away,
  is handed out again before anything newer, in offset order, marked as redelivered. Rejected
  without requeue, it is dead: dead-lettered through the queue's dead-letter exchange
  (core/queues/dead_letter.py), or dropped (acknowledged) when the queue has none. So are
  expired messages met at the head (core/queues/expiry.py) and, on queues with a delivery limit,
  messages returned after more deliveries than the limit.
- `get` takes one message without a consumer (AMQP's basic.get), held by any owner object.
- Subscription types (x-subscription-type, core/queues/policy.py): shared (the above), exclusive
  (one consumer at a time, others refused), failover (single active consumer, below) and
  key-shared: FIFO message groups (core/queues/groups.py), a group's messages one at a time and
  in order while other groups go to other consumers; a given-back message goes out again before
  the rest of its group, and a poison one parks its group or lets it move on.
- Single active consumer: when the active one goes, the next one is active at once; what the old
  one held is requeued when its channel lets go of it and handed to the new one first, in log
  order. Every consumer counts in the consumer count, waiting or not.
- The queue's policy (TTL, delivery limit, dead-lettering, priorities, single active consumer)
  comes in through the constructor.
- Messages below `redelivered_below` (handed out by an earlier process and never acknowledged)
  go out marked redelivered; every hand-out is noted in the cursor, persisted with its next flush.
  A message is handed out only below the cursor's stored delivery reservation, asked for
  DELIVERY_RESERVATION offsets ahead (core/cursor.py), so a crash or a failover between a hand-out
  and the next flush cannot make the next owner hand it out again unmarked. A message handed out
  again is counted in the cursor too, so its delivery count (and limit) outlives a restart or a
  failover (up to one hand-out short after a crash).
- In a cluster nothing is handed out while the owner's lease is in doubt (an OwnerLease from
  core/cluster/broker_cluster.py): an owner paused past its session, woken, would otherwise hand
  out what it had read ahead, which the next owner may have delivered already.

The parts, each with one job: the decisions (what goes to whom, what comes back, what is dead,
acknowledgement bookkeeping, message-group parking) are core/queues/deliveries.py's, a state
machine with no I/O; reading the log into its backlog is core/queues/log_feeder.py's; persisting
the cursor and its delivery reservation is core/queues/cursor_writer.py's. This class holds
them together and performs what the decisions call for: it writes to consumers, traces,
dead-letters, and waits for the lease. What front ends use of it is core/queues/interface.py.

Owned by the event loop; nothing here blocks it. Deliveries are synchronous calls into the
consumers, which only buffer output.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable

from core.clock import Clock
from core.cursor import Cursor
from core.errors import RESOURCE, ExclusiveUse, Resource
from core.partition import Partition
from core.queues.backlog import FifoBacklog
from core.queues.cursor_writer import CursorWriter
from core.queues.dead_letter import DELIVERY_LIMIT, EXPIRED, REJECTED
from core.queues.deliveries import REQUEUEING_LATER, Deliveries
from core.queues.dying import DeadMessages
from core.queues.groups import BLOCK, GroupBacklog
from core.queues.interface import Consumer, Lease
from core.queues.log_feeder import LogFeeder
from core.queues.message import QueuedMessage
from core.queues.picker import ConsumerPicker
from core.queues.policy import EXCLUSIVE, FAILOVER, KEY_SHARED, SHARED
from core.queues.priority import PriorityReadAhead
from core.records.builder import Record

__all__ = ["Consumer", "Lease", "QueuedMessage", "SharedSubscription"]

log = logging.getLogger("gateway.core")

DATA_WAIT_S = 1.0                # re-check for consumers this often while waiting for new data
# The cursor's background writes come at most this often (each is a metadata store commit, fsync
# included): a crash may hand out again what was acknowledged in the last interval, never lose it.
CURSOR_FLUSH_INTERVAL_S = 0.02
# How far ahead of a hand-out its reservation reaches; asked for again once half of it is used, so a
# consumer below ~100k messages/s never waits for one. After a crash, up to this many messages past
# the last one handed out may go out marked redelivered although no consumer saw them.
DELIVERY_RESERVATION = 8192


class SharedSubscription:
    # Set by the queue when it has x-requeue-delay: (messages, acknowledge, put_back) holds the
    # messages and acknowledges them once held, or puts them back if holding failed.
    requeue_later: Callable[..., None] | None = None

    def __init__(self, partition: Callable[[], Awaitable[Partition]], cursor: Cursor, clock: Clock, *,
                 name: str = "", max_priority: int = 0, subscription_type: str = SHARED,
                 group_poison_policy: str = BLOCK,
                 redelivered_below: int = 0, message_ttl_ms: int | None = None, delivery_limit: int | None = None,
                 dead_letter: Callable[..., None] | None = None,
                 delete_consumed: Callable[[], Awaitable[None]] | None = None,
                 lease: Lease | None = None) -> None:
        self._lease = lease                 # None: a process alone, it owns the queue for good
        self._waiting_for_lease = False
        self.cursor = cursor
        self._clock = clock
        self._name = name
        self.subscription_type = subscription_type
        self._picker = ConsumerPicker(single_active=subscription_type == FAILOVER)
        self._exclusive_only = subscription_type == EXCLUSIVE
        self.exclusive_consumer: Consumer | None = None
        # what waits to be handed out, in the order it goes (core/queues/backlog.py); key-shared
        # queues keep their groups in it, told of every grouped message settled (None: plain)
        groups = (GroupBacklog(group_poison_policy, parked=cursor.parked_groups)
                  if subscription_type == KEY_SHARED else None)
        backlog = groups if groups is not None else PriorityReadAhead(max_priority) if max_priority else FifoBacklog()
        self._deliveries = Deliveries(cursor, backlog, groups=groups, message_ttl_ms=message_ttl_ms,
                                      delivery_limit=delivery_limit)
        self._writer = CursorWriter(cursor, clock, name=name, interval_s=CURSOR_FLUSH_INTERVAL_S,
                                    reservation=DELIVERY_RESERVATION, on_reserved=self._reservation_stored,
                                    delete_consumed=delete_consumed, retry_s=DATA_WAIT_S)
        self._feeder = LogFeeder(partition, self._deliveries, name=name, redelivered_below=redelivered_below,
                                 data_wait_s=DATA_WAIT_S, wants_data=self._wants_data, dispatch=self.dispatch,
                                 cursor_changed=self._writer.changed)
        self._dispatching = False
        self._dispatch_again = False
        self._closed = False
        # the feeder's fresh_from when a hand-out began to wait for a reservation: still "at once"
        self._fresh_when_reserved: int | None = None
        self._dead = DeadMessages(self._deliveries, dead_letter=dead_letter, acknowledge=self.ack,
                                  cursor_changed=self._writer.changed)

    @property
    def consumers(self) -> list[Consumer]:
        return self._picker.consumers

    @property
    def dead_letter(self) -> Callable[..., None] | None:
        """DeadLetterer.send; None: dead ones are dropped."""
        return self._dead.dead_letter

    @property
    def message_ttl_ms(self) -> int | None:
        return self._deliveries.message_ttl_ms

    @property
    def delivery_limit(self) -> int | None:
        return self._deliveries.delivery_limit

    # --- counts ---------------------------------------------------------------------------------

    def note_high_watermark(self, high_watermark: int) -> None:
        self._feeder.note_high_watermark(high_watermark)

    @property
    def ready_count(self) -> int:
        """Messages waiting to be handed out (stored ones; publishes not yet durable are not counted)."""
        cursor = self.cursor
        acked_above = sum(end - first for first, end in cursor.acked_ranges())
        return max(0, self._feeder.high_watermark - cursor.committed_offset - acked_above
                   - self._deliveries.unacked_count)

    @property
    def unacked_count(self) -> int:
        return self._deliveries.unacked_count

    def is_held(self, offset: int) -> bool:
        """Handed out and not yet settled (or on its way to a dead-letter exchange)."""
        return self._deliveries.is_held(offset)

    # --- consumers ------------------------------------------------------------------------------

    def add_consumer(self, consumer: Consumer, *, exclusive: bool = False) -> None:
        self.check_consumer(exclusive=exclusive)
        self._picker.add(consumer)
        self._writer.reserve_ahead_of(max(self._feeder.redelivered_below, self.cursor.committed_offset))
        if exclusive or self._exclusive_only:
            self.exclusive_consumer = consumer
        self._feeder.start()
        self.dispatch()

    def check_consumer(self, *, exclusive: bool = False) -> None:
        """Raise what add_consumer would raise, without adding anything."""
        if self.exclusive_consumer is not None or ((exclusive or self._exclusive_only) and self.consumers):
            raise ExclusiveUse.about(Resource.queue(self._name), f"{RESOURCE} in exclusive use")

    def remove_consumer(self, consumer: Consumer, *, holder: Hashable | None = None) -> None:
        """The consumer is gone: what it held is handed out again, or, with `holder`, stays
        unacknowledged in the holder's name (AMQP: a cancelled consumer's deliveries belong to its
        channel until acknowledged or the channel closes)."""
        self._picker.remove(consumer)
        if self.exclusive_consumer is consumer:
            self.exclusive_consumer = None
        if holder is None:
            self.release(consumer)
            return
        self._deliveries.transfer(consumer, holder)

    def release(self, owner: Hashable) -> None:
        """Requeue every message `owner` holds unacknowledged."""
        messages = self._deliveries.release(owner)
        if not messages:
            return
        tracer = self._tracer()
        if tracer is not None:
            tracer.queued(self._trace_where, "requeued", sorted(m.offset for m in messages), queue=self._name)
        for message in messages:
            self._give_back(message)
        self.dispatch()

    def _give_back(self, message: QueuedMessage) -> None:
        """A message handed out comes back: handed out again first, or dead past the delivery limit
        (on a key-shared queue, its group parked or moving on by the poison policy)."""
        dead, parked = self._deliveries.give_back(message)
        if not dead:
            return
        if parked is not None:
            log.warning("queue %s: message %d was delivered %d times; its group is parked",
                        self._name, message.offset, message.deliveries)
            self._writer.changed()
        self.dead([message], DELIVERY_LIMIT)

    # --- trace (core/trace.py) ------------------------------------------------------------------

    def _tracer(self):
        """The namespace's trace writer while its policy says trace (one attribute test when off)."""
        partition = self._feeder.partition
        return None if partition is None else partition.meter.tracer

    @property
    def _trace_where(self) -> tuple[str, int]:
        partition = self._feeder.partition
        return partition.topic, partition.index

    # --- acknowledgements -----------------------------------------------------------------------

    def ack(self, offsets: list[int]) -> None:
        tracer = self._tracer()
        if tracer is not None:
            tracer.queued(self._trace_where, "acked", self._deliveries.held_by_clients(offsets), queue=self._name)
        self._deliveries.ack(offsets)
        self._writer.changed()
        self.dispatch()

    def reject(self, offsets: list[int], *, requeue: bool) -> None:
        tracer = self._tracer()
        if tracer is not None:
            tracer.queued(self._trace_where, "requeued" if requeue else "rejected",
                          self._deliveries.held_by_clients(offsets), queue=self._name)
        later: list[QueuedMessage] = []
        take_back = self._deliveries.take_back
        for offset in offsets:
            taken = take_back((offset,))     # one at a time: a dead one is held again at once
            if not taken:
                continue
            message = taken[0]
            if not requeue:
                self.dead([message], REJECTED)
            elif self.requeue_later is not None and not self._deliveries.over_delivery_limit(message):
                later.append(message)
            else:
                self._give_back(message)
        if later:
            self._deliveries.hold_for(REQUEUEING_LATER, later)
            self.requeue_later(later, self.ack, self._put_back)
        if not requeue:
            self._writer.changed()
        self.dispatch()

    def _put_back(self, offsets: list[int]) -> None:
        for message in self._deliveries.take_back(offsets):
            self._deliveries.put_back(message)
        self.dispatch()

    def purge(self) -> int:
        """Drop every message waiting to be handed out (not the unacknowledged); returns how many."""
        count = self.ready_count
        feeder = self._feeder
        self._deliveries.purge(feeder.high_watermark)
        feeder.read_offset = max(feeder.read_offset, feeder.high_watermark)
        self._writer.changed()
        return count

    # --- handing out ----------------------------------------------------------------------------

    def dispatch(self) -> None:
        """Hand out what is waiting to consumers with room (re-entrant calls fold into one)."""
        if self._dispatching:
            self._dispatch_again = True
            return
        self._dispatching = True
        served: set[Consumer] = set()
        try:
            again = True
            while again:
                self._dispatch_again = False
                self._dispatch_round(served)
                again = self._dispatch_again
        finally:
            self._dispatching = False
            for consumer in served:
                flush = getattr(consumer, "flush", None)
                if flush is not None:
                    flush()
        self._feeder.nudge()

    def _dispatch_round(self, served: set[Consumer]) -> None:
        if self._lease is not None and not self._lease.held():
            self._wait_for_lease()
            return
        deliveries = self._deliveries
        pick, has_room = self._picker.pick, deliveries.has_room
        ask_from = self._writer.asks_from()
        while (message := self._peek()) is not None:
            if message.offset >= ask_from and not self._reserved_for(message.offset):
                return
            consumer = pick(has_room)
            if consumer is None:
                return
            deliveries.take_head()
            self._hand_out(message, consumer, consumer.auto_ack)
            consumer.deliver(message)
            served.add(consumer)
            message.deliveries += 1

    def _wait_for_lease(self) -> None:
        if not self._waiting_for_lease:
            self._waiting_for_lease = self._lease.when_held(self._lease_back)

    def _lease_back(self) -> None:
        self._waiting_for_lease = False
        if not self._closed:
            self.dispatch()

    def _peek(self) -> QueuedMessage | None:
        """The next message to hand out; expired ones met at the head are taken out as dead."""
        deliveries, feeder = self._deliveries, self._feeder
        while True:
            message = deliveries.head(feeder.read_offset, feeder.high_watermark)
            if message is None or message.expires_at is None:
                return message
            fresh = feeder.fresh_from
            reserved = self._fresh_when_reserved
            if reserved is not None:
                fresh = reserved if fresh is None else min(fresh, reserved)
            if not deliveries.expired(message, self._clock.now_ms(), fresh):
                return message
            deliveries.take_head()
            self.dead([message], EXPIRED)

    def _hand_out(self, message: QueuedMessage, owner: Hashable, auto_ack: bool) -> None:
        tracer = self._tracer()
        if tracer is not None:
            tracer.queued(self._trace_where, "delivered", [message.offset], queue=self._name,
                          consumer=owner, redelivered=message.deliveries > 0, auto_ack=auto_ack)
        self._deliveries.hand_out(message, owner, auto_ack)
        self._writer.changed()

    def _reserved_for(self, offset: int) -> bool:
        if self._writer.reserved_for(offset):
            return True
        fresh_from = self._feeder.fresh_from
        if not self._closed and fresh_from is not None:    # held for our bookkeeping only: still "at once" (TTL 0)
            fresh = self._fresh_when_reserved
            self._fresh_when_reserved = fresh_from if fresh is None else min(fresh, fresh_from)
        return False

    def _reservation_stored(self) -> None:
        try:
            if not self._closed:
                self.dispatch()
        finally:
            if self._writer.reserving is None:     # no new wait began: what was held is no longer "at once"
                self._fresh_when_reserved = None

    async def get(self, owner: Hashable, *, auto_ack: bool) -> QueuedMessage | None:
        """One message for `owner` (no consumer needed), or None if none is waiting."""
        if self._lease is not None and not self._lease.held():
            return None
        feeder = self._feeder
        message = self._peek()
        if message is None:
            await feeder.read_more()
            message = self._peek()
            while message is None and feeder.can_read_more():
                read_before = feeder.read_offset
                await feeder.read_more()
                message = self._peek()
                if message is None and feeder.read_offset == read_before and not feeder.body_missing():
                    break       # no progress possible now
            if message is None:
                return None
        if not self._reserved_for(message.offset):
            if self._writer.reserving is None:     # closed
                return None
            await asyncio.wait((self._writer.reserving,))
            return await self.get(owner, auto_ack=auto_ack)    # it may have gone to a consumer meanwhile
        self._deliveries.take_head()
        self._hand_out(message, owner, auto_ack)
        redelivered_copy = QueuedMessage(message.offset, message.timestamp_ms, message.key, message.value,
                                         message.headers, message.deliveries)
        message.deliveries += 1
        feeder.nudge()
        return redelivered_copy

    # --- message groups (key-shared) ------------------------------------------------------------

    @property
    def parked_groups(self) -> dict[bytes, int]:
        """Key-shared: the parked groups and the offset of the message that exhausted its deliveries."""
        return self._deliveries.parked_groups

    def release_group(self, group: bytes) -> bool:
        """Let a parked group go on (its poison message is dead already); False if not parked."""
        if not self._deliveries.release_group(group):
            return False
        self._writer.changed()
        self.dispatch()
        return True

    # --- dead messages (expired, rejected, over a limit) -------------------------------------------

    def dead(self, messages: list[QueuedMessage], reason: str) -> None:
        """`messages`, already out of the queue's hands, died: dead-lettered (acknowledged once their
        copies are durable) or, with nowhere to send them, dropped (acknowledged now)."""
        tracer = self._tracer()
        if tracer is not None:
            tracer.queued(self._trace_where, "dead-lettered" if self.dead_letter is not None else "dropped",
                          [message.offset for message in messages], queue=self._name, reason=reason,
                          attributed=False)
        self._dead.bury(messages, reason)

    async def take_head(self, count: int) -> list[QueuedMessage]:
        """Take up to `count` of the oldest ready messages out (a length limit drops them)."""
        taken: list[QueuedMessage] = []
        feeder = self._feeder
        while len(taken) < count and not self._closed:
            message = self._peek()
            if message is None:
                before = feeder.read_offset
                await feeder.read_more()
                if feeder.read_offset == before and self._peek() is None:
                    break
                continue
            self._deliveries.take_head()
            taken.append(message)
        return taken

    async def drop_expired(self) -> int | None:
        """Remove the expired messages at the head, reading it from the log if none is in memory;
        returns the deadline of the head that stays (None: none, or it never expires)."""
        feeder = self._feeder
        while not self._closed:
            message = self._peek()
            if message is not None:
                return message.expires_at
            before = feeder.read_offset
            await feeder.read_more()
            if feeder.read_offset == before:
                return None
        return None

    # --- reading the log (core/queues/log_feeder.py) --------------------------------------------

    def _wants_data(self) -> bool:
        return bool(self._picker.consumers) and not self._closed and self._deliveries.backlog.wants_data()

    def read_up_to(self, end: int) -> asyncio.Future | None:
        """A future done once the messages below `end` were read and handed to the consumers with
        room, or once they cannot be now (no room, nothing more to read); None when nobody consumes."""
        if self._closed or not self.consumers:
            return None
        return self._feeder.read_up_to(end)

    def hand_out_appended(self, partition: Partition, base_offset: int, records: list[Record]) -> bool:
        """This queue's publisher made the batch at `base_offset` durable: handed out as published
        when the queue has read everything before it (core/queues/log_feeder.py)."""
        return self._feeder.hand_out_appended(partition, base_offset, records)

    def wake(self) -> None:
        """New data may be there, or a consumer has room again."""
        self._feeder.nudge()
        self.dispatch()

    # --- persisting the cursor (core/queues/cursor_writer.py) -----------------------------------

    async def save_position(self) -> None:
        """Wait until the cursor, as it is now, is persisted (by the background flush, at once)."""
        if self._closed:
            return
        await self._writer.save_position()

    async def close(self) -> None:
        """Stop reading and save the position (what is unacknowledged stays in the queue)."""
        self._closed = self._dead.closed = True
        self._writer.closed = True
        self._feeder.stop()
        await self._writer.close()

    def discard(self) -> None:
        """The queue is deleted: stop without saving anything."""
        self._closed = self._dead.closed = True
        self._feeder.stop()
        self._writer.discard()
        self.consumers.clear()
        self._deliveries.clear()
