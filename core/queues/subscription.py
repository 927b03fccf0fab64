"""A shared subscription: one cursor on a partition, its messages load-balanced over consumers.

This is an AMQP queue's delivery side, in the core's words:

- Messages are read from the log ahead of the consumers (a bounded read-ahead buffer) starting at
  the cursor's committed offset, skipping what the cursor records as acknowledged.
- Each message goes to one consumer with room, round robin. A consumer's room is its prefetch (the
  unacknowledged deliveries it may hold; 0 is unlimited) and whatever else it says through
  `can_deliver` (a paused channel, a full output buffer). Auto-ack consumers acknowledge on delivery.
- Acknowledging moves the cursor (committed offset plus individually acknowledged ranges); the
  cursor is persisted in the background, one write at a time however many acks arrive meanwhile.
- A rejected message with requeue, and every unacknowledged message of a consumer that goes away,
  is handed out again before anything newer, in offset order, marked as redelivered. Rejected
  without requeue, it is dropped (acknowledged).
- `get` takes one message without a consumer (AMQP's basic.get), held by any owner object.

Owned by the event loop; nothing here blocks it. Deliveries are synchronous calls into the
consumers, which only buffer output.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Protocol

from core.clock import Clock
from core.cursor import Cursor
from core.errors import CoreError, ExclusiveUse
from core.partition import Partition
from core.records import batch as record_batch
from core.records.decoder import decode_batch

log = logging.getLogger("gateway.core")

READ_AHEAD_MESSAGES = 512        # read more while fewer than this wait in memory
READ_AHEAD_BYTES = 8 << 20       # ... and while their bodies take less than this
READ_BYTES = 1 << 20             # per log read (at least one whole batch)
DATA_WAIT_S = 1.0                # re-check for consumers this often while waiting for new data
TRIM_INTERVAL_MS = 10_000        # drop acknowledged ledgers at most this often
_MAX_DECODE_BYTES = 256 << 20


@dataclass(slots=True, eq=False)
class QueuedMessage:
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    deliveries: int = 0          # how often it was handed out before

    @property
    def redelivered(self) -> bool:
        return self.deliveries > 0


class Consumer(Protocol):
    prefetch: int                # unacknowledged deliveries it may hold; 0: no limit
    auto_ack: bool               # deliveries count as acknowledged at once

    def can_deliver(self) -> bool:
        """Room beyond prefetch: False while paused or while its output is backed up."""

    def deliver(self, message: QueuedMessage) -> None:
        """Hand the message over (buffer it for the client); must not call back into the queue."""

    def queue_deleted(self) -> None:
        """The queue was deleted under the consumer: nothing more will come (AMQP sends basic.cancel)."""


class SharedSubscription:
    def __init__(self, partition: Callable[[], Awaitable[Partition]], cursor: Cursor, clock: Clock, *,
                 name: str = "") -> None:
        self._partition = partition
        self.cursor = cursor
        self._clock = clock
        self._name = name
        self.consumers: list[Consumer] = []
        self.exclusive_consumer: Consumer | None = None
        self._turn = 0                                   # round-robin position in consumers
        self._buffer: deque[QueuedMessage] = deque()     # read ahead, not yet handed out, offset order
        self._buffer_bytes = 0
        self._requeued: list[tuple[int, QueuedMessage]] = []   # heap: handed out again first
        self._unacked: dict[int, tuple[QueuedMessage, Hashable]] = {}
        self._held: dict[Hashable, set[int]] = {}        # owner -> offsets it has not acknowledged
        self._read_offset = cursor.committed_offset
        self._high_watermark = 0                         # as last seen; refreshed on every read
        self._read_lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._feeder: asyncio.Task | None = None
        self._flusher: asyncio.Task | None = None
        self._cursor_dirty = False
        self._last_trim_ms = 0
        self._dispatching = False
        self._dispatch_again = False
        self._closed = False

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

    # --- consumers ------------------------------------------------------------------------------

    def add_consumer(self, consumer: Consumer, *, exclusive: bool = False) -> None:
        self.check_consumer(exclusive=exclusive)
        self.consumers.append(consumer)
        if exclusive:
            self.exclusive_consumer = consumer
        self._start_feeding()
        self.dispatch()

    def check_consumer(self, *, exclusive: bool = False) -> None:
        """Raise what add_consumer would raise, without adding anything."""
        if self.exclusive_consumer is not None or (exclusive and self.consumers):
            raise ExclusiveUse(f"queue '{self._name}' in exclusive use")

    def remove_consumer(self, consumer: Consumer, *, holder: Hashable | None = None) -> None:
        """The consumer is gone: what it held is handed out again, or, with `holder`, stays
        unacknowledged in the holder's name (AMQP: a cancelled consumer's deliveries belong to its
        channel until acknowledged or the channel closes)."""
        if consumer in self.consumers:
            index = self.consumers.index(consumer)
            del self.consumers[index]
            if index < self._turn:
                self._turn -= 1
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
        for offset in offsets:
            message, _ = self._unacked.pop(offset)
            heapq.heappush(self._requeued, (offset, message))
        self.dispatch()

    # --- acknowledgements -----------------------------------------------------------------------

    def ack(self, offsets: list[int]) -> None:
        for offset in offsets:
            if self._forget(offset):
                self.cursor.ack(offset)
        self._cursor_changed()
        self.dispatch()

    def reject(self, offsets: list[int], *, requeue: bool) -> None:
        for offset in offsets:
            entry = self._unacked.get(offset)
            if entry is None or not self._forget(offset):
                continue
            if requeue:
                heapq.heappush(self._requeued, (offset, entry[0]))
            else:
                self.cursor.ack(offset)
        if not requeue:
            self._cursor_changed()
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
        self._clear_buffer()
        self._requeued.clear()
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
        try:
            again = True
            while again:
                self._dispatch_again = False
                self._dispatch_round()
                again = self._dispatch_again
        finally:
            self._dispatching = False
        if self._wants_data():
            self._wake.set()

    def _dispatch_round(self) -> None:
        consumers = self.consumers
        idle = 0
        while consumers and idle < len(consumers):
            message = self._peek()
            if message is None:
                return
            self._turn %= len(consumers)
            consumer = consumers[self._turn]
            self._turn += 1
            if not self._has_room(consumer):
                idle += 1
                continue
            idle = 0
            self._take()
            self._hand_out(message, consumer, consumer.auto_ack)
            consumer.deliver(message)
            message.deliveries += 1

    def _has_room(self, consumer: Consumer) -> bool:
        if consumer.prefetch and len(self._held.get(consumer, ())) >= consumer.prefetch:
            return False
        return consumer.can_deliver()

    def _peek(self) -> QueuedMessage | None:
        requeued, buffer, cursor = self._requeued, self._buffer, self.cursor
        while requeued:
            message = requeued[0][1]
            if not cursor.is_acked(message.offset):
                return message
            heapq.heappop(requeued)
        while buffer:
            message = buffer[0]
            if not cursor.is_acked(message.offset) and message.offset not in self._unacked:
                return message
            self._pop_buffer()
        return None

    def _take(self) -> None:
        if self._requeued:
            heapq.heappop(self._requeued)
        else:
            self._pop_buffer()

    def _pop_buffer(self) -> None:
        message = self._buffer.popleft()
        self._buffer_bytes -= len(message.value or b"")

    def _clear_buffer(self) -> None:
        self._buffer.clear()
        self._buffer_bytes = 0

    def _hand_out(self, message: QueuedMessage, owner: Hashable, auto_ack: bool) -> None:
        if auto_ack:
            self.cursor.ack(message.offset)
            self._cursor_changed()
        else:
            self._unacked[message.offset] = (message, owner)
            self._held.setdefault(owner, set()).add(message.offset)

    async def get(self, owner: Hashable, *, auto_ack: bool) -> QueuedMessage | None:
        """One message for `owner` (no consumer needed), or None if none is waiting."""
        message = self._peek()
        if message is None:
            await self._read_more()
            message = self._peek()
            if message is None:
                return None
        self._take()
        self._hand_out(message, owner, auto_ack)
        redelivered_copy = QueuedMessage(message.offset, message.timestamp_ms, message.key, message.value,
                                         message.headers, message.deliveries)
        message.deliveries += 1
        if self._wants_data():
            self._wake.set()
        return redelivered_copy

    # --- reading the log ------------------------------------------------------------------------

    def _wants_data(self) -> bool:
        return (bool(self.consumers) and len(self._buffer) < READ_AHEAD_MESSAGES
                and self._buffer_bytes < READ_AHEAD_BYTES and not self._closed)

    def _start_feeding(self) -> None:
        if self._feeder is None and not self._closed:
            self._feeder = asyncio.create_task(self._feed(), name=f"queue-feed {self._name}")
        self._wake.set()

    def wake(self) -> None:
        """New data may be there, or a consumer has room again."""
        if self._wants_data():
            self._wake.set()
        self.dispatch()

    async def _feed(self) -> None:
        while not self._closed:
            if not self._wants_data():
                self._wake.clear()
                await self._wake.wait()
                continue
            try:
                partition = await self._partition()
                self.note_high_watermark(partition.high_watermark)
                if self._read_offset >= partition.high_watermark:
                    self._wake.clear()
                    await _first_of(partition.wait_for_data(self._read_offset, DATA_WAIT_S), self._wake.wait())
                    continue
                await self._read_more()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("reading queue %s failed: %s", self._name, exc)
                await asyncio.sleep(DATA_WAIT_S)
                continue
            self.dispatch()

    async def _read_more(self) -> None:
        async with self._read_lock:
            partition = await self._partition()
            self.note_high_watermark(partition.high_watermark)
            offset = max(self._read_offset, partition.log_start_offset)
            if offset >= partition.high_watermark:
                return
            result = await partition.read(offset, READ_BYTES)
            self.note_high_watermark(result.high_watermark)
            next_offset = offset
            for batch in record_batch.split_batches(result.records):
                header = record_batch.read_header(batch)
                next_offset = max(next_offset, header.base_offset + header.last_offset_delta + 1)
                if header.is_control:
                    continue
                try:
                    _, records = decode_batch(batch, max_decompressed_bytes=_MAX_DECODE_BYTES)
                except Exception as exc:   # damaged data is skipped, never served
                    log.error("queue %s: skipping the batch at offset %d: %s", self._name, header.base_offset, exc)
                    continue
                cursor, unacked, buffer = self.cursor, self._unacked, self._buffer
                for record in records:
                    if record.offset < offset or cursor.is_acked(record.offset) or record.offset in unacked:
                        continue
                    buffer.append(QueuedMessage(record.offset, record.timestamp_ms, record.key, record.value,
                                                record.headers))
                    self._buffer_bytes += len(record.value or b"")
            self._read_offset = max(self._read_offset, next_offset)

    # --- persisting the cursor ------------------------------------------------------------------

    def _cursor_changed(self) -> None:
        self._cursor_dirty = True
        if self._flusher is None and not self._closed:
            self._flusher = asyncio.create_task(self._flush_cursor(), name=f"queue-cursor {self._name}")

    async def _flush_cursor(self) -> None:
        try:
            while self._cursor_dirty:
                self._cursor_dirty = False
                try:
                    await self.cursor.flush()
                    await self._trim()
                except CoreError as exc:
                    log.warning("saving the position of queue %s failed: %s", self._name, exc)
                    self._cursor_dirty = True
                    await asyncio.sleep(DATA_WAIT_S)
                except Exception as exc:
                    log.warning("saving the position of queue %s failed: %r", self._name, exc)
                    self._cursor_dirty = True
                    await asyncio.sleep(DATA_WAIT_S)
        finally:
            self._flusher = None

    async def _trim(self) -> None:
        """Acknowledged data below the committed offset is no longer needed: drop whole ledgers."""
        now = self._clock.now_ms()
        if now - self._last_trim_ms < TRIM_INTERVAL_MS:
            return
        self._last_trim_ms = now
        partition = await self._partition()
        if self.cursor.committed_offset > partition.log_start_offset:
            await partition.delete_records_before(self.cursor.committed_offset)

    async def close(self) -> None:
        """Stop reading and save the position (what is unacknowledged stays in the queue)."""
        self._closed = True
        for task in (self._feeder,):
            if task is not None:
                task.cancel()
        self._feeder = None
        flusher = self._flusher
        if flusher is not None:
            try:
                await flusher
            except Exception:
                pass
        if self._cursor_dirty:
            self._cursor_dirty = False
            await self.cursor.flush()

    def discard(self) -> None:
        """The queue is deleted: stop without saving anything."""
        self._closed = True
        for task in (self._feeder, self._flusher):
            if task is not None:
                task.cancel()
        self._feeder = self._flusher = None
        self.consumers.clear()
        self._clear_buffer()
        self._requeued.clear()
        self._unacked.clear()
        self._held.clear()


async def _first_of(*waits: Awaitable) -> None:
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
