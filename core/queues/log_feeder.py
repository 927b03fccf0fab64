"""Reading a queue's log ahead of its consumers into the backlog of its deliveries.

Messages are read from the cursor's committed offset on, skipping what the cursor records as
acknowledged or what is held unacknowledged, as a read_committed Kafka consumer reads: nothing of
an open transaction, nothing of an aborted one, no transaction markers (those two are
acknowledged as they go by). One task reads while the subscription wants data (consumers with
room, a backlog not full); caught up with the log, it waits on the partition for its next
durable append (at most `data_wait_s`). A queue's own publishes skip the read: they are put into
the backlog as they were published (`hand_out_appended`).

Messages below `redelivered_below` (handed out by an earlier process and never acknowledged) come
out marked redelivered, as often as the cursor counted their hand-outs, at least once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from core.partition import Partition
from core.queues.cursor_writer import resolve
from core.queues.deliveries import Deliveries
from core.queues.log_records import data_records
from core.queues.message import QueuedMessage
from core.records.builder import Record

log = logging.getLogger("gateway.core")

READ_BYTES = 1 << 20             # per log read (at least one whole batch)


class LogFeeder:
    def __init__(self, partition: Callable[[], Awaitable[Partition]], deliveries: Deliveries, *, name: str,
                 redelivered_below: int, data_wait_s: float, wants_data: Callable[[], bool],
                 dispatch: Callable[[], None], cursor_changed: Callable[[], None]) -> None:
        self._open_partition = partition
        self._deliveries = deliveries
        self.cursor = deliveries.cursor
        self._name = name
        self.redelivered_below = redelivered_below
        self._data_wait_s = data_wait_s
        self._wants_data = wants_data       # consumers with room, and a backlog not full
        self._dispatch = dispatch           # hand out what was read
        self._cursor_changed = cursor_changed
        self.read_offset = self.cursor.committed_offset
        self.high_watermark = 0                          # as last seen; refreshed on every read
        self.partition: Partition | None = None          # as last opened: its meter holds the trace writer
        self.fresh_from: int | None = None               # offsets from here were just read: deliverable even if expired
        self.closed = False
        self._read_lock = asyncio.Lock()
        self._woken = False                               # the feeder should look again
        self._waiter: asyncio.Future | None = None        # what the feeder sleeps on
        self._watching: Partition | None = None           # the partition the caught-up feeder waits on
        self._watch_signal: asyncio.Future | None = None  # resolved by that partition's next append
        self._task: asyncio.Task | None = None
        self._read_waiters: list[tuple[int, asyncio.Future]] = []   # (end offset, done once read and handed out)

    @property
    def running(self) -> bool:
        return self._task is not None

    def note_high_watermark(self, high_watermark: int) -> None:
        self.high_watermark = max(self.high_watermark, high_watermark)

    def body_missing(self) -> bool:
        return self._deliveries.backlog.missing is not None

    def can_read_more(self) -> bool:
        """A body to load, or the log not read far enough for anything to go out."""
        backlog = self._deliveries.backlog
        return backlog.missing is not None or backlog.holds_back(self.read_offset, self.high_watermark)

    # --- the task -------------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None and not self.closed:
            self._task = asyncio.create_task(self._feed(), name=f"queue-feed {self._name}")
        self.wake()

    def stop(self) -> None:
        self.closed = True
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self.read_done(everything=True)

    def read_up_to(self, end: int) -> asyncio.Future | None:
        """A future done once the messages below `end` were read and handed to the consumers with
        room, or once they cannot be now (no room, nothing more to read); None when not reading."""
        if self._task is None or self.closed:
            return None
        waiter = asyncio.get_running_loop().create_future()
        self._read_waiters.append((end, waiter))
        self.wake()
        return waiter

    def read_done(self, everything: bool = False) -> None:
        """Resolve the read waiters up to the read offset (all of them with `everything`)."""
        waiters = self._read_waiters
        if not waiters:
            return
        if everything:
            self._read_waiters = []
        else:
            read = self.read_offset
            self._read_waiters = [(end, waiter) for end, waiter in waiters if end > read]
            waiters = [(end, waiter) for end, waiter in waiters if end <= read]
        for _, waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def nudge(self) -> None:
        """Something changed that may give the feeder work. A feeder that caught up with the log and
        waits for its next append is left alone unless something is known to be unread: that append
        wakes it (`_partition_moved`); a queue's own publishes are handed out as they are appended."""
        if not self._wants_data():
            return
        if self._watching is not None and self.read_offset >= self.high_watermark and not self.body_missing():
            return
        self.wake()

    def wake(self) -> None:
        self._woken = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _sleep(self, partition: Partition | None = None) -> None:
        """Wait for `wake` or, given the partition, for its next durable append or transaction
        marker or data_wait_s: one future, no task per wait (it sleeps after every read)."""
        if self._woken:
            self._woken = False
            return
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        timer = None
        if partition is not None:
            self._watching = partition
            self._watch(partition)
            timer = loop.call_later(self._data_wait_s, resolve, [waiter])
        try:
            await waiter
        finally:
            self._waiter = None
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
        if self.read_offset >= partition.last_stable_offset and not self.body_missing():
            self._watch(partition)
        else:
            self.wake()

    async def _feed(self) -> None:
        try:
            await self._feed_loop()
        finally:
            self.read_done(everything=True)

    async def _feed_loop(self) -> None:
        while not self.closed:
            self._woken = False     # looking now: what woke it before is seen below
            if not self._wants_data():
                self.read_done(everything=True)    # no room: what is read waits for it
                await self._sleep()
                continue
            try:
                partition = await self._open_partition()
                self.note_high_watermark(partition.high_watermark)
                if self.read_offset >= partition.last_stable_offset and not self.body_missing():
                    self.read_done(everything=True)    # all there is (below an open transaction) is out
                    await self._sleep(partition)
                    continue
                self.fresh_from = self.read_offset
                await self.read_more()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.fresh_from = None
                log.warning("reading queue %s failed: %s", self._name, exc)
                self.read_done(everything=True)
                await asyncio.sleep(self._data_wait_s)
                continue
            try:
                self._dispatch()
            finally:
                self.fresh_from = None
                self.read_done()

    # --- reading --------------------------------------------------------------------------------

    def _new_message(self, record) -> QueuedMessage:
        return QueuedMessage(record.offset, record.timestamp_ms, record.key, record.value, record.headers,
                             self._handed_out_before(record.offset) if record.offset < self.redelivered_below else 0)

    def _handed_out_before(self, offset: int) -> int:
        """An offset an earlier owner may have handed out: as often as its cursor counted, at least once."""
        return max(1, self.cursor.times_handed_out(offset))

    async def read_more(self) -> None:
        """Read the next part of the log into the backlog (or the bodies it misses)."""
        async with self._read_lock:
            partition = self.partition = await self._open_partition()
            self.note_high_watermark(partition.high_watermark)
            backlog = self._deliveries.backlog
            if self.body_missing():
                await backlog.load_missing(partition, self._new_message)
                return
            offset = max(self.read_offset, partition.log_start_offset)
            if offset >= partition.last_stable_offset:
                return
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
            cursor, unacked = self.cursor, self._deliveries.unacked
            if passed_over:
                for first, end in passed_over:
                    if end > max(first, offset):
                        cursor.ack(max(first, offset), end)
                self._cursor_changed()
            redelivered_below = self.redelivered_below
            backlog.extend([
                QueuedMessage(record.offset, record.timestamp_ms, record.key, record.value, record.headers,
                              self._handed_out_before(record.offset) if record.offset < redelivered_below else 0)
                for record in records
                if record.offset >= offset and record.offset not in unacked and not cursor.is_acked(record.offset)])
            self.read_offset = max(self.read_offset, next_offset)

    def _log_damaged(self, header, exc: Exception) -> None:
        log.error("queue %s: skipping the batch at offset %d: %s", self._name, header.base_offset, exc)

    def hand_out_appended(self, partition: Partition, base_offset: int, records: list[Record]) -> bool:
        """This queue's publisher made the batch at `base_offset` durable: if the queue has read
        everything before it and nothing is reading now, its records go into the backlog as they
        were published, and out to the consumers with room, without being read back and decoded.
        False: the feeder reads them from the log as usual."""
        if (self.read_offset != base_offset or self._read_lock.locked() or not self._wants_data()
                or self.body_missing() or partition.config.log_append_time):
            return False
        end = base_offset + len(records)
        if end > partition.last_stable_offset:
            return False
        cursor, redelivered_below = self.cursor, self.redelivered_below
        self.partition = partition
        self._deliveries.backlog.extend([
            QueuedMessage(offset, record.timestamp_ms, record.key, record.value, record.headers,
                          self._handed_out_before(offset) if offset < redelivered_below else 0)
            for offset, record in enumerate(records, base_offset) if not cursor.is_acked(offset)])
        self.read_offset = end
        self.fresh_from = base_offset
        try:
            self._dispatch()
        finally:
            self.fresh_from = None
            self.read_done()
        return True
