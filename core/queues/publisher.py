"""Coalescing publishes into record batches: one storage append per batch, not per message.

Publishes made while the event loop runs other work (one read from a socket often holds hundreds,
and many connections publish at once) wait in a list; at the end of the loop's turn they are taken
as one RecordBatch v2 (up to MAX_BATCH_BYTES; a single larger message gets a batch of its own) and
appended: by a plain callback when the queue's partition is open, else by a task that opens it. Every
publish of a batch gets the same future, which resolves once the batch is durable, so a publisher
confirm is never sent for a message that is not stored. The queue's consumers are handed the
batch's messages before that future resolves: a delivery goes out before the confirm of the same
message, as RabbitMQ writes them. They are handed the records the batch was built from, when the
queue has read everything before it, rather than reading back and decoding what was just written.
Batches of one queue are durable in the order they were made.

Back-pressure: `backlog_bytes` counts what is queued or appended but not yet durable; callers wait
on `wait_writable()` past MAX_BACKLOG_BYTES.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from core.partition import Partition
from core.records.builder import Record, build_batch

log = logging.getLogger("gateway.core")

MAX_BATCH_BYTES = 1 << 20
MAX_BACKLOG_BYTES = 64 << 20
_RECORD_OVERHEAD = 64    # a record's framing and its small headers, roughly


def _retrieve(future: asyncio.Future) -> None:
    # Nobody may wait for a batch (no confirms asked): its failure must not log "never retrieved".
    if not future.cancelled():
        future.exception()


class BatchPublisher:
    """Owned by the event loop. `partition` returns the queue's partition (reopened if the core
    closed it while idle). Once a batch is durable, `deliver_first` is called with its base offset
    and records; if it returns a future, the batch's future resolves (and `on_durable` is called)
    only once that one is done."""

    def __init__(self, partition: Callable[[], Awaitable[Partition]], *, on_durable: Callable[[], None] | None = None,
                 deliver_first: Callable[[int, list[Record]], asyncio.Future | None] | None = None,
                 open_partition: Callable[[], Partition | None] = lambda: None,
                 max_batch_bytes: int = MAX_BATCH_BYTES) -> None:
        self._partition = partition
        self._open_partition = open_partition
        self._on_durable = on_durable
        self._deliver_first = deliver_first
        self._max_batch_bytes = max_batch_bytes
        self._records: list[Record] = []
        self._pending_bytes = 0
        self._future: asyncio.Future | None = None      # shared by the records waiting in _records
        self._sealed: list[tuple[list[Record], int, asyncio.Future]] = []   # batches not yet appended
        self._flusher: asyncio.Task | asyncio.Handle | None = None   # the cut at the end of this turn
        self._backlog = 0
        self._writable = asyncio.Event()
        self._writable.set()
        self.batches_appended = 0

    @property
    def backlog_bytes(self) -> int:
        return self._backlog

    def publish(self, record: Record) -> asyncio.Future:
        """Queue `record`; the future resolves (to nothing) once it is durable, or fails."""
        size = len(record.value or b"") + len(record.key or b"") + _RECORD_OVERHEAD
        if self._records and self._pending_bytes + size > self._max_batch_bytes:
            self._seal()
        if self._future is None:
            self._future = asyncio.get_running_loop().create_future()
            self._future.add_done_callback(_retrieve)
        self._records.append(record)
        self._pending_bytes += size
        self._add_backlog(size)
        future = self._future
        self._cut_at_end_of_turn()
        return future

    def publish_batch(self, records: list[Record]) -> asyncio.Future:
        """Append `records` as one RecordBatch of their own, after everything published before:
        stored all together or not at all. The future resolves once the batch is durable."""
        self._seal()
        future = asyncio.get_running_loop().create_future()
        future.add_done_callback(_retrieve)
        size = sum(len(r.value or b"") + len(r.key or b"") + _RECORD_OVERHEAD for r in records)
        self._sealed.append((list(records), size, future))
        self._add_backlog(size)
        self._cut_at_end_of_turn()
        return future

    @property
    def writable(self) -> bool:
        """False while the backlog is above its limit (publishers should wait)."""
        return self._writable.is_set()

    async def wait_writable(self) -> None:
        await self._writable.wait()

    # --- flushing -----------------------------------------------------------------------------

    def _seal(self) -> None:
        """Close the current batch: later publishes start a new one."""
        if self._records:
            self._sealed.append((self._records, self._pending_bytes, self._future))
        self._records, self._pending_bytes, self._future = [], 0, None

    def _take_sealed(self) -> list[tuple[list[Record], int, asyncio.Future]]:
        self._seal()
        batches, self._sealed = self._sealed, []
        return batches

    def _cut_at_end_of_turn(self) -> None:
        if self._flusher is None:
            self._flusher = asyncio.get_running_loop().call_soon(self._cut)

    def _cut(self) -> None:
        try:
            partition = self._open_partition()
        except Exception:    # the task below meets the same error and fails what waits
            partition = None
        if partition is None:
            self._flusher = asyncio.create_task(self._flush(), name="queue-publish")
            return
        self._flusher = None
        for records, size, future in self._take_sealed():
            self._append(partition, records, size, future)

    async def _flush(self) -> None:
        batches: list = []
        try:
            while batches := self._take_sealed():
                partition = await self._partition()
                for records, size, future in batches:
                    self._append(partition, records, size, future)
                batches = []
        except Exception as exc:   # the partition could not be opened: fail everything waiting
            for _, size, future in batches + self._take_sealed():   # those taken before the failure too
                self._fail(future, size, exc)
        finally:
            self._flusher = None
            if self._records:    # arrived while the last append was being queued
                self._cut_at_end_of_turn()

    def _append(self, partition: Partition, records: list[Record], size: int, future: asyncio.Future) -> None:
        try:
            appended = partition.start_append(build_batch(records))
        except Exception as exc:
            self._fail(future, size, exc)
            return
        self.batches_appended += 1
        appended.add_done_callback(lambda done: self._appended(done, records, future, size))

    def _appended(self, done: asyncio.Future, records: list[Record], future: asyncio.Future, size: int) -> None:
        exc = None if done.cancelled() else done.exception()
        if done.cancelled():
            exc = asyncio.CancelledError()
        if exc is not None:
            self._fail(future, size, exc)
            return
        self._add_backlog(-size)
        handed_out = self._deliver_first(done.result(), records) if self._deliver_first is not None else None
        if handed_out is None:
            self._durable(future)
        else:     # confirms after the deliveries of the batch, as RabbitMQ writes them
            handed_out.add_done_callback(lambda _: self._durable(future))

    def _durable(self, future: asyncio.Future) -> None:
        if not future.done():
            future.set_result(None)
        if self._on_durable is not None:
            self._on_durable()

    def _fail(self, future: asyncio.Future, size: int, exc: BaseException) -> None:
        self._add_backlog(-size)
        log.warning("publishing to a queue failed: %s", exc)
        if not future.done():
            future.set_exception(exc)

    def _add_backlog(self, delta: int) -> None:
        self._backlog += delta
        if self._backlog > MAX_BACKLOG_BYTES:
            self._writable.clear()
        else:
            self._writable.set()
