"""Queue length limits (x-max-length, x-max-length-bytes, with x-overflow), counted in ready
messages and their body bytes as RabbitMQ does (unacknowledged deliveries are not counted;
publishes taken but not yet durable are).

- drop-head: a publish is always taken; once it is durable, the oldest ready messages are removed
  (dead-lettered with reason maxlen, or dropped) until the queue is within its limits again.
- reject-publish: a publish that would take the queue over a limit (one more message than
  x-max-length, or more body bytes than x-max-length-bytes) is refused: its future fails with
  PublishRefused (a basic.nack under publisher confirms; otherwise it is silently dropped).
- reject-publish-dlx: refused the same way, and dead-lettered (reason maxlen).

Bytes: the queue's stored messages are sized by reading the log once (the queue is bounded by its
own limit, so this is bounded too) and then as they arrive: `ReadySizes` keeps offset -> body size
of every stored message not yet acknowledged; the ready bytes are those not held by a consumer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any, Protocol

from core.cursor import Cursor
from core.partition import Partition

from core.queues.dead_letter import MAXLEN, DeadLetterer
from core.queues.message import QueuedMessage
from core.queues.policy import DROP_HEAD, REJECT_PUBLISH_DLX, QueuePolicy
from core.queues.log_records import data_records
from core.records.builder import Record

log = logging.getLogger("gateway.core")

READ_BYTES = 1 << 20


class PublishRefused(Exception):
    """The queue is full and its overflow mode refuses publishes."""

    refused = True


def _retrieve(future: asyncio.Future) -> None:
    if not future.cancelled():
        future.exception()


class Subscription(Protocol):
    """What a length limit reads and takes of a queue's subscription (core/queues/subscription.py)."""
    cursor: Cursor
    ready_count: int

    def is_held(self, offset: int) -> bool: ...

    async def take_head(self, count: int) -> list[QueuedMessage]: ...

    def dead(self, messages: list[QueuedMessage], reason: str) -> None: ...


class Queue(Protocol):
    """What a length limit reads of its queue (core/queues/queue.py)."""
    name: str
    deleted: bool
    policy: QueuePolicy
    subscription: Any               # a Subscription here, or the owner's stand-in (no limit there)
    dead_letters: DeadLetterer | None
    publisher: Any                  # core/queues/publisher.py: BatchPublisher

    def partition(self) -> Awaitable[Partition]: ...


class ReadySizes:
    """Body sizes of the stored, not yet acknowledged messages of one queue."""

    def __init__(self) -> None:
        self._sizes: dict[int, int] = {}
        self._scanned_to: int | None = None
        self._lock = asyncio.Lock()

    async def scan(self, queue: Queue, subscription: Subscription) -> None:
        """Size what was appended since the last scan."""
        async with self._lock:
            partition = await queue.partition()
            offset = self._scanned_to
            if offset is None:
                offset = subscription.cursor.committed_offset
            offset = max(offset, partition.log_start_offset)
            sizes = self._sizes
            while offset < partition.high_watermark:
                result = await partition.read(offset, READ_BYTES)
                records, next_offset = data_records(result.records)
                for record in records:
                    if record.offset >= offset:
                        sizes[record.offset] = len(record.value or b"")
                if next_offset <= offset:
                    break
                offset = next_offset
            self._scanned_to = offset

    def ready_bytes(self, subscription: Subscription) -> int:
        """Bytes of the sized messages that are ready (forgetting the acknowledged ones)."""
        cursor = subscription.cursor
        committed = cursor.committed_offset
        sizes = self._sizes
        gone = [offset for offset in sizes if offset < committed or cursor.is_acked(offset)]
        for offset in gone:
            del sizes[offset]
        return sum(size for offset, size in sizes.items() if not subscription.is_held(offset))


class LengthLimit:
    def __init__(self, queue: Queue) -> None:
        policy = queue.policy
        self._queue = queue
        self._max = policy.max_length
        self._max_bytes = policy.max_length_bytes
        self._overflow = policy.overflow
        self._sizes = ReadySizes() if self._max_bytes is not None else None
        self.in_flight = 0             # publishes taken, not yet durable
        self.in_flight_bytes = 0
        self._landed_bytes = 0         # durable since the last scan (may overlap it by a batch)
        self._counted_bytes = 0        # ready bytes at the last count
        self._enforcer: asyncio.Task | None = None
        self._again = False

    @property
    def length(self) -> int:
        subscription = self._queue.subscription
        return (subscription.ready_count if subscription is not None else 0) + self.in_flight

    def _would_overflow(self, size: int) -> bool:
        if self._max is not None and self.length + 1 > self._max:
            return True
        if self._max_bytes is None:
            return False
        unscanned = self._landed_bytes + self.in_flight_bytes
        if self._counted_bytes + unscanned + size <= self._max_bytes:
            return False
        # The last count may be stale (deliveries since made messages unready): count again.
        subscription = self._queue.subscription
        if subscription is not None and self._sizes is not None:
            self._counted_bytes = self._sizes.ready_bytes(subscription)
        return self._counted_bytes + unscanned + size > self._max_bytes

    def publish(self, record: Record) -> asyncio.Future:
        queue = self._queue
        size = len(record.value or b"")
        if self._overflow != DROP_HEAD and self._would_overflow(size):
            if self._overflow == REJECT_PUBLISH_DLX and queue.dead_letters is not None:
                queue.dead_letters.send_record(record, MAXLEN)
            refused = asyncio.get_running_loop().create_future()
            refused.set_exception(PublishRefused(f"queue '{queue.name}' is full"))
            refused.add_done_callback(_retrieve)
            return refused
        self.in_flight += 1
        self.in_flight_bytes += size
        future = queue.publisher.publish(record)
        future.add_done_callback(lambda done: self._landed(done, size))
        return future

    def _landed(self, done: asyncio.Future, size: int) -> None:
        self.in_flight -= 1
        self.in_flight_bytes -= size
        if not done.cancelled() and done.exception() is None:
            self._landed_bytes += size
        self.durable()

    def durable(self) -> None:
        """Publishes became durable: size them, and with drop-head trim the queue to its limits."""
        subscription = self._queue.subscription
        if subscription is None or (self._overflow != DROP_HEAD and self._sizes is None):
            return
        if self._sizes is None and subscription.ready_count <= (self._max or 0):
            return
        if self._enforcer is not None:
            self._again = True
            return
        self._enforcer = asyncio.create_task(self._enforce(), name=f"queue-max-length {self._queue.name}")

    async def _enforce(self) -> None:
        queue = self._queue
        subscription = queue.subscription
        try:
            while subscription is not None and not queue.deleted:
                self._again = False
                ready_bytes = 0
                if self._sizes is not None:
                    landed, self._landed_bytes = self._landed_bytes, 0
                    try:
                        await self._sizes.scan(queue, subscription)
                    except BaseException:
                        self._landed_bytes += landed
                        raise
                    ready_bytes = self._counted_bytes = self._sizes.ready_bytes(subscription)
                if self._overflow == DROP_HEAD:
                    await self._drop_head(subscription, ready_bytes)
                if not self._again:
                    break
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("enforcing the length limit of queue %s failed: %s", queue.name, exc)
        finally:
            self._enforcer = None

    async def _drop_head(self, subscription: Subscription, ready_bytes: int) -> None:
        excess = subscription.ready_count - self._max if self._max is not None else 0
        max_bytes = self._max_bytes
        while excess > 0 or (max_bytes is not None and ready_bytes > max_bytes):
            taken = await subscription.take_head(max(1, excess))
            if not taken:
                return
            excess -= len(taken)
            ready_bytes -= sum(len(message.value or b"") for message in taken)
            subscription.dead(taken, MAXLEN)

    def close(self) -> None:
        if self._enforcer is not None:
            self._enforcer.cancel()
