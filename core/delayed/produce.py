"""Records that ask to be delayed on a topic with `delayed.delivery.enable=true`.

A record asks with one header, its value an ASCII decimal (no sign, at most 15 digits):
    deliver-at-ms      the epoch ms at which it becomes visible
    deliver-after-ms   ms from now
Both on one record, or a value that is not such a decimal, is INVALID_RECORD for the partition's
whole produce (nothing of it is stored). A due time not in the future delivers at once.

Only topics that opt in come here (the caller checks the flag once per partition), and a batch is
decoded only to look for the headers; a batch without them is stored as sent. A batch with some:
  - the records due later are held (core/delayed, target PARTITION "<topic>/<partition>") and
    appended at the end of the partition when due, with a new offset and their key, value and
    headers (the delay header included) plus delayed.id;
  - the others are stored at once as one batch carrying the producer's id, epoch and base sequence
    (and transactional flag), in their order; the produce answers that batch's base offset, or -1
    if every record was held;
  - idempotent producers: the batch's whole sequence range is recorded for the producer, so a retry
    of it is answered as a duplicate and the next batch follows on; once the batch is stored and
    held, and before it is acknowledged, that range is also noted (core/producer_notes.py) so that
    a restart or a new owner still knows it;
  - transactional producers: held records carry the producer id and wait, unindexed, for the
    transaction's end (store.py): a commit holds copies of them (atomically with the record of the
    outcome), an abort drops them. So they are released only if the transaction commits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from core.delayed.service import partition_target
from core.errors import CoreError, InvalidRecord
from core.names import TopicName
from core.partition import Partition
from core.producer_notes import ProducerNote
from core.records import batch as record_batch
from core.records.builder import Record, build_batch
from core.records.decoder import decode_batch

DELIVER_AT = "deliver-at-ms"
DELIVER_AFTER = "deliver-after-ms"
_MAX_DIGITS = 15


def _decimal(value: bytes | None, name: str) -> int:
    if value is None or not 0 < len(value) <= _MAX_DIGITS or not value.isdigit():
        raise InvalidRecord(f"header {name} must be an ASCII decimal of at most {_MAX_DIGITS} digits")
    return int(value)


def due_of(headers, now_ms: int) -> int | None:
    """The due time a record's headers ask for; None: no delay header."""
    due = None
    for name, value in headers:
        if name == DELIVER_AT or name == DELIVER_AFTER:
            if due is not None:
                raise InvalidRecord(f"a record may carry one of {DELIVER_AT} and {DELIVER_AFTER}, once")
            due = _decimal(value, name) if name == DELIVER_AT else now_ms + _decimal(value, name)
    return due


def start_append(core, topic: TopicName, partition: Partition, records: bytes | memoryview) -> Awaitable[int]:
    """Partition.start_append for a topic with delayed delivery: holds the records due later."""
    try:
        batches = record_batch.split_batches(records)
    except (record_batch.CorruptBatch, record_batch.InvalidBatch):
        return partition.start_append(records)       # the partition answers for it
    now_ms = core.clock.now_ms()
    plans = []
    for batch in batches:
        header = record_batch.read_header(batch)
        if header.is_control or len(batch) > partition.config.max_message_bytes:
            return partition.start_append(records)    # refused there, with the partition's error
        try:
            decoded = decode_batch(batch)[1]
        except CoreError:
            return partition.start_append(records)
        except ValueError as exc:
            raise InvalidRecord(str(exc)) from None
        dues = [due_of(record.headers, now_ms) for record in decoded]
        plans.append((batch, header, decoded, [due if due is not None and due > now_ms else None for due in dues]))
    if not any(due is not None for *_, dues in plans for due in dues):
        return partition.start_append(records)
    return _hold_and_append(core, topic, partition, plans)


def _hold_and_append(core, topic: TopicName, partition: Partition, plans) -> Awaitable[int]:
    """Everything is validated, held and queued before this returns (so pipelined batches of one
    producer see each other's sequences); the awaitable resolves once all of it is durable."""
    pending = [_one_batch(core, topic, partition, *plan) for plan in plans]
    return _first_offset(partition, pending)


async def _first_offset(partition: Partition,
                        pending: list[tuple[Awaitable[int] | None, list[Awaitable], ProducerNote | None]]) -> int:
    first = None
    for appended, held, note in pending:
        offset = await appended if appended is not None else -1
        await asyncio.gather(*held)
        if note is not None:
            await partition.note_held(note)
        if first is None:
            first = offset
    return -1 if first is None else first


def _one_batch(core, topic: TopicName, partition: Partition, batch, header, decoded, dues):
    if all(due is None for due in dues):
        return partition.start_append(batch), [], None
    idempotent = header.producer_id >= 0
    if idempotent:
        duplicate = partition.check_sequence(header.producer_id, header.producer_epoch, header.base_sequence,
                                             header.records_count)
        if duplicate is not None:
            return _resolved(duplicate), [], None
    txn = header.producer_id if header.is_transactional else None
    target = partition_target(topic.topic, partition.index)
    held = core.delayed.hold_many(topic.tenant, topic.namespace,
                                  [(Record(record.timestamp_ms, record.key, record.value, record.headers), due)
                                   for record, due in zip(decoded, dues) if due is not None],
                                  target, txn=txn)
    now = [Record(record.timestamp_ms, record.key, record.value, record.headers)
           for record, due in zip(decoded, dues) if due is None]
    appended, note = None, None
    at = partition.log.next_offset
    if now:
        appended = partition.start_append(build_batch(
            now, compression=header.compression, producer_id=header.producer_id,
            producer_epoch=header.producer_epoch, base_sequence=header.base_sequence,
            is_transactional=header.is_transactional))
    if idempotent:
        base_offset = partition.log.next_offset - len(now) if appended is not None else -1
        partition.producers.cover(header.producer_id, header.producer_epoch, header.base_sequence,
                                  header.records_count, base_offset, header.max_timestamp)
        note = ProducerNote(header.producer_id, header.producer_epoch, header.base_sequence, header.records_count,
                            base_offset, at)
    return appended, held, note


async def _resolved(value: int) -> int:
    return value
