"""What a queue forgets when the gateway restarts: its transient messages.

A message published as transient carries the `queue.transient` header. A durable queue loaded in
a new process first notes the high watermark of its partition, before this process appends
anything; every transient record below that mark was written by an earlier process and is
acknowledged in the cursor (dropped) before the queue hands anything out, as RabbitMQ drops the
non-persistent messages of a durable queue when it restarts.

Batches whose raw bytes do not contain the header name are skipped without decoding (the gateway
writes its batches uncompressed; compressed ones are decoded).
"""

from __future__ import annotations

from core.cursor import Cursor
from core.partition import Partition
from core.queues.attributes import TRANSIENT
from core.queues.log_records import data_records
from core.records.batch import BatchHeader
from core.records.compression import Compression

READ_BYTES = 1 << 20
_MARK = TRANSIENT.encode()


async def drop_transient(partition: Partition, cursor: Cursor, below: int) -> int:
    """Acknowledge the transient records under offset `below` that the cursor still holds; returns
    how many. The cursor is changed in memory only (its owner persists it)."""
    offset = max(cursor.committed_offset, partition.log_start_offset)
    dropped = 0
    while offset < min(below, partition.high_watermark):
        result = await partition.read(offset, READ_BYTES)
        records, next_offset = data_records(result.records, wanted=_may_hold_transient)
        for record in records:
            if (offset <= record.offset < below and not cursor.is_acked(record.offset)
                    and any(key == TRANSIENT for key, _ in record.headers)):
                cursor.ack(record.offset)
                dropped += 1
        if next_offset <= offset:
            break
        offset = next_offset
    return dropped


def _may_hold_transient(header: BatchHeader, batch: memoryview) -> bool:
    return header.compression is not Compression.NONE or _MARK in bytes(batch)
