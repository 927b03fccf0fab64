"""A partition: Kafka RecordBatches (magic 2) stored exactly as received, over one managed log.

Append validates each batch's framing, magic and CRC-32C and its size against max.message.bytes,
rewrites only the base offset (outside the CRC), and hands the bytes to the log: no per-record work.
Reads return whole batches from the one containing the requested offset, as Kafka does, so a read
that starts inside a batch returns that batch.

Owned by the event loop: offsets are assigned synchronously in `append`, so concurrent appends to
one partition are ordered by their arrival.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from core.clock import Clock
from core.errors import (CoreError, CorruptRecord, InvalidRecord, NotOwner, OffsetOutOfRange, RecordTooLarge,
                         StorageUnavailable)
from core.producer_state import ProducerStates
from core.records import batch as record_batch
from core.records.decoder import decode_batch
from core.topic_config import EffectiveConfig
from storage.api import LedgerFenced, LogClosed, ManagedLog, PositionOutOfRange, RetentionPolicy, StorageError

MAX_DECODE_BYTES = 64 << 20


@dataclass(frozen=True, slots=True)
class ReadResult:
    records: bytes               # whole batches, back to back (Kafka's "records" field)
    high_watermark: int
    log_start_offset: int


@contextmanager
def storage_errors() -> Iterator[None]:
    """Turn storage failures into the core's protocol-neutral errors."""
    try:
        yield
    except (LogClosed, LedgerFenced) as exc:
        raise NotOwner(str(exc)) from exc
    except PositionOutOfRange as exc:
        raise OffsetOutOfRange(str(exc)) from exc
    except StorageError as exc:
        raise StorageUnavailable(str(exc)) from exc


async def _resolved(value: int) -> int:
    return value


def _retrieve(future: asyncio.Future) -> None:
    if not future.cancelled():
        future.exception()


def retention_policy(config: EffectiveConfig) -> RetentionPolicy:
    return RetentionPolicy(config.retention_ms, config.retention_bytes, config.segment_bytes, config.segment_ms)


class Partition:
    def __init__(self, topic: str, index: int, log: ManagedLog, config: EffectiveConfig, clock: Clock) -> None:
        self.topic = topic
        self.index = index
        self.log = log
        self.config = config
        self._clock = clock
        self.producers = ProducerStates()

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    async def append(self, records: bytes | memoryview) -> int:
        """Store every batch of a Produce "records" field; returns the base offset of the first."""
        return await self.start_append(records)

    def start_append(self, records: bytes | memoryview) -> Awaitable[int]:
        """Validate and queue the batches now (their offsets are assigned before this returns);
        the awaitable resolves to the first base offset once all are durable.

        All batches are validated before any is queued, so a bad batch stores nothing.
        """
        try:
            batches = record_batch.split_batches(records)
        except record_batch.CorruptBatch as exc:
            raise CorruptRecord(str(exc)) from None
        except record_batch.InvalidBatch as exc:
            raise InvalidRecord(str(exc)) from None
        headers = []
        for batch in batches:
            if len(batch) > self.config.max_message_bytes:
                raise RecordTooLarge(f"batch of {len(batch)} bytes is over max.message.bytes "
                                     f"{self.config.max_message_bytes}")
            headers.append(record_batch.read_header(batch))
        pending: list[Awaitable[int]] = []
        first_queued = self.log.next_offset
        with storage_errors():
            now_ms = self._clock.now_ms() if self.config.log_append_time else 0
            for batch, header in zip(batches, headers):
                idempotent = header.producer_id >= 0
                if idempotent:
                    duplicate = self.producers.check(header.producer_id, header.producer_epoch,
                                                     header.base_sequence, header.record_count)
                    if duplicate is not None:   # a retry of a stored batch: its offset, stored once
                        pending.append(_resolved(duplicate))
                        continue
                base_offset = self.log.next_offset
                if self.config.log_append_time:
                    stored = record_batch.with_log_append_time(batch, base_offset, now_ms)
                    max_timestamp = now_ms
                else:
                    stored = record_batch.with_offset_and_epoch(batch, base_offset, record_batch.NO_LEADER_EPOCH)
                    max_timestamp = header.max_timestamp
                pending.append(self.log.append(stored, header.record_count, max_timestamp))
                if idempotent:
                    self.producers.record(header.producer_id, header.producer_epoch, header.base_sequence,
                                          header.record_count, base_offset)
        return self._first_offset(pending, first_queued)

    async def _first_offset(self, pending: list[Awaitable[int]], first_queued: int) -> int:
        try:
            with storage_errors():
                # Appends complete in order, so awaiting them one by one takes no longer than a
                # gather, and needs no task per batch.
                first = await pending[0]
                for later in pending[1:]:
                    await later
        except CoreError:
            for later in pending:   # what was not awaited: no "never awaited/retrieved" warnings
                if asyncio.iscoroutine(later):
                    later.close()
                elif asyncio.isfuture(later):
                    later.add_done_callback(_retrieve)
            self.producers.forget_from(first_queued)   # nothing from here on was stored
            raise
        return first

    async def load_producer_states(self, max_scan_bytes: int = 64 << 20) -> None:
        """Rebuild the idempotent producers' state from the tail of the log (about the last
        `max_scan_bytes`); producers older than that are treated as new, as Kafka treats expired ones."""
        start, end = self.log_start_offset, self.high_watermark
        size = self.log.size_bytes
        if size > max_scan_bytes and end > start:
            start = max(start, end - (end - start) * max_scan_bytes // size)
        offset = start
        with storage_errors():
            while offset < end:
                entries = await self.log.read(offset, 4 << 20)
                if not entries:
                    break
                for entry in entries:
                    header = record_batch.read_header(entry.payload)
                    if header.producer_id >= 0:
                        self.producers.record(header.producer_id, header.producer_epoch, header.base_sequence,
                                              header.record_count, entry.base_offset)
                offset = entries[-1].next_offset

    async def read(self, offset: int, max_bytes: int) -> ReadResult:
        with storage_errors():
            entries = await self.log.read(offset, max_bytes)
        return ReadResult(b"".join(entry.payload for entry in entries), self.log.high_watermark,
                          self.log.log_start_offset)

    async def wait_for_data(self, offset: int, timeout_s: float) -> bool:
        return await self.log.wait_for_append(offset, timeout_s)

    async def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= timestamp_ms, or None."""
        with storage_errors():
            entry = await self.log.find_by_timestamp(timestamp_ms)
        while entry is not None:
            _, records = decode_batch(bytes(entry.payload), max_decompressed_bytes=MAX_DECODE_BYTES)
            for record in records:
                if record.timestamp_ms >= timestamp_ms and record.offset >= self.log_start_offset:
                    return record.offset, record.timestamp_ms
            # The entry's max timestamp was reached by a record below the log start; look further.
            with storage_errors():
                following = await self.log.read(entry.next_offset, 1) if entry.next_offset < self.high_watermark else []
            entry = following[0] if following else None
        return None

    async def delete_records_before(self, offset: int) -> int:
        """Kafka DeleteRecords: -1 means the high watermark. Returns the new log start offset."""
        target = self.high_watermark if offset == -1 else offset
        if target < 0 or target > self.high_watermark:
            raise OffsetOutOfRange(f"offset {offset} is outside [0, {self.high_watermark}]")
        with storage_errors():
            return await self.log.delete_before(target)

    async def enforce_retention(self, now_ms: int) -> int:
        with storage_errors():
            return await self.log.trim(retention_policy(self.config), now_ms)

    async def close(self) -> None:
        await self.log.close()
