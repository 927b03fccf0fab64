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

Owned by the event loop; nothing here blocks it. Deliveries are synchronous calls into the
consumers, which only buffer output.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable

from core.clock import Clock
from core.cursor import Cursor
from core.errors import RESOURCE, CoreError, ExclusiveUse, Resource
from core.partition import Partition
from core.queues.dead_letter import DELIVERY_LIMIT, EXPIRED, REJECTED
from core.queues.backlog import FifoBacklog
from core.queues.expiry import deadline
from core.queues.groups import BLOCK, GroupBacklog
from core.queues.interface import Consumer, Lease
from core.queues.log_records import data_records
from core.queues.message import UNCHECKED, QueuedMessage
from core.queues.picker import ConsumerPicker
from core.queues.policy import EXCLUSIVE, FAILOVER, KEY_SHARED, SHARED
from core.queues.priority import PriorityReadAhead
from core.records.builder import Record

log = logging.getLogger("gateway.core")

READ_BYTES = 1 << 20             # per log read (at least one whole batch)
DATA_WAIT_S = 1.0                # re-check for consumers this often while waiting for new data
TRIM_INTERVAL_MS = 10_000        # ask the core to drop consumed ledgers at most this often
# The cursor's background writes come at most this often (each is a metadata store commit, fsync
# included): a crash may hand out again what was acknowledged in the last interval, never lose it.
CURSOR_FLUSH_INTERVAL_S = 0.02
# How far ahead of a hand-out its reservation reaches; asked for again once half of it is used, so a
# consumer below ~100k messages/s never waits for one. After a crash, up to this many messages past
# the last one handed out may go out marked redelivered although no consumer saw them.
DELIVERY_RESERVATION = 8192
AT_ONCE_MS = 500                 # past its deadline, a message read and handed out at once still counts as on time
_DEAD_LETTERING = object()       # the holder of messages on their way to a dead-letter exchange
_REQUEUEING_LATER = object()     # ... and of those being held for a delayed requeue (x-requeue-delay)


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
        self._partition = partition
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
        self._groups = (GroupBacklog(group_poison_policy, parked=cursor.parked_groups)
                        if subscription_type == KEY_SHARED else None)
        self._backlog = (self._groups if self._groups is not None
                         else PriorityReadAhead(max_priority) if max_priority else FifoBacklog())
        self._unacked: dict[int, tuple[QueuedMessage, Hashable]] = {}
        self._held: dict[Hashable, set[int]] = {}        # owner -> offsets it has not acknowledged
        self._read_offset = cursor.committed_offset
        self._high_watermark = 0                         # as last seen; refreshed on every read
        self._read_lock = asyncio.Lock()
        self._woken = False                               # the feeder should look again
        self._feeder_waiter: asyncio.Future | None = None  # what the feeder sleeps on
        self._watching: Partition | None = None           # the partition the caught-up feeder waits on
        self._watch_signal: asyncio.Future | None = None  # resolved by that partition's next append
        self._feeder: asyncio.Task | None = None
        self._flusher: asyncio.Task | None = None
        self._cursor_dirty = False
        self._delete_consumed = delete_consumed
        self._last_trim_ms = 0
        self._trim_later: asyncio.Task | None = None
        self._dispatching = False
        self._dispatch_again = False
        self._closed = False
        self._redelivered_below = redelivered_below
        self._flush_waiters: list[asyncio.Future] = []
        self._flushed_at = 0.0                           # loop time of the last cursor write
        self._flush_hurry: asyncio.Future | None = None  # cuts the pause before the next write short
        self._reserving: asyncio.Future | None = None    # done once the reservation asked for is stored
        self._fresh_when_reserved: int | None = None    # _fresh_from when a hand-out began to wait for a reservation
        self._read_waiters: list[tuple[int, asyncio.Future]] = []   # (end offset, done once read and handed out)
        self.message_ttl_ms = message_ttl_ms
        self.delivery_limit = delivery_limit      # a message handed out more often than this dies
        self.dead_letter = dead_letter            # DeadLetterer.send; None: dead ones are dropped
        self._dying: dict[str, list[QueuedMessage]] = {}
        self._fresh_from: int | None = None    # offsets from here were just read: deliverable even if expired
        self._partition_of: Partition | None = None   # as last opened: its meter holds the trace writer

    @property
    def consumers(self) -> list[Consumer]:
        return self._picker.consumers

    # --- counts ---------------------------------------------------------------------------------

    def note_high_watermark(self, high_watermark: int) -> None:
        self._high_watermark = max(self._high_watermark, high_watermark)

    @property
    def ready_count(self) -> int:
        """Messages waiting to be handed out (stored ones; publishes not yet durable are not counted)."""
        cursor = self.cursor
        acked_above = sum(end - first for first, end in cursor.acked_ranges())
        return max(0, self._high_watermark - cursor.committed_offset - acked_above - len(self._unacked))

    @property
    def unacked_count(self) -> int:
        return len(self._unacked)

    def is_held(self, offset: int) -> bool:
        """Handed out and not yet settled (or on its way to a dead-letter exchange)."""
        return offset in self._unacked

    # --- consumers ------------------------------------------------------------------------------

    def add_consumer(self, consumer: Consumer, *, exclusive: bool = False) -> None:
        self.check_consumer(exclusive=exclusive)
        self._picker.add(consumer)
        self._reserve_ahead_of(max(self._redelivered_below, self.cursor.committed_offset))
        if exclusive or self._exclusive_only:
            self.exclusive_consumer = consumer
        self._start_feeding()
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
        offsets = self._held.pop(consumer, None)
        if offsets:
            for offset in offsets:
                self._unacked[offset] = (self._unacked[offset][0], holder)
            self._held.setdefault(holder, set()).update(offsets)

    def release(self, owner: Hashable) -> None:
        """Requeue every message `owner` holds unacknowledged."""
        offsets = self._held.pop(owner, None)
        if not offsets:
            return
        tracer = self._tracer()
        if tracer is not None:
            tracer.queued(self._trace_where, "requeued", sorted(offsets), queue=self._name)
        for offset in offsets:
            self._give_back(self._unacked.pop(offset)[0])
        self.dispatch()

    def _give_back(self, message: QueuedMessage) -> None:
        """A message handed out comes back: handed out again first, or dead past the delivery limit
        (on a key-shared queue, its group parked or moving on by the poison policy)."""
        if self._over_delivery_limit(message):
            parked = self._groups.poisoned(message.offset) if self._groups is not None else None
            if parked is not None:
                log.warning("queue %s: message %d was delivered %d times; its group is parked",
                            self._name, message.offset, message.deliveries)
                self.cursor.park_group(parked, message.offset)
                self._cursor_changed()
            self.dead([message], DELIVERY_LIMIT)
        else:
            self._backlog.put_back(message)

    # --- trace (core/trace.py) ------------------------------------------------------------------

    def _tracer(self):
        """The namespace's trace writer while its policy says trace (one attribute test when off)."""
        partition = self._partition_of
        return None if partition is None else partition.meter.tracer

    @property
    def _trace_where(self) -> tuple[str, int]:
        return self._partition_of.topic, self._partition_of.index

    def _held_by_clients(self, offsets: list[int]) -> list[int]:
        """Those of `offsets` a client holds (not the queue itself, dead-lettering or requeueing later)."""
        unacked = self._unacked
        return [o for o in offsets if o in unacked and unacked[o][1] not in (_DEAD_LETTERING, _REQUEUEING_LATER)]

    # --- acknowledgements -----------------------------------------------------------------------

    def ack(self, offsets: list[int]) -> None:
        tracer = self._tracer()
        if tracer is not None:
            tracer.queued(self._trace_where, "acked", self._held_by_clients(offsets), queue=self._name)
        groups = self._groups
        for offset in offsets:
            if self._forget(offset):
                self.cursor.ack(offset)
                if groups is not None:
                    groups.settled(offset)
        self._cursor_changed()
        self.dispatch()

    def reject(self, offsets: list[int], *, requeue: bool) -> None:
        tracer = self._tracer()
        if tracer is not None:
            tracer.queued(self._trace_where, "requeued" if requeue else "rejected",
                          self._held_by_clients(offsets), queue=self._name)
        later: list[QueuedMessage] = []
        for offset in offsets:
            entry = self._unacked.get(offset)
            if entry is None or not self._forget(offset):
                continue
            if not requeue:
                self.dead([entry[0]], REJECTED)
            elif self.requeue_later is not None and not self._over_delivery_limit(entry[0]):
                later.append(entry[0])
            else:
                self._give_back(entry[0])
        if later:
            self._requeue_later(later)
        if not requeue:
            self._cursor_changed()
        self.dispatch()

    def _requeue_later(self, messages: list[QueuedMessage]) -> None:
        held = self._held.setdefault(_REQUEUEING_LATER, set())
        for message in messages:
            self._unacked[message.offset] = (message, _REQUEUEING_LATER)
            held.add(message.offset)
        self.requeue_later(messages, self.ack, self._put_back)

    def _put_back(self, offsets: list[int]) -> None:
        for offset in offsets:
            entry = self._unacked.get(offset)
            if entry is not None and self._forget(offset):
                self._backlog.put_back(entry[0])
        self.dispatch()

    def _forget(self, offset: int) -> bool:
        entry = self._unacked.pop(offset, None)
        if entry is None:
            return False
        owned = self._held.get(entry[1])
        if owned is not None:
            owned.discard(offset)
            if not owned:
                del self._held[entry[1]]
        return True

    def purge(self) -> int:
        """Drop every message waiting to be handed out (not the unacknowledged); returns how many."""
        count = self.ready_count
        start = self.cursor.committed_offset
        for offset in sorted(self._unacked):
            if offset > start:
                self.cursor.ack(start, offset)
            start = max(start, offset + 1)
        if start < self._high_watermark:
            self.cursor.ack(start, self._high_watermark)
        self._backlog.clear()
        self._read_offset = max(self._read_offset, self._high_watermark)
        self._cursor_changed()
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
        self._nudge_feeder()

    def _dispatch_round(self, served: set[Consumer]) -> None:
        if self._lease is not None and not self._lease.held():
            self._wait_for_lease()
            return
        pick, has_room = self._picker.pick, self._has_room
        ask_from = self.cursor.delivery_reserved - DELIVERY_RESERVATION // 2   # _reserved_for, inlined
        while (message := self._peek()) is not None:
            if message.offset >= ask_from and not self._reserved_for(message.offset):
                return
            consumer = pick(has_room)
            if consumer is None:
                return
            self._backlog.take()
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

    def _has_room(self, consumer: Consumer) -> bool:
        if consumer.prefetch and len(self._held.get(consumer, ())) >= consumer.prefetch:
            return False
        return consumer.can_deliver()

    def _peek(self) -> QueuedMessage | None:
        """The next message to hand out; expired ones met at the head are taken out as dead."""
        while True:
            message = self._peek_head()
            if message is None:
                return None
            expires_at = message.expires_at
            if expires_at == UNCHECKED:
                expires_at = message.expires_at = deadline(message.timestamp_ms, message.headers,
                                                           self.message_ttl_ms)
            if expires_at is None or not self._expired(message, expires_at):
                return message
            self._backlog.take()
            self.dead([message], EXPIRED)

    def _peek_head(self) -> QueuedMessage | None:
        backlog = self._backlog
        if backlog.strict and backlog.holds_back(self._read_offset, self._high_watermark):
            return None
        return backlog.peek(self._settled)

    def _settled(self, offset: int) -> bool:
        """Handed out and not yet settled, or acknowledged: not to be handed out (again)."""
        return offset in self._unacked or self.cursor.is_acked(offset)

    def _hand_out(self, message: QueuedMessage, owner: Hashable, auto_ack: bool) -> None:
        tracer = self._tracer()
        if tracer is not None:
            tracer.queued(self._trace_where, "delivered", [message.offset], queue=self._name,
                          consumer=owner, redelivered=message.deliveries > 0, auto_ack=auto_ack)
        if auto_ack:
            self.cursor.ack(message.offset)
            self._cursor_changed()
            if self._groups is not None:
                self._groups.settled(message.offset)
        else:
            self._unacked[message.offset] = (message, owner)
            self._held.setdefault(owner, set()).add(message.offset)
            self.cursor.note_delivered(message.offset)
            if message.deliveries:
                self.cursor.note_handed_out(message.offset, message.deliveries + 1)
            self._cursor_changed()

    async def get(self, owner: Hashable, *, auto_ack: bool) -> QueuedMessage | None:
        """One message for `owner` (no consumer needed), or None if none is waiting."""
        if self._lease is not None and not self._lease.held():
            return None
        message = self._peek()
        if message is None:
            await self._read_more()
            message = self._peek()
            while message is None and self._can_read_more():
                read_before = self._read_offset
                await self._read_more()
                message = self._peek()
                if message is None and self._read_offset == read_before and not self._body_missing():
                    break       # no progress possible now
            if message is None:
                return None
        if not self._reserved_for(message.offset):
            if self._reserving is None:     # closed
                return None
            await asyncio.wait((self._reserving,))
            return await self.get(owner, auto_ack=auto_ack)    # it may have gone to a consumer meanwhile
        self._backlog.take()
        self._hand_out(message, owner, auto_ack)
        redelivered_copy = QueuedMessage(message.offset, message.timestamp_ms, message.key, message.value,
                                         message.headers, message.deliveries)
        message.deliveries += 1
        self._nudge_feeder()
        return redelivered_copy

    # --- message groups (key-shared) ------------------------------------------------------------

    @property
    def parked_groups(self) -> dict[bytes, int]:
        """Key-shared: the parked groups and the offset of the message that exhausted its deliveries."""
        return dict(self._groups.parked) if self._groups is not None else {}

    def release_group(self, group: bytes) -> bool:
        """Let a parked group go on (its poison message is dead already); False if not parked."""
        if self._groups is None or not self._groups.release(group):
            return False
        self.cursor.release_group(group)
        self._cursor_changed()
        self.dispatch()
        return True

    # --- dead messages (expired, rejected, over a limit) -------------------------------------------

    def _expired(self, message: QueuedMessage, expires_at: int) -> bool:
        now_ms = self._clock.now_ms()
        if now_ms < expires_at:
            return False
        # Just read and handed out in the same turn counts as "at once" (TTL 0 delivers or expires),
        # and so does just read and held only until the delivery reservation is stored; but not a
        # message that expired well before it was read (a backlog read afresh after a restart or a
        # takeover, or once a consumer came).
        if message.deliveries > 0 or now_ms - expires_at > AT_ONCE_MS:
            return True
        return not any(mark is not None and message.offset >= mark
                       for mark in (self._fresh_from, self._fresh_when_reserved))

    def _over_delivery_limit(self, message: QueuedMessage) -> bool:
        limit = self.delivery_limit
        return limit is not None and message.deliveries > limit

    def dead(self, messages: list[QueuedMessage], reason: str) -> None:
        """`messages`, already out of the queue's hands, died: dead-lettered (acknowledged once their
        copies are durable) or, with nowhere to send them, dropped (acknowledged now)."""
        tracer = self._tracer()
        if tracer is not None:
            tracer.queued(self._trace_where, "dead-lettered" if self.dead_letter is not None else "dropped",
                          [message.offset for message in messages], queue=self._name, reason=reason,
                          attributed=False)
        if self.dead_letter is None:
            for message in messages:
                self.cursor.ack(message.offset)
                if self._groups is not None:
                    self._groups.settled(message.offset)
            self._cursor_changed()
            return
        held = self._held.setdefault(_DEAD_LETTERING, set())
        for message in messages:
            self._unacked[message.offset] = (message, _DEAD_LETTERING)
            held.add(message.offset)
        if not self._dying:
            asyncio.get_running_loop().call_soon(self._send_dying)
        self._dying.setdefault(reason, []).extend(messages)

    def _send_dying(self) -> None:
        dying, self._dying = self._dying, {}
        if self._closed or self.dead_letter is None:
            return      # still unacknowledged in the cursor: dead-lettered again after a restart
        for reason, messages in dying.items():
            self.dead_letter(messages, reason, self.ack)

    async def take_head(self, count: int) -> list[QueuedMessage]:
        """Take up to `count` of the oldest ready messages out (a length limit drops them)."""
        taken: list[QueuedMessage] = []
        while len(taken) < count and not self._closed:
            message = self._peek()
            if message is None:
                before = self._read_offset
                await self._read_more()
                if self._read_offset == before and self._peek() is None:
                    break
                continue
            self._backlog.take()
            taken.append(message)
        return taken

    async def drop_expired(self) -> int | None:
        """Remove the expired messages at the head, reading it from the log if none is in memory;
        returns the deadline of the head that stays (None: none, or it never expires)."""
        while not self._closed:
            message = self._peek()
            if message is not None:
                return message.expires_at
            before = self._read_offset
            await self._read_more()
            if self._read_offset == before:
                return None
        return None

    # --- reading the log ------------------------------------------------------------------------

    def _can_read_more(self) -> bool:
        """A body to load, or the log not read far enough for anything to go out."""
        backlog = self._backlog
        return backlog.missing is not None or backlog.holds_back(self._read_offset, self._high_watermark)

    def _wants_data(self) -> bool:
        return bool(self._picker.consumers) and not self._closed and self._backlog.wants_data()

    def _start_feeding(self) -> None:
        if self._feeder is None and not self._closed:
            self._feeder = asyncio.create_task(self._feed(), name=f"queue-feed {self._name}")
        self._wake_feeder()

    def read_up_to(self, end: int) -> asyncio.Future | None:
        """A future done once the messages below `end` were read and handed to the consumers with
        room, or once they cannot be now (no room, nothing more to read); None when nobody consumes."""
        if self._feeder is None or self._closed or not self.consumers:
            return None
        waiter = asyncio.get_running_loop().create_future()
        self._read_waiters.append((end, waiter))
        self._wake_feeder()
        return waiter

    def hand_out_appended(self, partition: Partition, base_offset: int, records: list[Record]) -> bool:
        """This queue's publisher made the batch at `base_offset` durable: if the queue has read
        everything before it and nothing is reading now, its records go into the backlog as they
        were published, and out to the consumers with room, without being read back and decoded.
        False: the feeder reads them from the log as usual."""
        if (self._read_offset != base_offset or self._read_lock.locked() or not self._wants_data()
                or self._body_missing() or partition.config.log_append_time):
            return False
        end = base_offset + len(records)
        if end > partition.last_stable_offset:
            return False
        cursor, redelivered_below = self.cursor, self._redelivered_below
        self._partition_of = partition
        self._backlog.extend([
            QueuedMessage(offset, record.timestamp_ms, record.key, record.value, record.headers,
                          self._handed_out_before(offset) if offset < redelivered_below else 0)
            for offset, record in enumerate(records, base_offset) if not cursor.is_acked(offset)])
        self._read_offset = end
        self._fresh_from = base_offset
        try:
            self.dispatch()
        finally:
            self._fresh_from = None
            self._read_done()
        return True

    def _read_done(self, everything: bool = False) -> None:
        """Resolve the read waiters up to the read offset (all of them with `everything`)."""
        waiters = self._read_waiters
        if not waiters:
            return
        if everything:
            self._read_waiters = []
        else:
            read = self._read_offset
            self._read_waiters = [(end, waiter) for end, waiter in waiters if end > read]
            waiters = [(end, waiter) for end, waiter in waiters if end <= read]
        for _, waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def wake(self) -> None:
        """New data may be there, or a consumer has room again."""
        self._nudge_feeder()
        self.dispatch()

    def _nudge_feeder(self) -> None:
        """Something changed that may give the feeder work. A feeder that caught up with the log and
        waits for its next append is left alone unless something is known to be unread: that append
        wakes it (`_partition_moved`); a queue's own publishes are handed out as they are appended."""
        if not self._wants_data():
            return
        if self._watching is not None and self._read_offset >= self._high_watermark and not self._body_missing():
            return
        self._wake_feeder()

    def _wake_feeder(self) -> None:
        self._woken = True
        waiter = self._feeder_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _sleep(self, partition: Partition | None = None) -> None:
        """The feeder waits for _wake_feeder or, given the partition, for its next durable append
        or transaction marker or DATA_WAIT_S: one future, no task per wait (it sleeps after every
        read)."""
        if self._woken:
            self._woken = False
            return
        loop = asyncio.get_running_loop()
        waiter = self._feeder_waiter = loop.create_future()
        timer = None
        if partition is not None:
            self._watching = partition
            self._watch(partition)
            timer = loop.call_later(DATA_WAIT_S, _resolve, [waiter])
        try:
            await waiter
        finally:
            self._feeder_waiter = None
            self._woken = False
            if partition is not None:
                timer.cancel()
                self._watching = None
                partition.unwatch(self._watch_signal)
                self._watch_signal = None

    def _watch(self, partition: Partition) -> None:
        signal = self._watch_signal = asyncio.get_running_loop().create_future()
        signal.add_done_callback(self._partition_moved)
        partition.watch(signal)

    def _partition_moved(self, signal: asyncio.Future) -> None:
        """The partition the feeder waits on had a durable append or a transaction marker. When the
        queue's publisher already handed the append out (hand_out_appended: it hears of the append
        first), there is nothing to read, and waking the feeder only to find that out would cost a
        task step and a new wait per message."""
        partition = self._watching
        if signal is not self._watch_signal or partition is None:
            return
        self.note_high_watermark(partition.high_watermark)
        if self._read_offset >= partition.last_stable_offset and not self._body_missing():
            self._watch(partition)
        else:
            self._wake_feeder()

    async def _feed(self) -> None:
        try:
            await self._feed_loop()
        finally:
            self._read_done(everything=True)

    async def _feed_loop(self) -> None:
        while not self._closed:
            self._woken = False     # looking now: what woke it before is seen below
            if not self._wants_data():
                self._read_done(everything=True)    # no room: what is read waits for it
                await self._sleep()
                continue
            try:
                partition = await self._partition()
                self.note_high_watermark(partition.high_watermark)
                if self._read_offset >= partition.last_stable_offset and not self._body_missing():
                    self._read_done(everything=True)    # all there is (below an open transaction) is out
                    await self._sleep(partition)
                    continue
                self._fresh_from = self._read_offset
                await self._read_more()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._fresh_from = None
                log.warning("reading queue %s failed: %s", self._name, exc)
                self._read_done(everything=True)
                await asyncio.sleep(DATA_WAIT_S)
                continue
            try:
                self.dispatch()
            finally:
                self._fresh_from = None
                self._read_done()

    def _body_missing(self) -> bool:
        return self._backlog.missing is not None

    def _new_message(self, record) -> QueuedMessage:
        return QueuedMessage(record.offset, record.timestamp_ms, record.key, record.value, record.headers,
                             self._handed_out_before(record.offset) if record.offset < self._redelivered_below else 0)

    def _handed_out_before(self, offset: int) -> int:
        """An offset an earlier owner may have handed out: as often as its cursor counted, at least once."""
        return max(1, self.cursor.times_handed_out(offset))

    async def _read_more(self) -> None:
        async with self._read_lock:
            partition = self._partition_of = await self._partition()
            self.note_high_watermark(partition.high_watermark)
            if self._body_missing():
                await self._backlog.load_missing(partition, self._new_message)
                return
            offset = max(self._read_offset, partition.log_start_offset)
            if offset >= partition.last_stable_offset:
                return
            # As a read_committed Kafka consumer: nothing of an open transaction, nothing of an
            # aborted one, no transaction markers (those two are acknowledged as they go by).
            result = await partition.read_committed(offset, READ_BYTES)
            self.note_high_watermark(result.high_watermark)
            aborted = result.aborted
            passed_over: list[tuple[int, int]] = []

            def committed(header, _batch) -> bool:
                if header.is_transactional and any(t.producer_id == header.producer_id
                                                   and t.first_offset <= header.base_offset <= t.last_offset
                                                   for t in aborted):
                    passed_over.append((header.base_offset, header.base_offset + header.last_offset_delta + 1))
                    return False
                return True

            records, next_offset = data_records(
                result.records, wanted=committed if aborted else None, on_damaged=self._log_damaged,
                on_control=lambda h: passed_over.append((h.base_offset, h.base_offset + h.last_offset_delta + 1)))
            cursor, unacked = self.cursor, self._unacked
            if passed_over:
                for first, end in passed_over:
                    if end > max(first, offset):
                        cursor.ack(max(first, offset), end)
                self._cursor_changed()
            redelivered_below = self._redelivered_below
            self._backlog.extend([
                QueuedMessage(record.offset, record.timestamp_ms, record.key, record.value, record.headers,
                              self._handed_out_before(record.offset) if record.offset < redelivered_below else 0)
                for record in records
                if record.offset >= offset and record.offset not in unacked and not cursor.is_acked(record.offset)])
            self._read_offset = max(self._read_offset, next_offset)

    def _log_damaged(self, header, exc: Exception) -> None:
        log.error("queue %s: skipping the batch at offset %d: %s", self._name, header.base_offset, exc)

    # --- persisting the cursor ------------------------------------------------------------------

    def _reserve_ahead_of(self, offset: int) -> None:
        if not self._closed:
            self.cursor.reserve_deliveries(offset + DELIVERY_RESERVATION)
            self._cursor_changed()

    def _reserved_for(self, offset: int) -> bool:
        """Whether `offset` may be handed out now; asks for a reservation further ahead once half of
        the stored one is used, and waits for one beyond it."""
        if offset < self.cursor.delivery_reserved - DELIVERY_RESERVATION // 2:
            return True
        if self._closed:
            return False
        self._reserve_ahead_of(offset)
        if offset < self.cursor.delivery_reserved:
            return True
        if self._reserving is None:
            waiter = self._reserving = asyncio.get_running_loop().create_future()
            waiter.add_done_callback(self._reservation_stored)
            self._flush_waiters.append(waiter)
            self._hurry_flush()
        if self._fresh_from is not None:    # held for our bookkeeping only: still "at once" (TTL 0)
            fresh = self._fresh_when_reserved
            self._fresh_when_reserved = self._fresh_from if fresh is None else min(fresh, self._fresh_from)
        return False

    def _reservation_stored(self, _waiter: asyncio.Future) -> None:
        self._reserving = None
        try:
            if not self._closed:
                self.dispatch()
        finally:
            if self._reserving is None:     # no new wait began: what was held is no longer "at once"
                self._fresh_when_reserved = None

    def _cursor_changed(self) -> None:
        self._cursor_dirty = True
        if self._flusher is None and not self._closed:
            self._flusher = asyncio.create_task(self._flush_cursor(), name=f"queue-cursor {self._name}")

    async def _flush_cursor(self) -> None:
        try:
            while self._cursor_dirty:
                await self._pause_between_flushes()
                self._cursor_dirty = False
                waiters, self._flush_waiters = self._flush_waiters, []
                try:
                    await self.cursor.flush()
                    _resolve(waiters)
                    await self._trim()
                except Exception as exc:
                    log.warning("saving the position of queue %s failed: %s", self._name,
                                exc if isinstance(exc, CoreError) else repr(exc))
                    self._flush_waiters[:0] = [w for w in waiters if not w.done()]
                    self._cursor_dirty = True
                    if self._closed:
                        # close() tries once more and says how it went: a write refused for good
                        # (Fenced: this broker's term on the queue ended) must not hold the close.
                        return
                    await asyncio.sleep(DATA_WAIT_S)
        finally:
            self._flusher = None

    async def _pause_between_flushes(self) -> None:
        loop = asyncio.get_running_loop()
        wait_s = self._flushed_at + CURSOR_FLUSH_INTERVAL_S - loop.time()
        if wait_s > 0 and not self._flush_waiters and not self._closed:
            hurry = self._flush_hurry = loop.create_future()
            timer = loop.call_later(wait_s, _resolve, [hurry])
            try:
                await hurry
            finally:
                timer.cancel()
                self._flush_hurry = None
        self._flushed_at = loop.time()

    def _hurry_flush(self) -> None:
        if self._flush_hurry is not None:
            _resolve([self._flush_hurry])

    async def save_position(self) -> None:
        """Wait until the cursor, as it is now, is persisted (by the background flush, at once)."""
        if self._closed:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._flush_waiters.append(waiter)
        self._cursor_changed()
        self._hurry_flush()
        await waiter

    async def _trim(self) -> None:
        """The position moved: where the topic deletes what every subscription consumed, let the
        core do it (at most every TRIM_INTERVAL_MS, later if asked sooner); acks alone never
        delete records."""
        if self._delete_consumed is None or self._trim_later is not None:
            return
        wait_ms = self._last_trim_ms + TRIM_INTERVAL_MS - self._clock.now_ms()
        if wait_ms > 0:
            self._trim_later = asyncio.create_task(self._trim_after(wait_ms), name=f"queue-trim {self._name}")
            return
        self._last_trim_ms = self._clock.now_ms()
        await self._delete_consumed()

    async def _trim_after(self, wait_ms: int) -> None:
        try:
            await self._clock.sleep(wait_ms / 1000)
            self._last_trim_ms = self._clock.now_ms()
            await self._delete_consumed()
        except Exception as exc:
            log.warning("deleting what queue %s consumed failed: %s", self._name, exc)
        finally:
            self._trim_later = None

    async def close(self) -> None:
        """Stop reading and save the position (what is unacknowledged stays in the queue)."""
        self._closed = True
        for task in (self._feeder, self._trim_later):
            if task is not None:
                task.cancel()
        self._feeder = self._trim_later = None
        self._read_done(everything=True)
        self.cursor.end_reservation()
        self._cursor_changed()
        self._hurry_flush()
        flusher = self._flusher
        if flusher is not None:
            try:
                await flusher
            except Exception:
                pass
        if self._cursor_dirty:
            self._cursor_dirty = False
            await self.cursor.flush()
        _resolve(self._flush_waiters)
        self._flush_waiters = []

    def discard(self) -> None:
        """The queue is deleted: stop without saving anything."""
        self._closed = True
        for task in (self._feeder, self._flusher, self._trim_later):
            if task is not None:
                task.cancel()
        self._feeder = self._flusher = self._trim_later = None
        self._read_done(everything=True)
        self.consumers.clear()
        self._backlog.clear()
        self._unacked.clear()
        self._held.clear()
        _resolve(self._flush_waiters)
        self._flush_waiters = []


def _resolve(waiters: list[asyncio.Future]) -> None:
    for waiter in waiters:
        if not waiter.done():
            waiter.set_result(None)

